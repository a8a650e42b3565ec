/**
 * `GET /api/usage` (sums grouped by day, model or key) and `GET /api/usage/requests` (recent
 * requests) for the caller's account. Admins (and operator keys) may name any account with
 * `account=<id>`, or `account=all`. With a `credit_value` setting, each row's credit `cost` comes
 * with `cost_money` (an exact decimal string) and the response names its `currency`.
 */
import type { FastifyInstance, FastifyRequest, preHandlerHookHandler } from "fastify";
import type { Kysely } from "kysely";
import { z } from "zod";
import type { Database } from "../../../store/schema.ts";
import { queryUsage, recentRequests } from "../../../billing/usage.ts";
import { parseWithSchema } from "../../../protocol/parse.ts";
import { InvalidRequestError } from "../../../protocol/errors.ts";
import { principalOf, requireAdmin } from "../../middleware/account-auth/account-auth.ts";
import type { CreditValue } from "../../../billing/credit-value.ts";
import { moneyCurrency, withMoneyCosts } from "../../../billing/usage-money.ts";

export type UsageRouteOptions = {
  database: Kysely<Database>;
  authenticate: preHandlerHookHandler;
  /** What a credit is worth (costs are shown in money too); null or absent: credits only. */
  creditValue?: CreditValue | null;
};

const DAY_MS = 86_400_000;

/** A time as ms since the epoch or an ISO 8601 date (`2026-11-01` or with a time). */
const timeSchema = z.union([
  z.string().regex(/^\d{1,15}$/).transform(Number),
  z
    .string()
    .refine((value) => /^\d{4}-\d{2}-\d{2}/.test(value) && !Number.isNaN(Date.parse(value)), "must be milliseconds since the epoch or an ISO 8601 date")
    .transform((value) => Date.parse(value)),
]);

const usageQuerySchema = z.object({
  from: timeSchema.optional(),
  to: timeSchema.optional(),
  group_by: z.enum(["day", "model", "key"]).default("day"),
  account: z.string().min(1).optional(),
});

const requestsQuerySchema = z.object({
  limit: z
    .string()
    .regex(/^\d+$/, "must be a whole number")
    .transform(Number)
    .pipe(z.number().int().min(1).max(500))
    .default(50),
  before: timeSchema.optional(),
  account: z.string().min(1).optional(),
});

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
  app.get("/api/usage", { preHandler: options.authenticate }, async function usage(request) {
    const query = parseWithSchema(usageQuerySchema, request.query ?? {});
    const to = query.to ?? Date.now();
    const from = query.from ?? to - 30 * DAY_MS;
    if (from >= to) throw new InvalidRequestError("'from' must be before 'to'.", "from");
    if (to - from > 3660 * DAY_MS) throw new InvalidRequestError("The range may span at most ten years.", "from");
    const accountId = accountScope(request, query.account);
    const data = await queryUsage(options.database, { accountId, from, to, groupBy: query.group_by });
    return { object: "list", group_by: query.group_by, from, to, ...moneyCurrency(creditValue), data: withMoneyCosts(data, creditValue) };
  });

  app.get("/api/usage/requests", { preHandler: options.authenticate }, async function requests(request) {
    const query = parseWithSchema(requestsQuerySchema, request.query ?? {});
    const accountId = accountScope(request, query.account);
    const data = await recentRequests(options.database, { accountId, limit: query.limit, before: query.before });
    return { object: "list", ...moneyCurrency(creditValue), data: withMoneyCosts(data, creditValue), has_more: data.length === query.limit };
  });
}
