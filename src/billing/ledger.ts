/**
 * The quota ledger. Every change to an account's credit is an append-only entry; the account's
 * `balance` column is kept equal to the sum of its entries, in the same transaction, and is
 * never negative (a CHECK constraint backs that up).
 *
 * - grant:   credit arrives as a lot (purchase, code, admin), idempotent per source.
 * - hold:    before generating, the request's worst case is reserved with one conditional
 *            UPDATE (`balance >= amount`): no read-then-write, so concurrent requests can
 *            never overspend.
 * - settle:  afterwards the hold is released and the exact cost charged; lots are consumed
 *            soonest-expiring first.
 * - expiry:  credit of a lot past its expiry stops being spendable (checked at every hold
 *            and by the sweeper).
 * - holds of dead nodes or past their expiry are released by the sweeper.
 */
import { randomBytes } from "node:crypto";
import { PostgresAdapter, type Kysely, type Transaction } from "kysely";
import type { Database, LedgerEntryKind } from "../store/schema.ts";
import { InsufficientQuotaError } from "../protocol/errors.ts";

type Executor = Kysely<Database> | Transaction<Database>;

const DAY_MS = 24 * 60 * 60 * 1000;

/** Time-ordered, unique ids: entries sort by id within the same millisecond too. */
let lastTime = 0;
let sequence = 0;
export function newId(prefix: string, now = Date.now()): string {
  if (now === lastTime) sequence++;
  else {
    lastTime = now;
    sequence = 0;
  }
  return `${prefix}_${now.toString(36).padStart(9, "0")}${sequence.toString(36).padStart(4, "0")}${randomBytes(6).toString("hex")}`;
}

function isPostgres(database: Executor): boolean {
  return database.getExecutor().adapter instanceof PostgresAdapter;
}

/**
 * Locks the account row for the rest of the transaction (PostgreSQL `FOR UPDATE`).
 * SQLite write transactions are exclusive already (`BEGIN IMMEDIATE`).
 */
async function lockAccount(transaction: Transaction<Database>, accountId: string): Promise<{ balance: number } | undefined> {
  let query = transaction.selectFrom("accounts").select(["balance"]).where("id", "=", accountId);
  if (isPostgres(transaction)) query = query.forUpdate();
  const row = await query.executeTakeFirst();
  return row && { balance: Number(row.balance) };
}

async function addEntry(
  transaction: Transaction<Database>,
  entry: { accountId: string; kind: LedgerEntryKind; amount: number; lotId?: string; holdId?: string; now: number },
): Promise<void> {
  await transaction
    .insertInto("ledger_entries")
    .values({
      id: newId("le", entry.now),
      account_id: entry.accountId,
      kind: entry.kind,
      amount: entry.amount,
      lot_id: entry.lotId ?? null,
      hold_id: entry.holdId ?? null,
      created_at: entry.now,
    })
    .execute();
}

export type GrantInput = {
  accountId: string;
  amount: number;
  /** Unique per grant: a second grant with the same source does nothing. */
  source: string;
  planId?: string | null;
  /** Days until the credit expires; null or undefined: never. */
  days?: number | null;
  now?: number;
};

/** Grants credit once per `source`. Returns whether this call granted it. */
export async function grantCredit(database: Kysely<Database>, input: GrantInput): Promise<{ granted: boolean; lotId: string | null }> {
  if (!Number.isSafeInteger(input.amount) || input.amount < 0) throw new Error("a grant must be a non-negative integer");
  const now = input.now ?? Date.now();
  return database.transaction().execute(async (transaction) => {
    const account = await lockAccount(transaction, input.accountId);
    if (account === undefined) throw new Error(`no account '${input.accountId}'`);
    const lotId = newId("lot", now);
    const inserted = await transaction
      .insertInto("credit_lots")
      .values({
        id: lotId,
        account_id: input.accountId,
        plan_id: input.planId ?? null,
        granted: input.amount,
        remaining: input.amount,
        expires_at: input.days == null ? null : now + input.days * DAY_MS,
        source: input.source,
        created_at: now,
      })
      .onConflict((conflict) => conflict.column("source").doNothing())
      .executeTakeFirst();
    if (Number(inserted.numInsertedOrUpdatedRows ?? 0n) === 0) return { granted: false, lotId: null };
    await transaction
      .updateTable("accounts")
      .set((expression) => ({ balance: expression("balance", "+", input.amount) }))
      .$if(input.planId != null, (query) => query.set({ plan_id: input.planId! }))
      .where("id", "=", input.accountId)
      .execute();
    await addEntry(transaction, { accountId: input.accountId, kind: "grant", amount: input.amount, lotId, now });
    return { granted: true, lotId };
  });
}

