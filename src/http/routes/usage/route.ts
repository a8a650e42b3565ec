/**
 * `GET /api/usage` (sums grouped by day, model or key) and `GET /api/usage/requests` (recent
 * requests) for the caller's account. Admins (and operator keys) may name any account with
 * `account=<id>`, or `account=all`. Times on the wire are seconds since the epoch. With a
 * `credit_value` setting, each row's credit `cost` comes with `cost_money` (an exact decimal
 * string) and the response names its `currency`.
 */
import type { FastifyInstance, FastifyRequest, preHandlerHookHandler } from "fastify";
import type { Kysely } from "kysely";
import type { Database } from "../../../store/schema.ts";
import { queryUsage, recentRequests } from "../../../billing/usage.ts";
import { recentRequestsQuerySchema, usageQuerySchema } from "../../../protocol/account-api-requests.ts";
import { InvalidRequestError } from "../../../protocol/errors.ts";
import { principalOf, requireAdmin } from "../../middleware/account-auth/account-auth.ts";
import type { CreditValue } from "../../../protocol/credit-value.ts";
import { moneyCurrency, withMoneyCosts } from "../../../billing/usage-money.ts";
import { recentRequestsResponseSchema, usageResponseSchema, type RecentRequestsResponse, type UsageResponse } from "../../../protocol/account-api.ts";
import { defineOperation, registerOperations } from "../../operation.ts";

export type UsageRouteOptions = {
  database: Kysely<Database>;
  authenticate: preHandlerHookHandler;
  /** What a credit is worth (costs are shown in money too); null or absent: credits only. */
  creditValue?: CreditValue | null;
};

const DAY_MS = 86_400_000;

/** The account whose usage to read: the caller's own, or (admins only) the one named. undefined: every account. */
function accountScope(request: FastifyRequest, named: string | undefined): string | null | undefined {
  const principal = principalOf(request);
  if (named !== undefined) {
    requireAdmin(request);
    return named === "all" ? undefined : named === "operator" ? null : named;
  }
  return principal.accountId;
}

export const usageOperation = defineOperation({
  method: "get",
  path: "/api/usage",
  tag: "Usage",
  summary: "Requests, tokens and cost summed per UTC day, model or key over `[from, to)`.",
  auth: "account",
  query: usageQuerySchema,
  example: { from: "2026-11-01", to: "1795000000", group_by: "model" },
  success: { status: 200, description: "`{object: \"list\", group_by, from, to, data}`; times in seconds." },
  response: usageResponseSchema,
  errors: ["admin_required", "admin_scope_required"],
  schemas: { UsageReport: usageResponseSchema },
  async handler({ request, query: parsedQuery }, options: UsageRouteOptions): Promise<UsageResponse> {
    const creditValue = options.creditValue ?? null;
    const query = parsedQuery();
    const to = query.to ?? Date.now();
    const from = query.from ?? to - 30 * DAY_MS;
    if (from >= to) throw new InvalidRequestError("'from' must be before 'to'.", "from");
    if (to - from > 3660 * DAY_MS) throw new InvalidRequestError("The range may span at most ten years.", "from");
    const accountId = accountScope(request, query.account);
    const data = await queryUsage(options.database, { accountId, from, to, groupBy: query.group_by });
    return { object: "list", group_by: query.group_by, from: Math.floor(from / 1000), to: Math.floor(to / 1000), ...moneyCurrency(creditValue), data: withMoneyCosts(data, creditValue) };
  },
});

export const recentRequestsOperation = defineOperation({
  method: "get",
  path: "/api/usage/requests",
  tag: "Usage",
  summary: "The newest requests first; page with `after=<id>`.",
  auth: "account",
  query: recentRequestsQuerySchema,
  example: { limit: "20" },
  success: { status: 200, description: "`{object: \"list\", data, has_more}`; `created` in seconds, `latency_ms` in milliseconds." },
  response: recentRequestsResponseSchema,
  errors: ["admin_required", "admin_scope_required"],
  schemas: { RecentRequests: recentRequestsResponseSchema },
  async handler({ request, query: parsedQuery }, options: UsageRouteOptions): Promise<RecentRequestsResponse> {
    const creditValue = options.creditValue ?? null;
    const query = parsedQuery();
    const accountId = accountScope(request, query.account);
    const data = await recentRequests(options.database, { accountId, limit: query.limit, before: query.before, after: query.after });
    return { object: "list", ...moneyCurrency(creditValue), data: withMoneyCosts(data, creditValue), has_more: data.length === query.limit };
  },
});

export function registerUsageRoutes(app: FastifyInstance, options: UsageRouteOptions): void {
  registerOperations(app, [usageOperation, recentRequestsOperation], { context: options, authenticate: { account: options.authenticate } });
}
