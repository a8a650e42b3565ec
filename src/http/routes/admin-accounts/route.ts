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
import { deleteAccountSessions } from "../../../auth/sessions.ts";
import { grantPlan } from "../../../billing/grant-plan.ts";
import { newId } from "../../../store/ids.ts";
import { ApiError, InvalidRequestError } from "../../../protocol/errors.ts";
import { parseWithSchema } from "../../../protocol/parse.ts";
import { grantPlanRequestSchema } from "../../../protocol/account-api-requests.ts";
import { requireAdmin } from "../../middleware/account-auth/account-auth.ts";
import { KeyNotFoundError, keyListPage, toApiKeyObject } from "../keys/route.ts";
import type { AdminAccount, AdminApiKeyObject, ApiKeyObject, GrantedAccount, ListOf, PageOf } from "../../../protocol/account-api.ts";

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


export function registerAdminAccountsRoutes(app: FastifyInstance, options: AdminAccountsRoutesOptions): void {
  const { database } = options;
  const adminOnly = {
    preHandler: [
      options.authenticate,
      async function adminOnly(request: FastifyRequest) {
        requireAdmin(request);
      },
    ],
  };

  async function existingAccount(id: string) {
    const account = await findAccountById(database, id);
    if (account === undefined) throw new AccountNotFoundApiError(id);
    return account;
  }

  app.get("/api/admin/accounts", adminOnly, async function listAllAccounts(): Promise<ListOf<AdminAccount>> {
    const accounts = await listAccounts(database);
    const plans = new Map(options.plans().map((plan) => [plan.id, plan]));
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
  });

  app.post("/api/admin/accounts/:id/grant", adminOnly, async function grantAccountPlan(request): Promise<GrantedAccount> {
    const admin = requireAdmin(request);
    const { id } = request.params as { id: string };
    const body = parseWithSchema(grantPlanRequestSchema, request.body);
    const account = await existingAccount(id);
    const plan = options.plans().find((candidate) => candidate.id === body.plan);
    if (plan === undefined) throw new InvalidRequestError(`Invalid 'plan': there is no plan '${body.plan.slice(0, 100)}'.`, "plan");
    const { granted } = await grantPlan(database, { accountId: account.id, plan, source: `admin:${newId("grant")}` });
    request.log.info({ account_id: account.id, plan_id: plan.id, by: admin.accountId }, "plan granted by admin");
    return { ...(await describeAccount(database, account.id)), granted };
  });

  for (const action of ["disable", "enable"] as const) {
    app.post(`/api/admin/accounts/:id/${action}`, adminOnly, async function setAccountEnabled(request): Promise<AccountDescription> {
      const admin = requireAdmin(request);
      const { id } = request.params as { id: string };
      const account = await existingAccount(id);
      if (action === "disable" && admin.accountId === account.id) throw new InvalidRequestError("You cannot disable your own account.", "id", "cannot_disable_self");
      await database
        .updateTable("accounts")
        .set({ disabled_at: action === "disable" ? Date.now() : null })
        .where("id", "=", account.id)
        .execute();
      if (action === "disable") await deleteAccountSessions(database, account.id);
      request.log.info({ account_id: account.id, by: admin.accountId }, `account ${action}d`);
      return describeAccount(database, account.id);
    });
  }

  app.get("/api/admin/keys", adminOnly, async function listAllKeys(request): Promise<PageOf<AdminApiKeyObject>> {
    const page = await keyListPage(database, request.query, undefined);
    return { object: "list", data: page.data.map((key) => ({ ...toApiKeyObject(key), account_email: key.accountEmail })), has_more: page.hasMore };
  });

  app.delete("/api/admin/keys/:id", adminOnly, async function revokeAnyKey(request): Promise<ApiKeyObject> {
    const admin = requireAdmin(request);
    const { id } = request.params as { id: string };
    if ((await findApiKey(database, id)) === undefined) throw new KeyNotFoundError(id);
    await revokeApiKey(database, id);
    request.log.info({ key_id: id, by: admin.accountId }, "api key revoked by admin");
    return toApiKeyObject((await findApiKey(database, id))!);
  });
}
