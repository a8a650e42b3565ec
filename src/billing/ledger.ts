/**
 * The quota ledger. Every change to an account's credit is an append-only entry; the account's
 * `balance` column is kept equal to the sum of its entries, in the same transaction, and is
 * never negative (a CHECK constraint backs that up).
 *
 * - grant:   credit arrives as a lot (purchase, code, admin), idempotent per source, with one
 *            conditional write that refuses to take the balance plus what running holds
 *            reserve past `MAX_CREDIT` (409 `balance_limit_exceeded`).
 * - hold:    before generating, the request's worst case is reserved with one conditional
 *            UPDATE (`balance >= amount`): no read-then-write, so concurrent requests can
 *            never overspend.
 * - settle:  afterwards the hold is released and the exact cost charged; lots are consumed
 *            soonest-expiring first.
 * - expiry:  credit of a lot past its expiry stops being spendable (checked at every hold
 *            and by the sweeper).
 * - take back: a refunded or disputed purchase's lot gives back what it has left, as far as
 *            the balance covers (`takeBackLotCredit`, a `refund` entry).
 * - holds of dead nodes or past their expiry are released by the sweeper, their cost left
 *   open: a node that only looked dead and settles later is charged then, once, as far as
 *   the balance covers.
 *
 * The SQL that differs between SQLite and PostgreSQL sits behind `LedgerStatements`
 * (`ledger-statements/`), chosen once by the dialect recorded where the store was opened. On
 * PostgreSQL every statement is a network round trip, and round trips are what a hold and a
 * settlement cost, so there they run as data-modifying CTEs (`ledger-statements/postgres.ts`):
 * a hold is one statement with no explicit transaction in the common case (the transactional
 * path decides the rest), a settlement two statements, the usage record included, between BEGIN
 * and COMMIT. SQLite is in-process: it runs the plain steps (`ledger-statements/sqlite.ts`),
 * which are also what the CTEs do. The rest, the same in both, is here.
 */
import { sql, type Kysely, type Selectable, type Transaction } from "kysely";
import { newId } from "../store/ids.ts";
import type { Database, HoldTable } from "../store/schema.ts";
import type { UsageRecord } from "./usage.ts";
import { ledgerStatementsOf, type HoldInput, type LedgerStatements } from "./ledger-statements/index.ts";
import { addEntry, consumeLots, insertUsage } from "./ledger-statements/writes.ts";
import { InsufficientQuotaError } from "../protocol/errors.ts";
import { BalanceLimitExceededError, PlanOutOfBoundsError } from "./errors.ts";
import { MAX_CREDIT, MAX_PLAN_DAYS } from "../protocol/money-bounds.ts";

const DAY_MS = 24 * 60 * 60 * 1000;

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

/**
 * Grants credit once per `source`. Returns whether this call granted it (false: that source
 * was granted before). Throws 409 `BalanceLimitExceededError`, granting nothing, when the
 * account's balance plus what its active holds reserve plus `amount` would pass `MAX_CREDIT`:
 * the balance is raised by a conditional write, so no read-then-write race can pass it either.
 */
