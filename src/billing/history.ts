/**
 * An account's billing history: its ledger entries newest first, each with the balance after it.
 *
 * Listed are the entries that change what the account owns: grants (purchases, redeemed codes,
 * admin grants), charges for usage (`settle`), expiries and refunds (credit a refunded or disputed
 * Stripe purchase gave back, with what of it had been spent already). A request's `hold` and
 * `release` are left out: they reserve credit while it runs and give it back when it ends, so
 * for every closed hold they cancel out. `balance_after` is the running sum of the listed
 * entries up to and including each one; it equals the account's balance whenever no request is
 * running (credit a running request reserves still counts as the account's until it settles).
 */
import { sql, type Kysely } from "kysely";
import type { Database, LedgerEntryKind } from "../store/schema.ts";
import { pastCursor, type KeysetCursor } from "../store/keyset.ts";
import type { HistoryEntry, HistorySource } from "../protocol/billing-history.ts";

/** The ledger kinds the history lists. */
export const HISTORY_KINDS: ReadonlyArray<HistoryEntry["kind"]> = ["grant", "settle", "expiry", "refund"];

export type { HistoryEntry, HistorySource };

/** Thrown when `before` names no entry of the account. */
export class UnknownCursorError extends Error {}

function sourceOf(kind: LedgerEntryKind, lotSource: string | null): HistorySource {
  if (kind === "settle") return "usage";
  if (kind === "expiry") return "expiry";
  if (kind === "refund") return "refund";
  if (lotSource?.startsWith("checkout:") || lotSource?.startsWith("stripe:")) return "purchase";
  if (lotSource?.startsWith("code:")) return "code";
  if (lotSource?.startsWith("admin:")) return "admin";
  return "grant";
}

/** A refund or dispute of a Stripe purchase, as its `checkout_reversals` row tells it. */
type Reversal = { kind: string; spent: number };

function describe(source: HistorySource, planName: string | null, keyName: string | null, reversal: Reversal | null): string {
  const plan = planName === null ? "" : `: ${planName}`;
  switch (source) {
    case "purchase":
      return `Purchase${plan}`;
    case "code":
      return `Redeemed a code${plan}`;
    case "admin":
      return `Granted by an administrator${plan}`;
    case "grant":
      return `Credit granted${plan}`;
    case "usage":
      return keyName === null ? "Usage" : `Usage with key "${keyName}"`;
    case "expiry":
      return `Unspent credit expired${plan}`;
    case "refund": {
      if (reversal === null) return "Refund";
      const what = reversal.kind === "dispute" ? `Payment disputed, credit taken back${plan}` : `Payment refunded, credit taken back${plan}`;
      // What had been spent before the money went back could not be taken: say so.
      return reversal.spent > 0 ? `${what} (${reversal.spent} credits of it had been spent already)` : what;
    }
  }
}

/**
 * The account's history, newest first: `limit` entries, older than the entry `before` (an entry
 * id from a previous page) when given. Throws `UnknownCursorError` for an id not in the account's history.
 */
export async function billingHistory(
  database: Kysely<Database>,
  options: { accountId: string; limit: number; before?: string },
): Promise<{ data: HistoryEntry[]; hasMore: boolean }> {
  let cursor: KeysetCursor | undefined;
  if (options.before !== undefined) {
    const found = await database
      .selectFrom("ledger_entries")
      .select(["created_at", "id"])
      .where("id", "=", options.before)
      .where("account_id", "=", options.accountId)
      .where("kind", "in", [...HISTORY_KINDS])
      .executeTakeFirst();
    if (found === undefined) throw new UnknownCursorError(options.before);
    cursor = { created_at: Number(found.created_at), id: found.id };
  }
  const rows = await database
    .selectFrom("ledger_entries as entry")
    .leftJoin("credit_lots as lot", "lot.id", "entry.lot_id")
    .leftJoin("plans as plan", "plan.id", "lot.plan_id")
    .leftJoin("holds as hold", "hold.id", "entry.hold_id")
    .leftJoin("api_keys as key", "key.id", "hold.key_id")
    .leftJoin("checkout_reversals as reversal", "reversal.entry_id", "entry.id")
    .select([
      "entry.id",
      "entry.kind",
      "entry.amount",
      "entry.created_at",
      "lot.source",
      "lot.plan_id",
      "plan.name as plan_name",
      "key.name as key_name",
      "reversal.kind as reversal_kind",
      "reversal.spent as reversal_spent",
    ])
    .where("entry.account_id", "=", options.accountId)
    .where("entry.kind", "in", [...HISTORY_KINDS])
    .$if(cursor !== undefined, (query) => query.where(pastCursor("entry.created_at", "entry.id", "<", cursor!)))
    .orderBy("entry.created_at", "desc")
    .orderBy("entry.id", "desc")
    .limit(options.limit + 1)
    .execute();
  const page = rows.slice(0, options.limit);
  if (page.length === 0) return { data: [], hasMore: false };
  // The balance after the newest entry on the page: the sum of every listed entry up to it.
  const newest = page[0]!;
  const total = await database
    .selectFrom("ledger_entries")
    .select(sql<number | string | null>`sum(amount)`.as("total"))
    .where("account_id", "=", options.accountId)
    .where("kind", "in", [...HISTORY_KINDS])
    .where(pastCursor("created_at", "id", "<=", { created_at: Number(newest.created_at), id: newest.id }))
    .executeTakeFirst();
  let balance = Number(total?.total ?? 0);
  const data = page.map((row): HistoryEntry => {
    const amount = Number(row.amount);
    const source = sourceOf(row.kind, row.source ?? null);
    const planName = row.plan_name ?? row.plan_id ?? null;
    const entry: HistoryEntry = {
      object: "billing.entry",
      id: row.id,
      kind: row.kind as HistoryEntry["kind"],
      source,
      description: describe(source, planName, row.key_name ?? null, row.reversal_kind == null ? null : { kind: row.reversal_kind, spent: Number(row.reversal_spent ?? 0) }),
      amount,
      balance_after: balance,
      plan: row.plan_id ?? null,
      key_name: row.key_name ?? null,
      created: Math.floor(Number(row.created_at) / 1000),
    };
    balance -= amount;
    return entry;
  });
  return { data, hasMore: rows.length > options.limit };
}
