/**
 * Usage records for an export, read a page at a time in time order: a cursor on
 * (created_at, id), so an export of any size holds one page in memory.
 */
import type { Kysely } from "kysely";
import type { Database } from "../store/schema.ts";

export type ExportedRecord = {
  id: string;
  request_id: string;
  /** Milliseconds since the epoch. */
  created_at: number;
  account_id: string | null;
  key_id: string | null;
  key_name: string | null;
  key_prefix: string | null;
  model: string;
  prompt_tokens: number;
  cached_prompt_tokens: number;
  completion_tokens: number;
  /** Credit units. */
  cost: number;
  latency_ms: number;
  status: number;
  finish_reason: string | null;
  stream: boolean;
};

/** Rows read per query. */
export const EXPORT_PAGE_SIZE = 500;

/**
 * Yields the records in `[from, to)` (milliseconds) of one account (null: the operator's keys;
 * undefined: everyone), oldest first, one page per query.
 */
export async function* exportUsageRecords(
  database: Kysely<Database>,
  options: { accountId: string | null | undefined; from: number; to: number; pageSize?: number },
): AsyncGenerator<ExportedRecord> {
  const pageSize = options.pageSize ?? EXPORT_PAGE_SIZE;
  let cursor: { created_at: number; id: string } | undefined;
  for (;;) {
    let query = database
      .selectFrom("usage_records as usage")
      .leftJoin("api_keys as key", "key.id", "usage.key_id")
      .select([
        "usage.id",
        "usage.request_id",
        "usage.created_at",
        "usage.account_id",
        "usage.key_id",
        "key.name as key_name",
        "key.display_prefix as key_prefix",
        "usage.model",
        "usage.prompt_tokens",
        "usage.cached_prompt_tokens",
        "usage.completion_tokens",
        "usage.cost",
        "usage.latency_ms",
        "usage.status",
        "usage.finish_reason",
        "usage.stream",
      ])
      .where("usage.created_at", ">=", options.from)
      .where("usage.created_at", "<", options.to);
    if (options.accountId !== undefined) {
      query = options.accountId === null ? query.where("usage.account_id", "is", null) : query.where("usage.account_id", "=", options.accountId);
    }
    if (cursor !== undefined) {
      const after = cursor;
      query = query.where((expression) =>
        expression.or([expression("usage.created_at", ">", after.created_at), expression.and([expression("usage.created_at", "=", after.created_at), expression("usage.id", ">", after.id)])]),
      );
    }
    const rows = await query.orderBy("usage.created_at", "asc").orderBy("usage.id", "asc").limit(pageSize).execute();
    for (const row of rows) {
      yield {
        id: row.id,
        request_id: row.request_id,
        created_at: Number(row.created_at),
        account_id: row.account_id,
        key_id: row.key_id,
        key_name: row.key_name ?? null,
        key_prefix: row.key_prefix ?? null,
        model: row.model,
        prompt_tokens: Number(row.prompt_tokens),
        cached_prompt_tokens: Number(row.cached_prompt_tokens),
        completion_tokens: Number(row.completion_tokens),
        cost: Number(row.cost),
        latency_ms: Number(row.latency_ms),
        status: Number(row.status),
        finish_reason: row.finish_reason,
        stream: Number(row.stream) === 1,
      };
    }
    if (rows.length < pageSize) return;
    const last = rows[rows.length - 1]!;
    cursor = { created_at: Number(last.created_at), id: last.id };
  }
}
