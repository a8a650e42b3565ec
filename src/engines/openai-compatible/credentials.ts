/**
 * An upstream that refuses Turnpike's credentials (401 or 403) is not "down": it answers, and will
 * go on refusing until the operator fixes the key. This is the one home of how that is recognised
 * and said, naming the setting the key comes from (never the key).
 */
import type { UpstreamEntry } from "./config-schema.ts";
import type { JsonAnswer } from "./upstream-json.ts";
import type { RefusalStatus } from "./pool-types.ts";

/** 401 or 403 when the answer refused the credentials; else undefined. */
export function refusalOf(answer: JsonAnswer): RefusalStatus | undefined {
  return !answer.ok && (answer.status === 401 || answer.status === 403) ? answer.status : undefined;
}

/** `401 Unauthorized` / `403 Forbidden`. */
export function refusalText(status: RefusalStatus): string {
  return status === 401 ? "401 Unauthorized" : "403 Forbidden";
}

/**
 * Where the credentials sent to a member come from, as the operator sets them: the entry's
 * `upstream.api_key_env` and the variable it names, the member URL's `user:password@`, or nothing
 * (then the advice is to set `api_key_env`).
 */
export function credentialsSource(upstream: Pick<UpstreamEntry, "api_key_env">, memberUrl?: string): string {
  if (upstream.api_key_env !== undefined) return `the key comes from the environment variable ${upstream.api_key_env} (the model entry's upstream.api_key_env)`;
  if (memberUrl !== undefined && /^[a-z]+:\/\/[^/@]+@/i.test(memberUrl)) return "the credentials come from the user:password in the member's URL";
  return "no key is sent: set the model entry's upstream.api_key_env to the environment variable that holds the key";
}

/** `<where>: 401 Unauthorized: the server refused the credentials; <source>`. */
export function refusalDetail(where: string, status: RefusalStatus, source: string): string {
  return `${where}: ${refusalText(status)}: the server refused the credentials; ${source}`;
}