/**
 * Expires the unspent credit of the account's lots past their expiry. Credit that running
 * holds still reserve is expired once those holds are settled (the next call catches it).
 */
async function expireLots(transaction: Transaction<Database>, accountId: string, balance: number, now: number): Promise<number> {
  const lots = await transaction
    .selectFrom("credit_lots")
    .select(["id", "remaining"])
    .where("account_id", "=", accountId)
    .where("expires_at", "is not", null)
    .where("expires_at", "<=", now)
    .where("remaining", ">", 0)
    .orderBy("expires_at")
    .orderBy("id")
    .execute();
  let available = balance;
  let expired = 0;
  for (const lot of lots) {
    const amount = Math.min(Number(lot.remaining), available);
    if (amount <= 0) break;
    await transaction.updateTable("credit_lots").set((expression) => ({ remaining: expression("remaining", "-", amount) })).where("id", "=", lot.id).execute();
    await addEntry(transaction, { accountId, kind: "expiry", amount: -amount, lotId: lot.id, now });
    available -= amount;
    expired += amount;
  }
  if (expired > 0) {
    await transaction.updateTable("accounts").set((expression) => ({ balance: expression("balance", "-", expired) })).where("id", "=", accountId).execute();
  }
  return expired;
}

/** Applies due expiries to one account now (e.g. before showing its balance). */
export async function expireDueCredit(database: Kysely<Database>, accountId: string, now = Date.now()): Promise<number> {
  return database.transaction().execute(async (transaction) => {
    const account = await lockAccount(transaction, accountId);
    return account === undefined ? 0 : expireLots(transaction, accountId, account.balance, now);
  });
}

export type HoldInput = {
  accountId: string;
  keyId: string | null;
  amount: number;
  nodeId: string;
  /** How long the hold may live before the sweeper releases it. */
  ttlMs: number;
  now?: number;
};

/**
 * Reserves `amount` against the account (and the key's spend cap), atomically.
 * Throws `InsufficientQuotaError` when either does not cover it.
 */
