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
import { parseWithSchema } from "../../../protocol/parse.ts";
import { recentRequestsQuerySchema, usageQuerySchema } from "../../../protocol/account-api-requests.ts";
import { InvalidRequestError } from "../../../protocol/errors.ts";
import { principalOf, requireAdmin } from "../../middleware/account-auth/account-auth.ts";
import type { CreditValue } from "../../../protocol/credit-value.ts";
import { moneyCurrency, withMoneyCosts } from "../../../billing/usage-money.ts";
import type { RecentRequestsResponse, UsageResponse } from "../../../protocol/account-api.ts";

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

export function registerUsageRoutes(app: FastifyInstance, options: UsageRouteOptions): void {
  const creditValue = options.creditValue ?? null;
  app.get("/api/usage", { preHandler: options.authenticate }, async function usage(request): Promise<UsageResponse> {
    const query = parseWithSchema(usageQuerySchema, request.query ?? {});
    const to = query.to ?? Date.now();
    const from = query.from ?? to - 30 * DAY_MS;
    if (from >= to) throw new InvalidRequestError("'from' must be before 'to'.", "from");
    if (to - from > 3660 * DAY_MS) throw new InvalidRequestError("The range may span at most ten years.", "from");
    const accountId = accountScope(request, query.account);
    const data = await queryUsage(options.database, { accountId, from, to, groupBy: query.group_by });
    return { object: "list", group_by: query.group_by, from: Math.floor(from / 1000), to: Math.floor(to / 1000), ...moneyCurrency(creditValue), data: withMoneyCosts(data, creditValue) };
  });

  app.get("/api/usage/requests", { preHandler: options.authenticate }, async function requests(request): Promise<RecentRequestsResponse> {
    const query = parseWithSchema(recentRequestsQuerySchema, request.query ?? {});
    const accountId = accountScope(request, query.account);
    const data = await recentRequests(options.database, { accountId, limit: query.limit, before: query.before, after: query.after });
    return { object: "list", ...moneyCurrency(creditValue), data: withMoneyCosts(data, creditValue), has_more: data.length === query.limit };
  });
}
