/**
 * Administration of accounts and keys (admins only: an admin's console session, or a key with
 * scope 'admin' of an admin account or of the operator; see `requireAdmin`):
 * - `GET /api/admin/accounts`: every account with balance, plan and state.
 * - `POST /api/admin/accounts/:id/grant` `{plan}`: grants a plan (offline sales).
 * - `POST /api/admin/accounts/:id/disable`, `.../enable`: a disabled account cannot sign in,
 *   its sessions end, and its keys stop working on `/v1` (403 `account_disabled`).
 * - `GET /api/admin/keys?limit&after`: every key with its owner's email, newest first, a page at a
 *   time (`has_more`; the next page is `after=<the last key's id>`); `DELETE /api/admin/keys/:id`
 *   revokes any (and the keys it created).
 */
import type { FastifyInstance, FastifyRequest, preHandlerHookHandler } from "fastify";
import type { Kysely } from "kysely";
import type { Database } from "../../../store/schema.ts";
import type { Plan } from "../../../protocol/plans.ts";
import { findAccountById, listAccounts } from "../../../accounts/accounts.ts";
import { describeAccount, type AccountDescription } from "../../../accounts/describe-account.ts";
import { findApiKey, revokeApiKey } from "../../../auth/api-keys.ts";
import { noteChange } from "../../../store/changes.ts";
import { deleteAccountSessions } from "../../../auth/sessions.ts";
import { grantPlan } from "../../../billing/grant-plan.ts";
import { newId } from "../../../store/ids.ts";
import { ApiError, InvalidRequestError } from "../../../protocol/errors.ts";
import { grantPlanRequestSchema, keyListQuerySchema } from "../../../protocol/account-api-requests.ts";
import { requireAdmin } from "../../middleware/account-auth/account-auth.ts";
import { KeyNotFoundError, keyListPage, toApiKeyObject } from "../keys/route.ts";
import {
  accountObjectSchema,
  adminAccountListSchema,
  adminAccountSchema,
  adminApiKeyListSchema,
  adminApiKeyObjectSchema,
  apiKeyObjectSchema,
  grantedAccountSchema,
  type AdminAccount,
  type AdminApiKeyObject,
  type ApiKeyObject,
  type GrantedAccount,
  type ListOf,
  type PageOf,
} from "../../../protocol/account-api.ts";
import { defineOperation, registerOperations } from "../../operation.ts";

export type AdminAccountsRoutesOptions = {
  database: Kysely<Database>;
  /** Plans on offer now. */
  plans: () => Plan[];
  authenticate: preHandlerHookHandler;
};

class AccountNotFoundApiError extends ApiError {
  constructor(id: string) {
    super(`No account with id '${id.slice(0, 64)}'.`, "account_not_found", { param: "id" });
  }
}


async function existingAccount(database: Kysely<Database>, id: string) {
  const account = await findAccountById(database, id);
  if (account === undefined) throw new AccountNotFoundApiError(id);
  return account;
}

export const listAccountsOperation = defineOperation({
  method: "get",
  path: "/api/admin/accounts",
  tag: "Admin",
  summary: "Every account, with its balance, plan and active keys.",
  auth: "admin",
  success: { status: 200, description: "A list of accounts." },
  response: adminAccountListSchema,
  errors: [],
  schemas: { AdminAccount: adminAccountSchema, AdminAccountList: adminAccountListSchema },
  async handler(_call, { database, plans: plansOnOffer }: AdminAccountsRoutesOptions): Promise<ListOf<AdminAccount>> {
    const accounts = await listAccounts(database);
    const plans = new Map(plansOnOffer().map((plan) => [plan.id, plan]));
    const keyCounts = await database
      .selectFrom("api_keys")
      .select(["account_id", (expression) => expression.fn.countAll<number>().as("keys")])
      .where("revoked_at", "is", null)
      .groupBy("account_id")
      .execute();
    const keys = new Map(keyCounts.map((row) => [row.account_id, Number(row.keys)]));
    return {
      object: "list",
      data: accounts.map((account) => ({
        id: account.id,
        email: account.email,
        role: account.role,
        balance: account.balance,
        plan: account.planId === null ? null : (plans.get(account.planId) ?? { id: account.planId, name: account.planId }),
        active_keys: keys.get(account.id) ?? 0,
        created: Math.floor(account.created / 1000),
        disabled: account.disabled === null ? null : Math.floor(account.disabled / 1000),
      })),
    };
  },
});

export const grantPlanOperation = defineOperation({
  method: "post",
  path: "/api/admin/accounts/{id}/grant",
  tag: "Admin",
  summary: "Grant a plan to an account (offline sales).",
  auth: "admin",
  body: grantPlanRequestSchema,
  example: { plan: "starter" },
  success: { status: 200, description: "The account, with `granted`." },
  response: grantedAccountSchema,
  errors: ["account_not_found", "plan_out_of_bounds", "balance_limit_exceeded"],
  schemas: { GrantPlanRequest: grantPlanRequestSchema, GrantedAccount: grantedAccountSchema },
  async handler({ request, params, body: parsedBody }, { database, plans }: AdminAccountsRoutesOptions): Promise<GrantedAccount> {
    const admin = requireAdmin(request);
    const body = parsedBody();
    const account = await existingAccount(database, params.id);
    const plan = plans().find((candidate) => candidate.id === body.plan);
    if (plan === undefined) throw new InvalidRequestError(`Invalid 'plan': there is no plan '${body.plan.slice(0, 100)}'.`, "plan");
    const { granted } = await grantPlan(database, { accountId: account.id, plan, source: `admin:${newId("grant")}` });
    request.log.info({ account_id: account.id, plan_id: plan.id, by: admin.accountId }, "plan granted by admin");
    return { ...(await describeAccount(database, account.id)), granted };
  },
});

