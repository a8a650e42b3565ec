/**
 * Usage records: one per request, what the console's charts and tables read.
 */
import { sql, type Insertable, type Kysely, type RawBuilder } from "kysely";
import type { Database, UsageRecordTable } from "../store/schema.ts";
import { newId } from "../store/ids.ts";
import { pastCursor } from "../store/keyset.ts";
import type { RecentRequest, UsageRow } from "../protocol/account-api.ts";

export type { RecentRequest, UsageRow };

/** A usage record to write; reasoning tokens default to 0 and the source to none (counted). */
export type UsageRecord = Omit<Insertable<UsageRecordTable>, "id"> & {
  /** Chosen beforehand when the record must be written idempotently (a lease's group commit, a checkpoint's record). */
  id?: string;
};

export async function recordUsage(database: Kysely<Database>, record: UsageRecord): Promise<void> {
  await database.insertInto("usage_records").values({ ...record, id: record.id ?? newId("use", record.created_at) }).execute();
}

export type UsageGroup = "day" | "model" | "key";


const DAY_MS = 86_400_000;

/** Sums usage over `[from, to)` for one account (null: the operator's own keys; undefined: everyone), grouped in SQL. */
export async function queryUsage(
  database: Kysely<Database>,
  options: { accountId: string | null | undefined; from: number; to: number; groupBy: UsageGroup },
): Promise<UsageRow[]> {
  // Integer division: whole UTC days since the epoch, on SQLite and PostgreSQL alike.
  const groupExpression: RawBuilder<string | number> =
    options.groupBy === "day" ? sql`created_at / ${sql.lit(DAY_MS)}` : options.groupBy === "model" ? sql`model` : sql`coalesce(key_id, 'operator')`;
  let query = database
    .selectFrom("usage_records")
    .select([
      groupExpression.as("bucket"),
      sql<number>`count(*)`.as("requests"),
      sql<number>`sum(prompt_tokens)`.as("prompt_tokens"),
      sql<number>`sum(cached_prompt_tokens)`.as("cached_prompt_tokens"),
      sql<number>`sum(completion_tokens)`.as("completion_tokens"),
      sql<number>`sum(cost)`.as("cost"),
    ])
    .where("created_at", ">=", options.from)
    .where("created_at", "<", options.to);
  if (options.accountId !== undefined) {
    query = options.accountId === null ? query.where("account_id", "is", null) : query.where("account_id", "=", options.accountId);
  }
  const rows = await query.groupBy(sql`1`).execute();
  return rows
    .map((row) => ({
      group: options.groupBy === "day" ? new Date(Number(row.bucket) * DAY_MS).toISOString().slice(0, 10) : String(row.bucket),
      requests: Number(row.requests),
      prompt_tokens: Number(row.prompt_tokens),
      cached_prompt_tokens: Number(row.cached_prompt_tokens),
      completion_tokens: Number(row.completion_tokens),
      cost: Number(row.cost),
    }))
    .sort((a, b) => a.group.localeCompare(b.group));
}


/**
 * Usage records with their key's name, of one account (`null`: operator keys'; `undefined`:
 * every account): the columns a request shows, shared by the recent-requests page and the CSV export.
 */
export function requestRecords(database: Kysely<Database>, accountId: string | null | undefined) {
  const query = database
    .selectFrom("usage_records as usage")
    .leftJoin("api_keys as key", "key.id", "usage.key_id")
    .select([
      "usage.id",
      "usage.request_id",
      "usage.created_at",
      "usage.key_id",
      "key.name as key_name",
      "usage.model",
      "usage.prompt_tokens",
      "usage.cached_prompt_tokens",
      "usage.completion_tokens",
      "usage.cost",
      "usage.latency_ms",
      "usage.status",
      "usage.finish_reason",
      "usage.stream",
      "usage.service_tier",
    ]);
  if (accountId === undefined) return query;
  return accountId === null ? query.where("usage.account_id", "is", null) : query.where("usage.account_id", "=", accountId);
}

/**
 * The newest requests first, `limit` of them: made before `before` (milliseconds) when given, and
 * after the request whose id is `after` (the last of the previous page) when given.
 */
export async function recentRequests(
  database: Kysely<Database>,
  options: { accountId: string | null | undefined; limit: number; before?: number; after?: string },
): Promise<RecentRequest[]> {
  let query = requestRecords(database, options.accountId);
  if (options.before !== undefined) query = query.where("usage.created_at", "<", options.before);
  if (options.after !== undefined) {
    const last = await database.selectFrom("usage_records").select(["id", "created_at"]).where("id", "=", options.after).executeTakeFirst();
    if (last === undefined) return [];
    query = query.where(pastCursor("usage.created_at", "usage.id", "<", { created_at: Number(last.created_at), id: last.id }));
  }
  const rows = await query.orderBy("usage.created_at", "desc").orderBy("usage.id", "desc").limit(options.limit).execute();
  return rows.map((row) => {
    const { created_at: createdAt, ...fields } = requestFieldsOf(row);
    return { ...fields, created: Math.floor(createdAt / 1000) };
  });
}

/** A row of `requestRecords` with its numbers as numbers (PostgreSQL answers bigints as strings) and `stream` a boolean; `created_at` in milliseconds. */
export function requestFieldsOf(row: Awaited<ReturnType<ReturnType<typeof requestRecords>["execute"]>>[number]) {
  return {
    id: row.id,
    request_id: row.request_id,
    created_at: Number(row.created_at),
    key_id: row.key_id,
    key_name: row.key_name ?? null,
    model: row.model,
    prompt_tokens: Number(row.prompt_tokens),
    cached_prompt_tokens: Number(row.cached_prompt_tokens),
    completion_tokens: Number(row.completion_tokens),
    cost: Number(row.cost),
    latency_ms: Number(row.latency_ms),
    status: Number(row.status),
    finish_reason: row.finish_reason,
    stream: Number(row.stream) === 1,
    // Records made before tiers were all served in the default one.
    service_tier: row.service_tier ?? "default",
  };
}
