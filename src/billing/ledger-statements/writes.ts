/**
 * Writes that read the same in both dialects, used by `ledger.ts` and by the statements.
 */
import type { Transaction } from "kysely";
import { newId } from "../../store/ids.ts";
import type { Database, LedgerEntryKind } from "../../store/schema.ts";
import type { UsageRecord } from "../usage.ts";

/** Appends one ledger entry; returns its id. */
export async function addEntry(
  transaction: Transaction<Database>,
  entry: { accountId: string; kind: LedgerEntryKind; amount: number; lotId?: string; holdId?: string; now: number },
): Promise<string> {
  const id = newId("le", entry.now);
  await transaction
    .insertInto("ledger_entries")
    .values({
      id,
      account_id: entry.accountId,
      kind: entry.kind,
      amount: entry.amount,
      lot_id: entry.lotId ?? null,
      hold_id: entry.holdId ?? null,
      created_at: entry.now,
    })
    .execute();
  return id;
}

/** Charges `cost` against lots, soonest-expiring first (lots without expiry last). */
export async function consumeLots(transaction: Transaction<Database>, accountId: string, cost: number): Promise<void> {
  if (cost <= 0) return;
  const lots = await transaction
    .selectFrom("credit_lots")
    .select(["id", "remaining", "expires_at"])
    .where("account_id", "=", accountId)
    .where("remaining", ">", 0)
    .execute();
  lots.sort((a, b) => (a.expires_at ?? Infinity) - (b.expires_at ?? Infinity) || a.id.localeCompare(b.id));
  let left = cost;
  for (const lot of lots) {
    if (left <= 0) break;
    const take = Math.min(Number(lot.remaining), left);
    await transaction.updateTable("credit_lots").set((expression) => ({ remaining: expression("remaining", "-", take) })).where("id", "=", lot.id).execute();
    left -= take;
  }
}

/**
 * The columns a usage record's final write sets over an earlier one with the same id (a record
 * the sweeper made of the request's last checkpoint, or an attempt whose commit went through
 * unanswered): everything but its id, request and owner.
 */
export const USAGE_OVERWRITTEN = [
  "model",
  "prompt_tokens",
  "cached_prompt_tokens",
  "completion_tokens",
  "reasoning_tokens",
  "usage_source",
  "cost",
  "latency_ms",
  "status",
  "finish_reason",
  "stream",
  "hold_id",
  "service_tier",
] as const;

/**
 * Writes a usage record in the settling transaction, idempotently: a record with its id written
 * already (the same write retried, or the sweeper's record of its last checkpoint) is taken over,
 * never duplicated: a duplicate key is never an error here. `replace`: "always" where the record
 * is what its hold is being charged now (an active hold settling), "costlier" where the charge
 * follows the records (a closed hold's late record: `chargeRecordsOf` charges what it adds).
 */
export async function insertUsage(transaction: Transaction<Database>, record: UsageRecord, replace: "always" | "costlier" = "always"): Promise<void> {
  await transaction
    .insertInto("usage_records")
    .values({ ...record, id: record.id ?? newId("use", record.created_at) })
    .onConflict((conflict) => {
      const update = conflict.column("id").doUpdateSet((excluded) => Object.fromEntries(USAGE_OVERWRITTEN.map((column) => [column, excluded.ref(`excluded.${column}`)])));
      return replace === "always" ? update : update.where("usage_records.cost", "<", (expression) => expression.ref("excluded.cost"));
    })
    .execute();
}

/** The release entry and, when something was charged, the settle entry after it (ids are time-ordered). */
export function closingEntries(accountId: string, holdId: string, amount: number, charge: number, now: number) {
  const entry = (kind: LedgerEntryKind, entryAmount: number) => ({ id: newId("le", now), account_id: accountId, kind, amount: entryAmount, lot_id: null, hold_id: holdId, created_at: now });
  return charge > 0 ? [entry("release", amount), entry("settle", -charge)] : [entry("release", amount)];
}
