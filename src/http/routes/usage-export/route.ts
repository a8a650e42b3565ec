/**
 * `GET /api/usage/export?from&to`: the account's usage records in `[from, to)` as CSV, one row
 * per request, oldest first, streamed a page at a time (never one big array). `from` and `to`
 * are seconds since the epoch or ISO 8601 dates, as everywhere on `/api`; `to` defaults to now and `from` to 30 days before it; the range
 * may span at most 366 days. Admins (and admin-scoped keys) may name an account with
 * `account=<id>`, `account=operator` or `account=all`, as `/api/usage` allows.
 */
import { Readable } from "node:stream";
import type { FastifyInstance, FastifyRequest, preHandlerHookHandler } from "fastify";
import type { Kysely } from "kysely";
import type { Database } from "../../../store/schema.ts";
import { exportUsageRecords, type ExportedRecord } from "../../../billing/usage-export.ts";
import { InvalidRequestError } from "../../../protocol/errors.ts";
import { MAX_EXPORT_DAYS, usageExportQuerySchema } from "../../../protocol/account-api-requests.ts";
import { principalOf, requireAdmin } from "../../middleware/account-auth/account-auth.ts";
import { csvLine } from "../../csv.ts";
import { defineOperation, registerOperations } from "../../operation.ts";

export type UsageExportRouteOptions = { database: Kysely<Database>; authenticate: preHandlerHookHandler };

const DAY_MS = 86_400_000;

/** The columns, in order; the header row names them. */
const COLUMNS: Array<[string, (record: ExportedRecord) => string | number | boolean | null]> = [
  ["time", (record) => new Date(record.created_at).toISOString()],
  ["request_id", (record) => record.request_id],
  ["account_id", (record) => record.account_id],
  ["key_name", (record) => record.key_name],
  ["key_prefix", (record) => record.key_prefix],
  ["model", (record) => record.model],
  ["prompt_tokens", (record) => record.prompt_tokens],
  ["cached_prompt_tokens", (record) => record.cached_prompt_tokens],
  ["completion_tokens", (record) => record.completion_tokens],
  ["cost_credits", (record) => record.cost],
  ["latency_ms", (record) => record.latency_ms],
  ["status", (record) => record.status],
  ["finish_reason", (record) => record.finish_reason],
  ["stream", (record) => record.stream],
  ["service_tier", (record) => record.service_tier],
];

/** The account to export: the caller's own, or (admins only) the one named. undefined: every account. */
function accountScope(request: FastifyRequest, named: string | undefined): string | null | undefined {
  const principal = principalOf(request);
  if (named === undefined) return principal.accountId;
  requireAdmin(request);
  return named === "all" ? undefined : named === "operator" ? null : named;
}

async function* csvRows(records: AsyncIterable<ExportedRecord>): AsyncGenerator<string> {
  yield csvLine(COLUMNS.map(([name]) => name));
  for await (const record of records) yield csvLine(COLUMNS.map(([, value]) => value(record)));
}

export const exportUsageOperation = defineOperation({
  method: "get",
  path: "/api/usage/export",
  tag: "Usage",
  summary: "The requests in `[from, to)` as a CSV attachment, one row each, oldest first, streamed (at most 366 days).",
  auth: "account",
  query: usageExportQuerySchema,
  example: { from: "2026-11-01", to: "2026-12-01" },
  success: {
    status: 200,
    description: "`text/csv`: a header row, then time (ISO 8601), request_id, account_id, key_name, key_prefix, model, tokens, cost_credits, latency_ms, status, finish_reason, stream, service_tier.",
    contentType: "text/csv",
  },
  errors: ["range_too_long", "admin_required", "admin_scope_required"],
  async handler({ request, reply, query: parsedQuery }, options: UsageExportRouteOptions) {
    const query = parsedQuery();
    const to = query.to ?? Date.now();
    const from = query.from ?? to - 30 * DAY_MS;
    if (from >= to) throw new InvalidRequestError("'from' must be before 'to'.", "from");
    if (to - from > MAX_EXPORT_DAYS * DAY_MS) {
      throw new InvalidRequestError(`An export may span at most ${MAX_EXPORT_DAYS} days; export a longer period in parts.`, "from", "range_too_long");
    }
    const accountId = accountScope(request, query.account);
    const day = (time: number) => new Date(time).toISOString().slice(0, 10);
    const records = exportUsageRecords(options.database, { accountId, from, to });
    void reply
      .header("content-type", "text/csv; charset=utf-8")
      .header("content-disposition", `attachment; filename="turnpike-usage-${day(from)}-to-${day(to - 1)}.csv"`)
      .header("cache-control", "no-store");
    return reply.send(Readable.from(csvRows(records)));
  },
});

export function registerUsageExportRoute(app: FastifyInstance, options: UsageExportRouteOptions): void {
  registerOperations(app, [exportUsageOperation], { context: options, authenticate: { account: options.authenticate } });
}
