/**
 * `GET /api/billing/history?limit&before`: the account's ledger entries newest first, each with
 * the balance after it (see `billing/history.ts` for what is listed). Pages: pass the last
 * entry's `id` as `before`. Admins (and admin-scoped keys) may name another account with `account_id`.
 */
import type { FastifyInstance, preHandlerHookHandler } from "fastify";
import type { Kysely } from "kysely";
import type { Database } from "../../../store/schema.ts";
import { billingHistory, UnknownCursorError } from "../../../billing/history.ts";
import { findAccountById } from "../../../accounts/accounts.ts";
import { billingHistoryQuerySchema } from "../../../protocol/account-api-requests.ts";
import { ApiError, InvalidRequestError } from "../../../protocol/errors.ts";
import { accountIdOf, requireAdmin } from "../../middleware/account-auth/account-auth.ts";
import { historyEntrySchema, historyPageSchema, type HistoryPage } from "../../../protocol/billing-history.ts";
import { defineOperation, registerOperations } from "../../operation.ts";

export type BillingHistoryRouteOptions = { database: Kysely<Database>; authenticate: preHandlerHookHandler };

export const billingHistoryOperation = defineOperation({
  method: "get",
  path: "/api/billing/history",
  tag: "Billing",
  summary: "The account's ledger entries newest first (grants, purchases, codes, usage charges, expiries), with the balance after each; page with `before=<id>`.",
  auth: "account",
  query: billingHistoryQuerySchema,
  example: { limit: "20" },
  success: { status: 200, description: "`{object: \"list\", data, has_more}`; `created` in seconds, `amount` and `balance_after` in credits." },
  response: historyPageSchema,
  errors: ["account_required", "invalid_cursor", "account_not_found", "admin_required", "admin_scope_required"],
  schemas: { BillingHistoryEntry: historyEntrySchema, BillingHistoryPage: historyPageSchema },
  async handler({ request, reply, query: parsedQuery }, options: BillingHistoryRouteOptions): Promise<HistoryPage> {
    const query = parsedQuery();
    let accountId: string;
    if (query.account_id !== undefined) {
      requireAdmin(request);
      if ((await findAccountById(options.database, query.account_id)) === undefined) {
        throw new ApiError(`No account with id '${query.account_id}'.`, "account_not_found", { param: "account_id" });
      }
      accountId = query.account_id;
    } else {
      accountId = accountIdOf(request, "Billing history");
    }
    reply.header("cache-control", "no-store");
    try {
      const page = await billingHistory(options.database, { accountId, limit: query.limit, before: query.before });
      return { object: "list", data: page.data, has_more: page.hasMore };
    } catch (error) {
      if (error instanceof UnknownCursorError) throw new InvalidRequestError(`'before' must be the id of an entry in this account's history; '${error.message}' is not.`, "before", "invalid_cursor");
      throw error;
    }
  },
});

export function registerBillingHistoryRoute(app: FastifyInstance, options: BillingHistoryRouteOptions): void {
  registerOperations(app, [billingHistoryOperation], { context: options, authenticate: { account: options.authenticate } });
}