export async function placeHold(database: Kysely<Database>, input: HoldInput): Promise<string> {
  const now = input.now ?? Date.now();
  // A refusal commits too (the expiries it applied stay applied), then throws outside.
  const outcome = await database.transaction().execute(async (transaction): Promise<{ holdId: string } | { refused: string }> => {
    const account = await lockAccount(transaction, input.accountId);
    if (account === undefined) return { refused: "This API key's account no longer exists." };
    const expired = await expireLots(transaction, input.accountId, account.balance, now);
    if (input.keyId !== null) {
      const keyReserved = await transaction
        .updateTable("api_keys")
        .set((expression) => ({ reserved: expression("reserved", "+", input.amount) }))
        .where("id", "=", input.keyId)
        .where((expression) =>
          expression.or([
            expression("spend_cap", "is", null),
            expression(expression("spent", "+", expression("reserved", "+", input.amount)), "<=", expression.ref("spend_cap")),
          ]),
        )
        .executeTakeFirst();
      if (Number(keyReserved.numUpdatedRows) === 0) return { refused: "This API key reached its spend cap. Raise the cap or use another key." };
    }
    const reserved = await transaction
      .updateTable("accounts")
      .set((expression) => ({ balance: expression("balance", "-", input.amount) }))
      .where("id", "=", input.accountId)
      .where("balance", ">=", input.amount)
      .where("disabled_at", "is", null)
      .executeTakeFirst();
    if (Number(reserved.numUpdatedRows) === 0) {
      if (input.keyId !== null) {
        await transaction.updateTable("api_keys").set((expression) => ({ reserved: expression("reserved", "-", input.amount) })).where("id", "=", input.keyId).execute();
      }
      return {
        refused:
          `You exceeded your current quota: this request may cost up to ${input.amount} credits and the account has ${Math.max(0, account.balance - expired)}. ` +
          "Buy a plan, redeem a code, or lower max_tokens.",
      };
    }
    const holdId = newId("hold", now);
    await transaction
      .insertInto("holds")
      .values({
        id: holdId,
        account_id: input.accountId,
        key_id: input.keyId,
        amount: input.amount,
        status: "active",
        cost: null,
        node_id: input.nodeId,
        expires_at: now + input.ttlMs,
        created_at: now,
        closed_at: null,
      })
      .execute();
    await addEntry(transaction, { accountId: input.accountId, kind: "hold", amount: -input.amount, holdId, now });
    return { holdId };
  });
  if ("refused" in outcome) throw new InsufficientQuotaError(outcome.refused);
  return outcome.holdId;
}

