/**
 * `Authorization: Bearer <key>` for the `/v1` routes. Missing, unknown, revoked or expired keys
 * get 401 `invalid_api_key`; neither the error nor the logs ever hold the presented key.
 */
import type { FastifyRequest, onRequestHookHandler } from "fastify";
import type { Kysely } from "kysely";
import { touchApiKey, verifyApiKey, type ApiKeyRecord } from "../../../auth/api-keys.ts";
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

export type ApiKeyAuthOptions = { database: Kysely<Database> };

/** An `onRequest` hook: it reads only the headers, so a refused key's body is never parsed. */
export function apiKeyAuth(options: ApiKeyAuthOptions): onRequestHookHandler {
  const lastTouched = new Map<string, number>();
  return async function authenticateApiKey(request: FastifyRequest) {
    const presented = bearerToken(request);
    if (presented === undefined) {
      throw new InvalidApiKeyError("You didn't provide an API key. Pass it in the Authorization header: 'Authorization: Bearer <key>'.");
    }
    const check = await verifyApiKey(options.database, presented);
    if (!check.ok) {
      request.log.info({ reason: check.reason }, "api key refused");
      throw keyRefusal(check.reason);
    }
    request.apiKey = check.key;
    const now = Date.now();
    if ((lastTouched.get(check.key.id) ?? 0) + TOUCH_INTERVAL_MS <= now) {
      lastTouched.set(check.key.id, now);
      touchApiKey(options.database, check.key.id, now).catch((error: unknown) => request.log.warn({ err: error }, "could not record key use"));
    }
  };
}