export async function grantCredit(database: Kysely<Database>, input: GrantInput): Promise<{ granted: boolean; lotId: string | null }> {
  if (!Number.isSafeInteger(input.amount) || input.amount < 0) throw new Error("a grant must be a non-negative integer");
  if (input.amount > MAX_CREDIT) throw new BalanceLimitExceededError(input.amount, MAX_CREDIT);
  if (input.days != null && (!Number.isInteger(input.days) || input.days < 1 || input.days > MAX_PLAN_DAYS)) {
    throw new PlanOutOfBoundsError(`A grant lasts from 1 to ${MAX_PLAN_DAYS} days, not ${input.days}. Edit the plan's 'days'.`);
  }
  const now = input.now ?? Date.now();
  const statements = ledgerStatementsOf(database);
  return database.transaction().execute(async (transaction) => {
    const account = await statements.lockAccount(transaction, input.accountId);
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
    // The conditional write: what the account holds after the grant (its balance and the credit
    // its running requests reserve) stays within MAX_CREDIT, or no row changes.
    const raised = await transaction
      .updateTable("accounts")
      .set((expression) => ({ balance: expression("balance", "+", input.amount) }))
      .$if(input.planId != null, (query) => query.set({ plan_id: input.planId! }))
      .where("id", "=", input.accountId)
      .where(
        sql<boolean>`balance + cast(${input.amount} as bigint)
          + coalesce((select sum(holds.amount) from holds where holds.account_id = accounts.id and holds.status = 'active'), 0)
          <= cast(${MAX_CREDIT} as bigint)`,
      )
      .executeTakeFirst();
    // Thrown inside the transaction: the lot inserted above is rolled back with it.
    if (Number(raised.numUpdatedRows) === 0) throw new BalanceLimitExceededError(input.amount, MAX_CREDIT);
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
  const statements = ledgerStatementsOf(database);
  return database.transaction().execute(async (transaction) => {
    const account = await statements.lockAccount(transaction, accountId);
    return account === undefined ? 0 : expireLots(transaction, accountId, account.balance, now);
  });
}

/**
 * Takes back up to `amount` of the credit one lot has left (a purchase refunded or disputed),
 * inside the caller's transaction: due expiries are applied first, then the account's row is
 * debited by what the lot still holds, as far as the balance covers (never below zero; credit
 * that running requests reserve stays theirs), and a `refund` entry is written, for 0 too, so
 * that the history shows the reversal. Returns what was taken and the entry's id; undefined when
 * the account is gone.
 */
export async function takeBackLotCredit(
  transaction: Transaction<Database>,
  input: { accountId: string; lotId: string; amount: number; now: number },
): Promise<{ taken: number; entryId: string } | undefined> {
  if (!Number.isSafeInteger(input.amount) || input.amount < 0) throw new Error("credit taken back must be a non-negative integer");
  const statements = ledgerStatementsOf(transaction);
  const account = await statements.lockAccount(transaction, input.accountId);
  if (account === undefined) return undefined;
  const expired = await expireLots(transaction, input.accountId, account.balance, input.now);
  const lot = await transaction.selectFrom("credit_lots").select("remaining").where("id", "=", input.lotId).where("account_id", "=", input.accountId).executeTakeFirst();
  const taken = Math.max(0, Math.min(input.amount, Number(lot?.remaining ?? 0), account.balance - expired));
  if (taken > 0) {
    await transaction.updateTable("credit_lots").set((expression) => ({ remaining: expression("remaining", "-", taken) })).where("id", "=", input.lotId).execute();
    await transaction.updateTable("accounts").set((expression) => ({ balance: expression("balance", "-", taken) })).where("id", "=", input.accountId).execute();
  }
  const entryId = await addEntry(transaction, { accountId: input.accountId, kind: "refund", amount: -taken, lotId: input.lotId, now: input.now });
  return { taken, entryId };
}

export type { HoldInput };

/**
 * Takes `amount` off the account's balance with one conditional write (`balance >= amount`),
 * the row lock it takes holding for the rest of the transaction. Unless `expiryApplied`, it
 * also refuses while any of the account's lots is due to expire, so that the caller applies
 * the expiry first: the common case (nothing due) then costs this one statement.
 */
async function debitAccount(transaction: Transaction<Database>, accountId: string, amount: number, now: number, expiryApplied: boolean): Promise<boolean> {
  const debited = await transaction
    .updateTable("accounts")
    .set((expression) => ({ balance: expression("balance", "-", amount) }))
    .where("id", "=", accountId)
    .where("balance", ">=", amount)
    .where("disabled_at", "is", null)
    .$if(!expiryApplied, (query) =>
      query.where((expression) =>
        expression.not(
          expression.exists(
            expression
              .selectFrom("credit_lots")
              .select("credit_lots.id")
              .whereRef("credit_lots.account_id", "=", "accounts.id")
              .where("credit_lots.expires_at", "<=", now)
              .where("credit_lots.remaining", ">", 0),
          ),
        ),
      ),
    )
    .executeTakeFirst();
  return Number(debited.numUpdatedRows) > 0;
}

/**
 * Reserves `amount` against the account (and the key's spend cap), atomically.
 * Throws `InsufficientQuotaError` when either does not cover it.
 */
export async function placeHold(database: Kysely<Database>, input: HoldInput): Promise<string> {
  const now = input.now ?? Date.now();
  const statements = ledgerStatementsOf(database);
  const held = await statements.placeHoldInOneStatement(database, input, now);
  if (held !== undefined) return held;
  // A refusal commits too (the expiries it applied stay applied), then throws outside.
  const outcome = await database.transaction().execute(async (transaction): Promise<{ holdId: string } | { refused: string }> => {
    // The account row is locked first, then the key's, the order settling takes too (no deadlock).
    if (!(await debitAccount(transaction, input.accountId, input.amount, now, false))) {
      // Refused, gone, disabled, or credit due to expire: lock the row, apply the expiries, try once more.
      const account = await statements.lockAccount(transaction, input.accountId);
      if (account === undefined) return { refused: "This API key's account no longer exists." };
      const expired = await expireLots(transaction, input.accountId, account.balance, now);
      if (!(await debitAccount(transaction, input.accountId, input.amount, now, true))) {
        return {
          refused:
            `You exceeded your current quota: this request may cost up to ${input.amount} credits and the account has ${Math.max(0, account.balance - expired)}. ` +
            "Buy a plan, redeem a code, or lower max_tokens.",
        };
      }
    }
    const holdId = newId("hold", now);
    const recorded = await statements.recordHold(transaction, input, holdId, now);
    if (!recorded) {
      // Give the debit back in the same transaction: no entry was written for it, nobody saw it.
      await transaction.updateTable("accounts").set((expression) => ({ balance: expression("balance", "+", input.amount) })).where("id", "=", input.accountId).execute();
      return { refused: "This API key reached its spend cap. Raise the cap or use another key." };
    }
    return { holdId };
  });
  if ("refused" in outcome) throw new InsufficientQuotaError(outcome.refused);
  return outcome.holdId;
}

/**
 * Closes a hold: releases the reservation and charges `cost`. What the hold covers is charged
 * through it; when `cost` is more than the amount held (an upstream reported more usage than the
 * prompt bound allowed for), the difference is charged too, in the same transaction, as far as
 * the balance covers (`chargeBeyondHold`): never below zero, and the usage record says the whole
 * charge. A hold closed already (settled twice, or released by the sweeper) is not charged again
 * through the hold; a release is a settlement at cost 0. Returns what was charged.
 */
export async function settleHold(
  database: Kysely<Database>,
  holdId: string,
  cost: number,
  now = Date.now(),
  /** The request's usage record, given what was charged: it commits with the charge. */
  usage?: (charged: number) => UsageRecord,
): Promise<number> {
  // A hold settled already (null: a retry of a settlement whose commit went through unanswered)
  // charges and records nothing more.
  const statements = ledgerStatementsOf(database);
  // The record's id is fixed here, so that a charge beyond the hold can correct the record's cost.
  const usageId = newId("use", now);
  const record =
    usage === undefined
      ? undefined
      : (charged: number): UsageRecord => {
          const written = usage(charged);
          return { ...written, id: written.id ?? usageId };
        };
  const charged = await database.transaction().execute(async (transaction) => {
    const charge = await statements.settleActiveHold(transaction, holdId, cost, now, record);
    if (charge === undefined) return settleClosedHold(statements, transaction, holdId, cost, now, record);
    if (cost <= charge) return charge;
    const beyond = await chargeBeyondHold(statements, transaction, holdId, cost - charge, now);
    if (beyond > 0 && record !== undefined) {
      await transaction.updateTable("usage_records").set({ cost: charge + beyond }).where("id", "=", record(charge).id!).execute();
    }
    return charge + beyond;
  });
  return charged ?? 0;
}

/**
 * Charges `extra` past what a hold just settled covered, as far as the account's balance goes
 * (the account row is locked already: settling the hold updated it). One more settle entry, the
 * lots, the key's spend and the hold's cost follow, so the balance stays the sum of the entries
 * and never goes below zero. Returns what it charged.
 */
async function chargeBeyondHold(statements: LedgerStatements, transaction: Transaction<Database>, holdId: string, extra: number, now: number): Promise<number> {
  const hold = await statements.lockHold(transaction, holdId);
  if (hold === undefined) return 0;
  const account = await statements.lockAccount(transaction, hold.account_id);
  const charge = account === undefined ? 0 : Math.max(0, Math.min(extra, account.balance));
  if (charge <= 0) return 0;
  await transaction.updateTable("holds").set((expression) => ({ cost: expression("cost", "+", charge) })).where("id", "=", holdId).execute();
  await chargeForHold(transaction, { accountId: hold.account_id, keyId: hold.key_id, holdId, charge, now });
  return charge;
}

/**
 * Takes `charge` credits (positive, at most the balance: the caller locked the account and
 * checked) for a hold: the balance, a `settle` entry, the oldest lots, and the key's spend.
 */
async function chargeForHold(
  transaction: Transaction<Database>,
  charged: { accountId: string; keyId: string | null; holdId: string; charge: number; now: number },
): Promise<void> {
  const { accountId, keyId, holdId, charge, now } = charged;
  await transaction.updateTable("accounts").set((expression) => ({ balance: expression("balance", "-", charge) })).where("id", "=", accountId).execute();
  await addEntry(transaction, { accountId, kind: "settle", amount: -charge, holdId, now });
  await consumeLots(transaction, accountId, charge);
  if (keyId !== null) {
    await transaction.updateTable("api_keys").set((expression) => ({ spent: expression("spent", "+", charge) })).where("id", "=", keyId).execute();
  }
}

/**
 * A hold closed already. With the request's record: the record counts as written once (a record
 * with its id there already, an attempt whose commit went through unanswered or the sweeper's
 * record of its last checkpoint, is replaced where this one costs more, never duplicated), and
 * the hold is charged what its records say beyond what it was charged (`chargeRecordsOf`): a
 * retry charges nothing more, a late settlement of a swept hold charges its record. A hold
 * settled already whose record is not there (a retry whose record's id was not fixed) is left
 * alone. Without a record: `chargeClosedHold`.
 */
async function settleClosedHold(
  statements: LedgerStatements,
  transaction: Transaction<Database>,
  holdId: string,
  cost: number,
  now: number,
  usage?: (charged: number) => UsageRecord,
): Promise<number | null> {
  if (usage === undefined) return chargeClosedHold(statements, transaction, holdId, cost, now);
  const hold = await statements.lockHold(transaction, holdId);
  if (hold === undefined) throw new Error(`no hold '${holdId}'`);
  const record = usage(Math.max(0, cost));
  const written = await transaction.selectFrom("usage_records").select("id").where("id", "=", record.id!).executeTakeFirst();
  if (written === undefined && (hold.status !== "released" || hold.cost !== null)) return null;
  await insertUsage(transaction, { ...record, hold_id: holdId }, "costlier");
  return (await chargeLateRecords(statements, transaction, hold, now)).charged;
}

/** What charging a hold its records did: charged now, and what the balance could not cover (taken off the records). */
export type RecordsCharge = { charged: number; short: number };

/**
 * Charges a hold what the usage records written against it say, in the caller's transaction.
 * The hold's row is locked first, as a group commit locks its records' holds before writing
 * them: no record can land between the sum and the close, and one that lands after the close
 * sees the hold closed and is charged then. An active hold (a lease closing, or a dead node's
 * hold the sweeper closes) is settled at its records' sum, past its amount as far as the balance
 * covers. A closed one is charged what its records add to what it was charged already (records
 * that landed late), as far as the balance covers. Whatever the balance could not cover is taken
 * off the newest records' cost, so that its records always say what the hold charged.
 * Undefined: no such hold.
 */
export async function chargeRecordsOf(transaction: Transaction<Database>, holdId: string, now: number): Promise<RecordsCharge | undefined> {
  const statements = ledgerStatementsOf(transaction);
  const hold = await statements.lockHold(transaction, holdId);
  if (hold === undefined) return undefined;
  if (hold.status !== "active") return chargeLateRecords(statements, transaction, hold, now);
  const recorded = await sumOfRecords(transaction, holdId);
  const charge = (await statements.settleActiveHold(transaction, holdId, recorded, now)) ?? 0;
  const beyond = recorded > charge ? await chargeBeyondHold(statements, transaction, holdId, recorded - charge, now) : 0;
  const short = recorded - charge - beyond;
  if (short > 0) await trimRecords(transaction, holdId, short);
  return { charged: charge + beyond, short };
}

/** The sum of the costs of the records written against a hold. */
async function sumOfRecords(transaction: Transaction<Database>, holdId: string): Promise<number> {
  const row = await transaction.selectFrom("usage_records").select((expression) => expression.fn.sum<number>("cost").as("total")).where("hold_id", "=", holdId).executeTakeFirst();
  return Number(row?.total ?? 0);
}

/**
 * A closed hold (locked by the caller): charges what its records say beyond what it charged
 * (its `cost`; none when the sweeper released it), as far as the balance covers, and closes its cost.
 */
async function chargeLateRecords(statements: LedgerStatements, transaction: Transaction<Database>, hold: Selectable<HoldTable>, now: number): Promise<RecordsCharge> {
  const already = Number(hold.cost ?? 0);
  const due = (await sumOfRecords(transaction, hold.id)) - already;
  if (due <= 0) {
    if (hold.cost === null) await transaction.updateTable("holds").set({ cost: 0 }).where("id", "=", hold.id).execute();
    return { charged: 0, short: 0 };
  }
  const account = await statements.lockAccount(transaction, hold.account_id);
  const charge = Math.max(0, Math.min(due, account?.balance ?? 0));
  await transaction.updateTable("holds").set({ cost: already + charge }).where("id", "=", hold.id).execute();
  if (charge > 0) await chargeForHold(transaction, { accountId: hold.account_id, keyId: hold.key_id, holdId: hold.id, charge, now });
  const short = due - charge;
  if (short > 0) await trimRecords(transaction, hold.id, short);
  return { charged: charge, short };
}

/** Takes `short` off the cost of a hold's newest records: what they say is then what was charged. */
async function trimRecords(transaction: Transaction<Database>, holdId: string, short: number): Promise<void> {
  const records = await transaction
    .selectFrom("usage_records")
    .select(["id", "cost"])
    .where("hold_id", "=", holdId)
    .where("cost", ">", 0)
    .orderBy("created_at", "desc")
    .orderBy("id", "desc")
    .execute();
  let left = short;
  for (const record of records) {
    if (left <= 0) break;
    const taken = Math.min(Number(record.cost), left);
    await transaction.updateTable("usage_records").set({ cost: Number(record.cost) - taken }).where("id", "=", record.id).execute();
    left -= taken;
  }
}

/**
 * A hold that was closed already. One released early (its node looked dead) and never
 * charged: the tokens were still generated, so charge them once now, as far as the balance
 * covers, and close its cost. One whose cost is closed was settled: null, nothing to do.
 */
async function chargeClosedHold(statements: LedgerStatements, transaction: Transaction<Database>, holdId: string, cost: number, now: number): Promise<number | null> {
  const hold = await statements.lockHold(transaction, holdId);
  if (hold === undefined) throw new Error(`no hold '${holdId}'`);
  if (hold.status !== "released" || hold.cost !== null) return null;
  const account = await statements.lockAccount(transaction, hold.account_id);
  const charge = account === undefined ? 0 : Math.max(0, Math.min(cost, account.balance));
  await transaction.updateTable("holds").set({ cost: charge }).where("id", "=", holdId).execute();
  if (charge > 0) await chargeForHold(transaction, { accountId: hold.account_id, keyId: hold.key_id, holdId, charge, now });
  return charge;
}

/** Releases a hold without charging (the request failed before generating). */
export async function releaseHold(database: Kysely<Database>, holdId: string, now = Date.now()): Promise<void> {
  await settleHold(database, holdId, 0, now);
}

/**
 * Releases a hold the sweeper found stale, leaving its cost open (NULL): its request may still
 * be running on a node that only looked dead, and if that node settles it later, the tokens are
 * charged then, once (`chargeClosedHold`). A hold settled or released meanwhile is left alone.
 */
async function releaseStaleHold(database: Kysely<Database>, holdId: string, now: number): Promise<boolean> {
  return database.transaction().execute(async (transaction) => {
    // The conditional close comes first, as in settling: hold row, then account, then key.
    const closed = await transaction
      .updateTable("holds")
      .set({ status: "released", cost: null, closed_at: now })
      .where("id", "=", holdId)
      .where("status", "=", "active")
      .returning(["account_id", "key_id", "amount"])
      .executeTakeFirst();
    if (closed === undefined) return false;
    const amount = Number(closed.amount);
    await transaction.updateTable("accounts").set((expression) => ({ balance: expression("balance", "+", amount) })).where("id", "=", closed.account_id).execute();
    await addEntry(transaction, { accountId: closed.account_id, kind: "release", amount, holdId, now });
    if (closed.key_id !== null) {
      await transaction.updateTable("api_keys").set((expression) => ({ reserved: expression("reserved", "-", amount) })).where("id", "=", closed.key_id).execute();
    }
    return true;
  });
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
  let released = 0;
  for (const hold of stale) if (await releaseStaleHold(database, hold.id, now)) released++;
  return released;
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
