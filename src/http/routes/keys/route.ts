/**
 * The caller's own API keys (console session or key):
 * - `GET /api/keys?limit&after`: the account's keys, newest first, a page at a time (`has_more`;
 *   the next page is `after=<the last key's id>`); never the keys themselves.
 * - `POST /api/keys` `{name, scope?, expires_at?, models?, spend_cap?, rpm?, tpm?}`: creates one
 *   and answers it with `key`, shown this once. `scope` defaults to 'account'; 'admin' only for
 *   admins. Created with a key, the new key is that key's child: no looser than it (403
 *   `key_looser_than_parent`), and working only while the parent does. An account holds at most
 *   `--max-keys-per-account` working keys (409 `too_many_keys`).
 * - `DELETE /api/keys/:id`: revokes one of the account's keys (and the keys it created); another
 *   account's is a 404. A key below scope 'admin' may revoke only itself and the keys created from
 *   it (403 `key_not_descendant`): its parent and siblings are managed from a console session or
 *   with an 'admin' key.
 * The operator (an operator key) manages the operator's keys.
 */
import type { FastifyInstance, preHandlerHookHandler } from "fastify";
import type { z } from "zod";
import type { Kysely } from "kysely";
import type { Database } from "../../../store/schema.ts";
import type { Catalog } from "../../../catalog/catalog.ts";
import { createApiKey, findApiKey, isSelfOrDescendant, listApiKeyPage, revokeApiKey, UnknownKeyCursorError, type ApiKeyRecord, type ListedApiKey } from "../../../auth/api-keys.ts";
import { ApiError, InvalidRequestError } from "../../../protocol/errors.ts";
import { createKeyRequestSchema, keyListQuerySchema } from "../../../protocol/account-api-requests.ts";
import { AdminRequiredError, principalOf } from "../../middleware/account-auth/account-auth.ts";
import { apiKeyListSchema, apiKeyObjectSchema, createdApiKeyObjectSchema, type ApiKeyObject, type CreatedApiKeyObject, type PageOf } from "../../../protocol/account-api.ts";
import { defineOperation, registerOperations } from "../../operation.ts";

export type { ApiKeyObject };


const seconds = (time: number | null) => (time === null ? null : Math.floor(time / 1000));

export function toApiKeyObject(key: ApiKeyRecord, now = Date.now()): ApiKeyObject {
  return {
    id: key.id,
    object: "api_key",
    name: key.name,
    display_prefix: key.displayPrefix,
    account_id: key.accountId,
    created: seconds(key.created)!,
    last_used: seconds(key.lastUsed),
    expires: seconds(key.expires),
    revoked: seconds(key.revoked),
    status: key.revoked !== null ? "revoked" : key.expires !== null && key.expires <= now ? "expired" : "active",
    scope: key.scope,
    parent_key_id: key.parentKeyId,
    models: key.models,
    spend_cap: key.spendCap,
    spent: key.spent,
    rpm: key.rpm,
    tpm: key.tpm,
  };
}


export class KeyNotFoundError extends ApiError {
  constructor(id: string) {
    super(`No API key with id '${id.slice(0, 64)}'.`, "key_not_found", { param: "id" });
  }
}

/** 403: a key below scope 'admin' tried to revoke a key that is neither itself nor created from it. */
export class KeyNotDescendantError extends ApiError {
  constructor(id: string) {
    super(
      `This key may revoke only itself and the keys created from it; '${id.slice(0, 64)}' is neither. Revoke it from the console, or with a key of scope 'admin'.`,
      "key_not_descendant",
      { param: "id" },
    );
  }
}

/** A key listing's query, parsed (`keyListQuerySchema`). */
export type KeyListQuery = z.output<typeof keyListQuerySchema>;

/**
 * A page of a key listing (`GET /api/keys`, `GET /api/admin/keys`); an `after` that is not a key
 * of the listing is a 400 `invalid_cursor`.
 */
export async function keyListPage(database: Kysely<Database>, query: KeyListQuery, accountId: string | null | undefined): Promise<{ data: ListedApiKey[]; hasMore: boolean }> {
  const { limit, after } = query;
  try {
    return await listApiKeyPage(database, { accountId, limit, after });
  } catch (error) {
    if (error instanceof UnknownKeyCursorError) throw new InvalidRequestError(`'after' must be the id of a key in this list; '${error.message.slice(0, 64)}' is not.`, "after", "invalid_cursor");
    throw error;
  }
}

export type KeysRoutesOptions = {
  database: Kysely<Database>;
  catalog: Catalog;
  authenticate: preHandlerHookHandler;
  /** The most working keys an account may hold (`--max-keys-per-account`); undefined: no cap. */
  maxKeysPerAccount?: number;
};

