/**
 * Usage records: one per request, what the console's charts and tables read.
 */
import type { Kysely } from "kysely";
import type { Database, UsageRecordTable } from "../store/schema.ts";
import { newId } from "./ledger.ts";

export type UsageRecord = Omit<UsageRecordTable, "id">;

export async function recordUsage(database: Kysely<Database>, record: UsageRecord): Promise<void> {
  await database.insertInto("usage_records").values({ id: newId("use", record.created_at), ...record }).execute();
}

export type UsageGroup = "day" | "model" | "key";

export type UsageRow = {
  /** The day (YYYY-MM-DD, UTC), the model id or the key id. */
  group: string;
  requests: number;
  prompt_tokens: number;
  cached_prompt_tokens: number;
  completion_tokens: number;
  cost: number;
};

/** Sums usage over `[from, to)` for one account (null: the operator's own keys; undefined: everyone), grouped. */
export async function queryUsage(
  database: Kysely<Database>,
  options: { accountId: string | null | undefined; from: number; to: number; groupBy: UsageGroup },
): Promise<UsageRow[]> {
  let query = database
    .selectFrom("usage_records")
    .select(["created_at", "model", "key_id", "prompt_tokens", "cached_prompt_tokens", "completion_tokens", "cost"])
    .where("created_at", ">=", options.from)
    .where("created_at", "<", options.to);
  if (options.accountId !== undefined) {
    query = options.accountId === null ? query.where("account_id", "is", null) : query.where("account_id", "=", options.accountId);
  }
  const rows = await query.execute();
  const groups = new Map<string, UsageRow>();
  for (const row of rows) {
    const group =
      options.groupBy === "day" ? new Date(Number(row.created_at)).toISOString().slice(0, 10) : options.groupBy === "model" ? row.model : (row.key_id ?? "operator");
    const sum = groups.get(group) ?? { group, requests: 0, prompt_tokens: 0, cached_prompt_tokens: 0, completion_tokens: 0, cost: 0 };
    sum.requests++;
    sum.prompt_tokens += Number(row.prompt_tokens);
    sum.cached_prompt_tokens += Number(row.cached_prompt_tokens);
    sum.completion_tokens += Number(row.completion_tokens);
    sum.cost += Number(row.cost);
    groups.set(group, sum);
  }
  return [...groups.values()].sort((a, b) => a.group.localeCompare(b.group));
}
