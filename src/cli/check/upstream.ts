/**
 * `turnpike check`'s line per upstream member: whether it answers, the kind it is (configured or
 * detected), the models it lists, the context length it serves the model with, and whether it
 * accepts Turnpike's credentials (a 401/403 is said as a refusal, naming the setting the key comes
 * from, never as "down"). Every call is bounded by the check's timeout; the key is sent, never shown.
 */
import type { UpstreamEntry, UpstreamKind } from "../../engines/openai-compatible/config-schema.ts";
import { detectContextLength } from "../../engines/openai-compatible/context-length.ts";
import { credentialsSource, refusalDetail, refusalOf } from "../../engines/openai-compatible/credentials.ts";
import type { RefusalStatus } from "../../engines/openai-compatible/pool-types.ts";
import { detectKind } from "../../engines/openai-compatible/detect.ts";
import { credentialsUrl, probeMember } from "../../engines/openai-compatible/health.ts";
import { UpstreamClient } from "../../engines/openai-compatible/upstream-client.ts";
import { callJson, type JsonAnswer } from "../../engines/openai-compatible/upstream-json.ts";
import { memberName, memberUrl, normalizeBaseUrl, withoutCredentials, type MemberEntry } from "../../engines/openai-compatible/upstream-url.ts";
import type { CheckResult } from "./result.ts";

export type UpstreamModel = { id: string; context_length?: number; upstream: UpstreamEntry };

/** Why a call got no usable answer, in words. */
function failureWords(answer: Extract<JsonAnswer, { ok: false }>, timeoutMs: number): string {
  if (answer.failure === "connect") return "unreachable (the connection failed)";
  if (answer.failure === "timeout") return `no answer within ${timeoutMs / 1000} s`;
  if (answer.failure === "status") return answer.status === 503 ? "not ready (503: still loading?)" : `answered ${answer.status}`;
  return "answered something that is not the JSON it should be";
}

/** The ids a `/v1/models` answer lists, or undefined when it is no list. */
function modelIds(answer: JsonAnswer): string[] | undefined {
  if (!answer.ok) return undefined;
  const data = (answer.body as { data?: unknown } | null)?.data;
  return Array.isArray(data) ? data.flatMap((model) => (typeof (model as { id?: unknown })?.id === "string" ? [(model as { id: string }).id] : [])) : undefined;
}

/** Checks one member of an upstream model's pool. `apiKey`: the key the entry's variable holds (undefined when it names none). */
export async function checkUpstreamMember(model: UpstreamModel, member: MemberEntry, index: number, apiKey: string | undefined, timeoutMs: number): Promise<CheckResult> {
  const upstream = model.upstream;
  const name = memberName(model.id, member, index);
  const rawUrl = memberUrl(member);
  const baseUrl = normalizeBaseUrl(rawUrl);
  const url = withoutCredentials(baseUrl);
  const facts: Record<string, unknown> = { model: model.id, member: name, url };
  const fail = (detail: string): CheckResult => ({ check: "upstream", name, ok: false, detail: `${url}: ${detail}`, facts });
  if (upstream.api_key_env !== undefined && (apiKey === undefined || apiKey === "")) {
    return fail(`the environment variable ${upstream.api_key_env} (the model entry's upstream.api_key_env: its API key) is not set`);
  }

  let refused: RefusalStatus | undefined;
  const detected = await detectKind(baseUrl, apiKey, { timeoutMs, onRefused: (status) => (refused ??= status) });
  const kind: UpstreamKind | undefined = upstream.kind ?? detected;
  const health = await probeMember(kind, baseUrl, { apiKey, timeoutMs });
  refused ??= refusalOf(health);
  const credentials = await callJson(credentialsUrl(kind, baseUrl), { apiKey, timeoutMs, maxBytes: 1024 * 1024 });
  refused ??= refusalOf(credentials);
  Object.assign(facts, { reachable: health.ok || (!health.ok && health.failure === "status"), kind: kind ?? null, kind_source: upstream.kind !== undefined ? "configured" : "detected" });
  if (refused !== undefined) {
    Object.assign(facts, { credentials: "refused", status: refused });
    return { check: "upstream", name, ok: false, detail: refusalDetail(url, refused, credentialsSource(upstream, rawUrl)), facts };
  }
  if (!health.ok) return fail(failureWords(health, timeoutMs));
  facts.credentials = apiKey === undefined ? "none sent" : "accepted";

  const listed = modelIds(await callJson(`${baseUrl}/models`, { apiKey, timeoutMs, maxBytes: 4 * 1024 * 1024 }));
  facts.models = listed ?? null;
  const upstreamModel = upstream.model ?? model.id;
  let contextLength = model.context_length;
  let contextWords = contextLength === undefined ? "" : `context ${contextLength} tokens (configured)`;
  if (contextLength === undefined) {
    const client = new UpstreamClient({ connectTimeoutMs: timeoutMs, connectionsPerOrigin: 1, ...(apiKey !== undefined ? { apiKey } : {}) });
    try {
      const found = await detectContextLength({ client, kind, baseUrls: [baseUrl], model: upstreamModel, signal: AbortSignal.timeout(timeoutMs * 2) });
      if (found.contextLength === undefined) {
        Object.assign(facts, { context_length: null });
        return fail(`${kind ?? "unknown kind"}, but ${found.reason}`);
      }
      contextLength = found.contextLength;
      contextWords = `context ${contextLength} tokens${found.note !== undefined ? " (assumed: set the entry's context_length)" : ""}`;
    } finally {
      await client.close();
    }
  }
  facts.context_length = contextLength;
  // llama-server answers to any model name; the others serve the names they list.
  if (listed !== undefined && kind !== "llama-server" && !listed.includes(upstreamModel)) {
    return fail(`${kind ?? "unknown kind"}, does not list the model ${upstreamModel} (it lists ${listed.slice(0, 5).join(", ") || "none"}${listed.length > 5 ? ", …" : ""}): set the entry's upstream.model to its name there`);
  }
  const served = listed === undefined ? "lists no models" : `serves ${listed.slice(0, 3).join(", ") || "no models"}${listed.length > 3 ? ", …" : ""}`;
  const key = apiKey === undefined ? "no key sent" : "credentials accepted";
  return { check: "upstream", name, ok: true, detail: `${url}: ${kind ?? "unknown kind"}, ${served}, ${contextWords}, ${key}`, facts };
}