/** Refuses model ids the catalog does not serve, naming the first. */
export function checkModels(catalog: Catalog, models: string[] | null | undefined): void {
  if (models == null) return;
  const known = new Set(catalog.list().map((model) => model.id));
  const index = models.findIndex((model) => !known.has(model));
  if (index >= 0) throw new InvalidRequestError(`Invalid 'models[${index}]': there is no model '${models[index]!.slice(0, 100)}'.`, `models[${index}]`);
}

export const listKeysOperation = defineOperation({
  method: "get",
  path: "/api/keys",
  tag: "Keys",
  summary: "The account's keys, newest first (never the keys themselves); page with `after=<id>`.",
  auth: "account",
  query: keyListQuerySchema,
  example: { limit: "50" },
  success: { status: 200, description: "`{object: \"list\", data, has_more}` of `api_key` objects." },
  response: apiKeyListSchema,
  errors: ["invalid_cursor"],
  schemas: { ApiKey: apiKeyObjectSchema, ApiKeyList: apiKeyListSchema },
  async handler({ request, query }, { database }: KeysRoutesOptions): Promise<PageOf<ApiKeyObject>> {
    const { accountId } = principalOf(request);
    const page = await keyListPage(database, query(), accountId);
    return { object: "list", data: page.data.map((key) => toApiKeyObject(key)), has_more: page.hasMore };
  },
});

export const createKeyOperation = defineOperation({
  method: "post",
  path: "/api/keys",
  tag: "Keys",
  summary: "Create a key; the answer shows it this once. Created with a key, it is no looser than that key.",
  auth: "account",
  body: createKeyRequestSchema,
  example: { name: "laptop", scope: "inference", expires_at: 1_900_000_000, models: ["qwen2.5-0.5b-instruct"], spend_cap: 100_000, rpm: 60 },
  success: { status: 201, description: "The `api_key` object with `key`." },
  response: createdApiKeyObjectSchema,
  errors: ["admin_required", "key_looser_than_parent", "too_many_keys"],
  schemas: { CreateKeyRequest: createKeyRequestSchema, CreatedApiKey: createdApiKeyObjectSchema },
  async handler({ request, reply, body: parsedBody }, options: KeysRoutesOptions): Promise<CreatedApiKeyObject> {
    const principal = principalOf(request);
    const { accountId } = principal;
    const body = parsedBody();
    checkModels(options.catalog, body.models);
    const now = Date.now();
    if (body.expires_at != null && body.expires_at * 1000 <= now) throw new InvalidRequestError("Invalid 'expires_at': the time has passed already.", "expires_at");
    const scope = body.scope ?? "account";
    if (scope === "admin" && principal.role !== "admin") throw new AdminRequiredError();
    // A key creating a key makes its child: checked against it in createApiKey.
    const parent = principal.via === "key" ? (request.apiKey ?? undefined) : undefined;
    const created = await createApiKey(options.database, {
      name: body.name,
      accountId,
      scope,
      parent,
      expires: body.expires_at == null ? undefined : body.expires_at * 1000,
      models: body.models ?? undefined,
      spendCap: body.spend_cap ?? undefined,
      rpm: body.rpm ?? undefined,
      tpm: body.tpm ?? undefined,
      maxKeysPerAccount: options.maxKeysPerAccount,
      now,
    });
    request.log.info({ key_id: created.id, account_id: accountId, scope, parent_key_id: created.parentKeyId }, "api key created");
    reply.header("cache-control", "no-store");
    return { ...toApiKeyObject(created, now), key: created.key };
  },
});

export const revokeKeyOperation = defineOperation({
  method: "delete",
  path: "/api/keys/{id}",
  tag: "Keys",
  summary: "Revoke one of the account's keys and the keys it created. A key below scope `admin` may revoke only itself and the keys created from it.",
  auth: "account",
  success: { status: 200, description: "The revoked `api_key` object." },
  response: apiKeyObjectSchema,
  errors: ["key_not_found", "key_not_descendant"],
  schemas: { ApiKey: apiKeyObjectSchema },
  async handler({ request, params }, { database }: KeysRoutesOptions): Promise<ApiKeyObject> {
    const { accountId, via } = principalOf(request);
    const id = params.id;
    const key = await findApiKey(database, id);
    // Another account's key answers as if it did not exist.
    if (key === undefined || key.accountId !== accountId) throw new KeyNotFoundError(id);
    // A key below 'admin' manages its own line only: a restricted child must not revoke its parent.
    if (via === "key" && request.apiKey?.scope !== "admin") {
      const caller = request.apiKey;
      if (caller == null || !(await isSelfOrDescendant(database, id, caller.id))) throw new KeyNotDescendantError(id);
    }
    await revokeApiKey(database, id);
    request.log.info({ key_id: id, account_id: accountId }, "api key revoked");
    return toApiKeyObject((await findApiKey(database, id))!);
  },
});

export function registerKeysRoutes(app: FastifyInstance, options: KeysRoutesOptions): void {
  registerOperations(app, [listKeysOperation, createKeyOperation, revokeKeyOperation], { context: options, authenticate: { account: options.authenticate } });
}
