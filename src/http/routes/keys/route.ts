/**
 * The caller's own API keys (console session or key):
 * - `GET /api/keys`: the account's keys, newest first; never the keys themselves.
 * - `POST /api/keys` `{name, scope?, expires_at?, models?, spend_cap?, rpm?, tpm?}`: creates one
 *   and answers it with `key`, shown this once. `scope` defaults to 'account'; 'admin' only for
 *   admins. Created with a key, the new key is that key's child: no looser than it (403
 *   `key_looser_than_parent`), and working only while the parent does.
 * - `DELETE /api/keys/:id`: revokes one of the account's keys (and the keys it created); another
 *   account's is a 404.
 * The operator (an operator key) manages the operator's keys.
 */
import type { FastifyInstance, preHandlerHookHandler } from "fastify";
import type { Kysely } from "kysely";
import type { Database } from "../../../store/schema.ts";
import type { Catalog } from "../../../catalog/catalog.ts";
import { createApiKey, findApiKey, listApiKeys, revokeApiKey, type ApiKeyRecord } from "../../../auth/api-keys.ts";
import { ApiError, InvalidRequestError } from "../../../protocol/errors.ts";
import { parseWithSchema } from "../../../protocol/parse.ts";
import { createKeyRequestSchema } from "../../../protocol/account-api-requests.ts";
import { AdminRequiredError, principalOf } from "../../middleware/account-auth/account-auth.ts";
import type { ApiKeyObject, CreatedApiKeyObject, ListOf } from "../../../protocol/account-api.ts";

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

export type KeysRoutesOptions = {
  database: Kysely<Database>;
  catalog: Catalog;
  authenticate: preHandlerHookHandler;
};

/** Refuses model ids the catalog does not serve, naming the first. */
export function checkModels(catalog: Catalog, models: string[] | null | undefined): void {
  if (models == null) return;
  const known = new Set(catalog.list().map((model) => model.id));
  const index = models.findIndex((model) => !known.has(model));
  if (index >= 0) throw new InvalidRequestError(`Invalid 'models[${index}]': there is no model '${models[index]!.slice(0, 100)}'.`, `models[${index}]`);
}

export function registerKeysRoutes(app: FastifyInstance, options: KeysRoutesOptions): void {
  const { database } = options;

  app.get("/api/keys", { preHandler: options.authenticate }, async function listOwnKeys(request): Promise<ListOf<ApiKeyObject>> {
    const { accountId } = principalOf(request);
    return { object: "list", data: (await listApiKeys(database, accountId)).map((key) => toApiKeyObject(key)) };
  });

  app.post("/api/keys", { preHandler: options.authenticate }, async function createOwnKey(request, reply): Promise<CreatedApiKeyObject> {
    const principal = principalOf(request);
    const { accountId } = principal;
    const body = parseWithSchema(createKeyRequestSchema, request.body);
    checkModels(options.catalog, body.models);
    const now = Date.now();
    if (body.expires_at != null && body.expires_at * 1000 <= now) throw new InvalidRequestError("Invalid 'expires_at': the time has passed already.", "expires_at");
    const scope = body.scope ?? "account";
    if (scope === "admin" && principal.role !== "admin") throw new AdminRequiredError();
    // A key creating a key makes its child: checked against it in createApiKey.
    const parent = principal.via === "key" ? (request.apiKey ?? undefined) : undefined;
    const created = await createApiKey(database, {
      name: body.name,
      accountId,
      scope,
      parent,
      expires: body.expires_at == null ? undefined : body.expires_at * 1000,
      models: body.models ?? undefined,
      spendCap: body.spend_cap ?? undefined,
      rpm: body.rpm ?? undefined,
      tpm: body.tpm ?? undefined,
      now,
    });
    request.log.info({ key_id: created.id, account_id: accountId, scope, parent_key_id: created.parentKeyId }, "api key created");
    reply.code(201).header("cache-control", "no-store");
    return { ...toApiKeyObject(created, now), key: created.key };
  });

  app.delete("/api/keys/:id", { preHandler: options.authenticate }, async function revokeOwnKey(request): Promise<ApiKeyObject> {
    const { accountId } = principalOf(request);
    const { id } = request.params as { id: string };
    const key = await findApiKey(database, id);
    // Another account's key answers as if it did not exist.
    if (key === undefined || key.accountId !== accountId) throw new KeyNotFoundError(id);
    await revokeApiKey(database, id);
    request.log.info({ key_id: id, account_id: accountId }, "api key revoked");
    return toApiKeyObject((await findApiKey(database, id))!);
  });
}