/** Charges `cost` against lots, soonest-expiring first (lots without expiry last). */
async function consumeLots(transaction: Transaction<Database>, accountId: string, cost: number): Promise<void> {
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
 * Closes a hold: releases the reservation and charges `cost` (at most the amount held).
 * A hold closed already (settled twice, or released by the sweeper) is not charged again
 * through the hold; a release is a settlement at cost 0. Returns what was charged.
 */
export async function settleHold(
  database: Kysely<Database>,
  holdId: string,
  cost: number,
  now = Date.now(),
  /** Runs in the same transaction with what was charged (the usage record goes in with the charge). */
  alongside?: (transaction: Transaction<Database>, charged: number) => Promise<void>,
): Promise<number> {
  const charged = await database.transaction().execute(async (transaction) => {
    const charge = await settleInTransaction(transaction, holdId, cost, now);
    if (alongside) await alongside(transaction, charge);
    return charge;
  });
  return charged;
}

async function settleInTransaction(transaction: Transaction<Database>, holdId: string, cost: number, now: number): Promise<number> {
  {
    let query = transaction.selectFrom("holds").selectAll().where("id", "=", holdId);
    if (isPostgres(transaction)) query = query.forUpdate();
    const hold = await query.executeTakeFirst();
    if (hold === undefined) throw new Error(`no hold '${holdId}'`);
    const account = await lockAccount(transaction, hold.account_id);
    if (account === undefined) return 0;
    const amount = Number(hold.amount);
    if (hold.status !== "active") {
      // Released early (its node looked dead): the tokens were still generated, so charge
      // them once now, as far as the balance covers.
      if (hold.status !== "released" || hold.cost !== null || cost <= 0) return 0;
      const charge = Math.min(cost, account.balance);
      await transaction.updateTable("holds").set({ cost: charge }).where("id", "=", holdId).execute();
      if (charge > 0) {
        await transaction.updateTable("accounts").set((expression) => ({ balance: expression("balance", "-", charge) })).where("id", "=", hold.account_id).execute();
        await addEntry(transaction, { accountId: hold.account_id, kind: "settle", amount: -charge, holdId, now });
        await consumeLots(transaction, hold.account_id, charge);
        if (hold.key_id !== null) {
          await transaction.updateTable("api_keys").set((expression) => ({ spent: expression("spent", "+", charge) })).where("id", "=", hold.key_id).execute();
        }
      }
      return charge;
    }
    const charge = Math.max(0, Math.min(cost, amount));
    await transaction
      .updateTable("holds")
      .set({ status: charge > 0 || cost > 0 ? "settled" : "released", cost: charge, closed_at: now })
      .where("id", "=", holdId)
      .execute();
    await transaction
      .updateTable("accounts")
      .set((expression) => ({ balance: expression("balance", "+", amount - charge) }))
      .where("id", "=", hold.account_id)
      .execute();
    await addEntry(transaction, { accountId: hold.account_id, kind: "release", amount, holdId, now });
    if (charge > 0) await addEntry(transaction, { accountId: hold.account_id, kind: "settle", amount: -charge, holdId, now });
    await consumeLots(transaction, hold.account_id, charge);
    if (hold.key_id !== null) {
      await transaction
        .updateTable("api_keys")
        .set((expression) => ({ reserved: expression("reserved", "-", amount), spent: expression("spent", "+", charge) }))
        .where("id", "=", hold.key_id)
        .execute();
    }
    return charge;
  }
}

/** Releases a hold without charging (the request failed before generating). */
export async function releaseHold(database: Kysely<Database>, holdId: string, now = Date.now()): Promise<void> {
  await settleHold(database, holdId, 0, now);
}

/**
 * Releases holds past their expiry or placed by nodes that are gone. Returns how many.
 */
export async function sweepHolds(database: Kysely<Database>, options: { now?: number; deadNodes: readonly string[] }): Promise<number> {
  const now = options.now ?? Date.now();
  let query = database.selectFrom("holds").select("id").where("status", "=", "active");
  query = query.where((expression) =>
    options.deadNodes.length > 0 ? expression.or([expression("expires_at", "<=", now), expression("node_id", "in", [...options.deadNodes])]) : expression("expires_at", "<=", now),
  );
  const stale = await query.execute();
  for (const hold of stale) await releaseHold(database, hold.id, now);
  return stale.length;
}

/** Applies due expiries to every account with expired credit left. */
export async function sweepExpiredCredit(database: Kysely<Database>, now = Date.now()): Promise<number> {
  const accounts = await database
    .selectFrom("credit_lots")
    .select("account_id")
    .distinct()
    .where("expires_at", "is not", null)
    .where("expires_at", "<=", now)
    .where("remaining", ">", 0)
    .execute();
  let expired = 0;
  for (const { account_id } of accounts) expired += await expireDueCredit(database, account_id, now);
  return expired;
}

export type LedgerCheck = {
  balance: number;
  /** Sum of the account's ledger entries: must equal `balance`. */
  sumOfEntries: number;
  /** Credit left in lots: must equal `balance + heldActive`. */
  lotsRemaining: number;
  heldActive: number;
  activeHolds: number;
};

/** The numbers that must agree for an account's books to be consistent. */
export async function checkLedger(database: Kysely<Database>, accountId: string): Promise<LedgerCheck> {
  // One snapshot for all four reads: a hold settled between them would otherwise show a
  // balance and a sum of entries from different moments.
  return database
    .transaction()
    .setIsolationLevel("repeatable read")
    .execute(async (transaction) => {
      const account = await transaction.selectFrom("accounts").select("balance").where("id", "=", accountId).executeTakeFirstOrThrow();
      const entries = await transaction.selectFrom("ledger_entries").select((expression) => expression.fn.sum<number>("amount").as("total")).where("account_id", "=", accountId).executeTakeFirst();
      const lots = await transaction.selectFrom("credit_lots").select((expression) => expression.fn.sum<number>("remaining").as("total")).where("account_id", "=", accountId).executeTakeFirst();
      const holds = await transaction
        .selectFrom("holds")
        .select((expression) => [expression.fn.sum<number>("amount").as("total"), expression.fn.countAll<number>().as("count")])
        .where("account_id", "=", accountId)
        .where("status", "=", "active")
        .executeTakeFirst();
      return {
        balance: Number(account.balance),
        sumOfEntries: Number(entries?.total ?? 0),
        lotsRemaining: Number(lots?.total ?? 0),
        heldActive: Number(holds?.total ?? 0),
        activeHolds: Number(holds?.count ?? 0),
      };
    });
}