/** Disables or enables an account; a disabled account's sessions end at once. */
async function setAccountEnabled(request: FastifyRequest, database: Kysely<Database>, id: string, action: "disable" | "enable"): Promise<AccountDescription> {
  const admin = requireAdmin(request);
  const account = await existingAccount(database, id);
  if (action === "disable" && admin.accountId === account.id) throw new InvalidRequestError("You cannot disable your own account.", "id", "cannot_disable_self");
  await database
    .updateTable("accounts")
    .set({ disabled_at: action === "disable" ? Date.now() : null })
    .where("id", "=", account.id)
    .execute();
  // Its keys, cached as verified on this node, are looked up again.
  noteChange(database);
  if (action === "disable") await deleteAccountSessions(database, account.id);
  request.log.info({ account_id: account.id, by: admin.accountId }, `account ${action}d`);
  return describeAccount(database, account.id);
}

export const disableAccountOperation = defineOperation({
  method: "post",
  path: "/api/admin/accounts/{id}/disable",
  tag: "Admin",
  summary: "Disable an account: its sessions end and its keys stop working.",
  auth: "admin",
  success: { status: 200, description: "The account." },
  response: accountObjectSchema,
  errors: ["account_not_found", "cannot_disable_self"],
  schemas: { Account: accountObjectSchema },
  async handler({ request, params }, { database }: AdminAccountsRoutesOptions): Promise<AccountDescription> {
    return setAccountEnabled(request, database, params.id, "disable");
  },
});

export const enableAccountOperation = defineOperation({
  method: "post",
  path: "/api/admin/accounts/{id}/enable",
  tag: "Admin",
  summary: "Enable a disabled account.",
  auth: "admin",
  success: { status: 200, description: "The account." },
  response: accountObjectSchema,
  errors: ["account_not_found"],
  schemas: { Account: accountObjectSchema },
  async handler({ request, params }, { database }: AdminAccountsRoutesOptions): Promise<AccountDescription> {
    return setAccountEnabled(request, database, params.id, "enable");
  },
});

export const listAllKeysOperation = defineOperation({
  method: "get",
  path: "/api/admin/keys",
  tag: "Admin",
  summary: "Every key, with its owner's email, newest first; page with `after=<id>`.",
  auth: "admin",
  query: keyListQuerySchema,
  example: { limit: "50" },
  success: { status: 200, description: "`{object: \"list\", data, has_more}` of `api_key` objects with `account_email`." },
  response: adminApiKeyListSchema,
  errors: ["invalid_cursor"],
  schemas: { AdminApiKey: adminApiKeyObjectSchema, AdminApiKeyList: adminApiKeyListSchema },
  async handler({ query }, { database }: AdminAccountsRoutesOptions): Promise<PageOf<AdminApiKeyObject>> {
    const page = await keyListPage(database, query(), undefined);
    return { object: "list", data: page.data.map((key) => ({ ...toApiKeyObject(key), account_email: key.accountEmail })), has_more: page.hasMore };
  },
});

export const revokeAnyKeyOperation = defineOperation({
  method: "delete",
  path: "/api/admin/keys/{id}",
  tag: "Admin",
  summary: "Revoke any key.",
  auth: "admin",
  success: { status: 200, description: "The revoked `api_key` object." },
  response: apiKeyObjectSchema,
  errors: ["key_not_found"],
  schemas: { ApiKey: apiKeyObjectSchema },
  async handler({ request, params }, { database }: AdminAccountsRoutesOptions): Promise<ApiKeyObject> {
    const admin = requireAdmin(request);
    const id = params.id;
    if ((await findApiKey(database, id)) === undefined) throw new KeyNotFoundError(id);
    await revokeApiKey(database, id);
    request.log.info({ key_id: id, by: admin.accountId }, "api key revoked by admin");
    return toApiKeyObject((await findApiKey(database, id))!);
  },
});

/** The accounts' half of the admin API, in the document's order; the keys' half is `ADMIN_KEY_OPERATIONS`. */
export const ADMIN_ACCOUNT_OPERATIONS = [listAccountsOperation, grantPlanOperation, disableAccountOperation, enableAccountOperation];
export const ADMIN_KEY_OPERATIONS = [listAllKeysOperation, revokeAnyKeyOperation];

export function registerAdminAccountsRoutes(app: FastifyInstance, options: AdminAccountsRoutesOptions): void {
  registerOperations(app, [...ADMIN_ACCOUNT_OPERATIONS, ...ADMIN_KEY_OPERATIONS], { context: options, authenticate: { account: options.authenticate } });
}
