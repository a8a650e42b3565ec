/**
 * `Authorization: Bearer <key>` for the `/v1` routes (and `x-api-key` where Anthropic's clients call). Missing, unknown, revoked or expired keys
 * get 401 `invalid_api_key`; neither the error nor the logs ever hold the presented key.
 */
import type { FastifyRequest, onRequestHookHandler } from "fastify";
import type { Kysely } from "kysely";
import { touchApiKey, type ApiKeyRecord, type KeyCheck } from "../../../auth/api-keys.ts";
import type { VerifiedKeys } from "../../../auth/verified-keys.ts";
import type { Database } from "../../../store/schema.ts";
import { InvalidApiKeyError } from "../../../protocol/errors.ts";
import { bearerToken, keyRefusal } from "../account-auth/account-auth.ts";

declare module "fastify" {
  interface FastifyRequest {
    /** The key that authenticated this request (never the key's text). */
    apiKey: ApiKeyRecord | null;
  }
}

/** How often `last_used_at` is written for one key. */
const TOUCH_INTERVAL_MS = 60_000;

export type ApiKeyAuthOptions = {
  database: Kysely<Database>;
  /** Where keys are verified (from memory for a moment, `verified-keys.ts`). */
  keys: VerifiedKeys;
  /**
   * Also take the key as `x-api-key` (what the Anthropic SDKs and Claude Code send), before
   * `Authorization: Bearer`: on the Anthropic routes and the model list.
   */
  xApiKey?: boolean;
};

/** The `x-api-key` header's key, when there is one. */
function xApiKeyOf(request: FastifyRequest): string | undefined {
  const header = request.headers["x-api-key"];
  const value = (Array.isArray(header) ? header[0] : header)?.trim();
  return value === undefined || value === "" ? undefined : value;
}

/** An `onRequest` hook: it reads only the headers, so a refused key's body is never parsed. */
export function apiKeyAuth(options: ApiKeyAuthOptions): onRequestHookHandler {
  const lastTouched = new Map<string, number>();
  const missing = options.xApiKey === true
    ? "You didn't provide an API key. Pass it in the 'x-api-key' header, or as 'Authorization: Bearer <key>'."
    : "You didn't provide an API key. Pass it in the Authorization header: 'Authorization: Bearer <key>'.";
  /** The request's key once checked: undefined when it may go on, else the refusal. */
  const accept = (request: FastifyRequest, check: KeyCheck): Error | undefined => {
    if (!check.ok) {
      request.log.info({ reason: check.reason }, "api key refused");
      return keyRefusal(check.reason);
    }
    request.apiKey = check.key;
    const now = Date.now();
    if ((lastTouched.get(check.key.id) ?? 0) + TOUCH_INTERVAL_MS <= now) {
      lastTouched.set(check.key.id, now);
      touchApiKey(options.database, check.key.id, now).catch((error: unknown) => request.log.warn({ err: error }, "could not record key use"));
    }
    return undefined;
  };
  // Synchronous (no promise) for a key verified a moment ago: the common request of a busy key.
  return function authenticateApiKey(request, _reply, done) {
    const presented = (options.xApiKey === true ? xApiKeyOf(request) : undefined) ?? bearerToken(request);
    if (presented === undefined) return done(new InvalidApiKeyError(missing));
    const known = options.keys.known(presented);
    if (known !== undefined) return done(accept(request, known));
    options.keys.verify(presented).then(
      (check) => done(accept(request, check)),
      (error: unknown) => done(error as Error),
    );
  };
}
