/**
 * Usage records for an export, read a page at a time in time order: a cursor on
 * (created_at, id), so an export of any size holds one page in memory.
 */
import type { Kysely } from "kysely";
import type { Database } from "../store/schema.ts";
import { requestFieldsOf, requestRecords } from "./usage.ts";
import { pastCursor, type KeysetCursor } from "../store/keyset.ts";

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
  /** The tier that served it (`default` for records made before tiers). */
  service_tier: string;
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
  let cursor: KeysetCursor | undefined;
  for (;;) {
    let query = requestRecords(database, options.accountId)
      .select(["usage.account_id", "key.display_prefix as key_prefix"])
      .where("usage.created_at", ">=", options.from)
      .where("usage.created_at", "<", options.to);
    if (cursor !== undefined) query = query.where(pastCursor("usage.created_at", "usage.id", ">", cursor));
    const rows = await query.orderBy("usage.created_at", "asc").orderBy("usage.id", "asc").limit(pageSize).execute();
    for (const row of rows) {
      yield { ...requestFieldsOf(row), account_id: row.account_id, key_prefix: row.key_prefix ?? null };
    }
    if (rows.length < pageSize) return;
    const last = rows[rows.length - 1]!;
    cursor = { created_at: Number(last.created_at), id: last.id };
  }
}
