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
 * - holds of dead nodes or past their expiry are released by the sweeper, their cost left
 *   open: a node that only looked dead and settles later is charged then, once, as far as
 *   the balance covers.
 *
 * On PostgreSQL every statement is a network round trip, and round trips are what a hold and
 * a settlement cost, so there they run as data-modifying CTEs: a hold is one statement with no
 * explicit transaction in the common case (the transactional path decides the rest), a
 * settlement two statements, the usage record included, between BEGIN and COMMIT. SQLite is
 * in-process: it runs the plain steps, which are also what the CTEs do.
 */
import { pooledRandomBytes } from "../store/random.ts";
import { PostgresAdapter, sql, type Kysely, type Transaction } from "kysely";
import type { Database, LedgerEntryKind } from "../store/schema.ts";
import type { UsageRecord } from "./usage.ts";
import { InsufficientQuotaError } from "../protocol/errors.ts";
import { BalanceLimitExceededError, PlanOutOfBoundsError } from "./errors.ts";
import { MAX_CREDIT, MAX_PLAN_DAYS } from "./money-bounds.ts";

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
  return `${prefix}_${now.toString(36).padStart(9, "0")}${sequence.toString(36).padStart(4, "0")}${pooledRandomBytes(6).toString("hex")}`;
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
  if (isPostgres(database)) {
    const held = await placeHoldInOneStatement(database, input, now);
    if (held !== undefined) return held;
  }
  // A refusal commits too (the expiries it applied stay applied), then throws outside.
  const outcome = await database.transaction().execute(async (transaction): Promise<{ holdId: string } | { refused: string }> => {
    // The account row is locked first, then the key's, the order settling takes too (no deadlock).
    if (!(await debitAccount(transaction, input.accountId, input.amount, now, false))) {
      // Refused, gone, disabled, or credit due to expire: lock the row, apply the expiries, try once more.
      const account = await lockAccount(transaction, input.accountId);
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
    const recorded = isPostgres(transaction) ? await recordHoldOnPostgres(transaction, input, holdId, now) : await recordHold(transaction, input, holdId, now);
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
 * The common case of `placeHold` on PostgreSQL in one round trip and no explicit transaction:
 * one statement (data-modifying CTEs, atomic on its own) debits the account, reserves the
 * amount against the key, and writes the hold and its entry. It takes the account row, then
 * the key's, the order settling takes too. Returns undefined, having changed nothing, when the
 * transactional path must decide: the balance does not cover the amount, credit is due to
 * expire, the account is disabled or gone, or the key's spend cap refuses (then the hold's
 * amount is NULL, which its NOT NULL constraint turns into an error that undoes the statement).
 */
async function placeHoldInOneStatement(database: Kysely<Database>, input: HoldInput, now: number): Promise<string | undefined> {
  const holdId = newId("hold", now);
  try {
    const { rows } = await sql`
      with debited as (
        update accounts set balance = balance - ${input.amount}
        where id = ${input.accountId} and balance >= ${input.amount} and disabled_at is null
          and not exists (
            select 1 from credit_lots
            where credit_lots.account_id = accounts.id and credit_lots.expires_at <= ${now} and credit_lots.remaining > 0
          )
        returning id
      ), key_reserved as (
        update api_keys set reserved = reserved + ${input.amount}
        where id = ${input.keyId} and (spend_cap is null or spent + reserved + ${input.amount} <= spend_cap)
          and exists (select 1 from debited)
        returning id
      ), hold as (
        insert into holds (id, account_id, key_id, amount, status, node_id, expires_at, created_at)
        select ${holdId}::text, ${input.accountId}::text, ${input.keyId}::text,
               case when ${input.keyId}::text is null or exists (select 1 from key_reserved) then ${input.amount}::bigint end,
               'active', ${input.nodeId}::text, ${now + input.ttlMs}::bigint, ${now}::bigint
        from debited
        returning id
      )
      insert into ledger_entries (id, account_id, kind, amount, hold_id, created_at)
      select ${newId("le", now)}::text, ${input.accountId}::text, 'hold', ${-input.amount}::bigint, ${holdId}::text, ${now}::bigint
      from hold
      returning id
    `.execute(database);
    return rows.length > 0 ? holdId : undefined;
  } catch (error) {
    const { code, table } = error as { code?: string; table?: string };
    if (code === "23502" && table === "holds") return undefined;
    throw error;
  }
}

/**
 * After the debit: reserves the amount against the key's spend cap (a conditional write), then
 * writes the hold and its entry. Returns false, having written nothing, when the cap refuses.
 */
async function recordHold(transaction: Transaction<Database>, input: HoldInput, holdId: string, now: number): Promise<boolean> {
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
    if (Number(keyReserved.numUpdatedRows) === 0) return false;
  }
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
  return true;
}

/**
 * `recordHold` in one round trip: PostgreSQL runs the key's conditional write and both inserts
 * as one statement (data-modifying CTEs); the inserts take place only when the key admitted
 * the amount (or there is no key). The casts type the parameters of `insert … select`.
 */
async function recordHoldOnPostgres(transaction: Transaction<Database>, input: HoldInput, holdId: string, now: number): Promise<boolean> {
  const { rows } = await sql`
    with key_reserved as (
      update api_keys set reserved = reserved + ${input.amount}
      where id = ${input.keyId} and (spend_cap is null or spent + reserved + ${input.amount} <= spend_cap)
      returning id
    ), admitted as (
      select 1 where ${input.keyId}::text is null or exists (select 1 from key_reserved)
    ), hold as (
      insert into holds (id, account_id, key_id, amount, status, node_id, expires_at, created_at)
      select ${holdId}::text, ${input.accountId}::text, ${input.keyId}::text, ${input.amount}::bigint, 'active', ${input.nodeId}::text,
             ${now + input.ttlMs}::bigint, ${now}::bigint
      from admitted
    )
    insert into ledger_entries (id, account_id, kind, amount, hold_id, created_at)
    select ${newId("le", now)}::text, ${input.accountId}::text, 'hold', ${-input.amount}::bigint, ${holdId}::text, ${now}::bigint
    from admitted
    returning id
  `.execute(transaction);
  return rows.length > 0;
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
  /** The request's usage record, given what was charged: it commits with the charge. */
  usage?: (charged: number) => UsageRecord,
): Promise<number> {
  // A hold settled already (null: a retry of a settlement whose commit went through unanswered)
  // charges and records nothing more.
  const charged = await database
    .transaction()
    .execute(async (transaction) => (isPostgres(transaction) ? settleOnPostgres(transaction, holdId, cost, now, usage) : settleInTransaction(transaction, holdId, cost, now, usage)));
  return charged ?? 0;
}

/** Writes a usage record in the settling transaction. */
async function insertUsage(transaction: Transaction<Database>, record: UsageRecord): Promise<void> {
  await transaction.insertInto("usage_records").values({ id: newId("use", record.created_at), ...record }).execute();
}

/** A hold closed already: `chargeClosedHold`, and the usage record when it charged. */
async function settleClosedHold(transaction: Transaction<Database>, holdId: string, cost: number, now: number, usage?: (charged: number) => UsageRecord): Promise<number | null> {
  const charge = await chargeClosedHold(transaction, holdId, cost, now);
  if (charge !== null && usage !== undefined) await insertUsage(transaction, usage(charge));
  return charge;
}

/** The release entry and, when something was charged, the settle entry after it (ids are time-ordered). */
function closingEntries(accountId: string, holdId: string, amount: number, charge: number, now: number) {
  const entry = (kind: LedgerEntryKind, entryAmount: number) => ({ id: newId("le", now), account_id: accountId, kind, amount: entryAmount, lot_id: null, hold_id: holdId, created_at: now });
  return charge > 0 ? [entry("release", amount), entry("settle", -charge)] : [entry("release", amount)];
}

/** Closes an active hold step by step (SQLite; `settleOnPostgres` does the same in two statements). */
async function settleInTransaction(transaction: Transaction<Database>, holdId: string, cost: number, now: number, usage?: (charged: number) => UsageRecord): Promise<number | null> {
  // Closing the hold is the conditional write (`status = 'active'`): of two settlements, or a
  // settlement and the sweeper, only one closes it. The charge is capped at the amount held in
  // SQL, and RETURNING hands back what the rest needs, so the hold is never read first.
  const asked = Math.max(0, cost);
  const closed = await transaction
    .updateTable("holds")
    .set({ status: asked > 0 ? "settled" : "released", cost: sql<number>`case when amount < ${asked} then amount else ${asked} end`, closed_at: now })
    .where("id", "=", holdId)
    .where("status", "=", "active")
    .returning(["account_id", "key_id", "amount", "cost"])
    .executeTakeFirst();
  if (closed === undefined) return settleClosedHold(transaction, holdId, cost, now, usage);
  const accountId = closed.account_id;
  const amount = Number(closed.amount);
  const charge = Number(closed.cost);
  // Holds reference their account, so the row is there; this UPDATE locks it (hold, then account).
  await transaction
    .updateTable("accounts")
    .set((expression) => ({ balance: expression("balance", "+", amount - charge) }))
    .where("id", "=", accountId)
    .execute();
  await transaction.insertInto("ledger_entries").values(closingEntries(accountId, holdId, amount, charge, now)).execute();
  await consumeLots(transaction, accountId, charge);
  if (closed.key_id !== null) {
    await transaction
      .updateTable("api_keys")
      .set((expression) => ({ reserved: expression("reserved", "-", amount), spent: expression("spent", "+", charge) }))
      .where("id", "=", closed.key_id)
      .execute();
  }
  if (usage !== undefined) await insertUsage(transaction, usage(charge));
  return charge;
}

/**
 * `settleInTransaction` in two round trips on PostgreSQL (data-modifying CTEs), the same writes
 * in the same lock order. The first statement closes the hold (the conditional write) and gives
 * the account back what was not charged, locking the hold, then the account row. The second
 * writes the entries and the usage record, charges the lots and updates the key: it starts after the account lock is
 * held, so its snapshot of the lots is current (a single statement's would predate the lock),
 * and charges the lots in one UPDATE where `consumeLots` reads them and updates each.
 */
async function settleOnPostgres(transaction: Transaction<Database>, holdId: string, cost: number, now: number, usage?: (charged: number) => UsageRecord): Promise<number | null> {
  const asked = Math.max(0, cost);
  const { rows } = await sql<{ account_id: string; key_id: string | null; amount: number; cost: number }>`
    with closed as (
      update holds set status = ${asked > 0 ? "settled" : "released"}, cost = least(amount, ${asked}::bigint), closed_at = ${now}::bigint
      where id = ${holdId} and status = 'active'
      returning account_id, key_id, amount, cost
    ), refunded as (
      update accounts set balance = balance + closed.amount - closed.cost from closed where accounts.id = closed.account_id
    )
    select account_id, key_id, amount, cost from closed
  `.execute(transaction);
  const closed = rows[0];
  if (closed === undefined) return settleClosedHold(transaction, holdId, cost, now, usage);
  const amount = Number(closed.amount);
  const charge = Number(closed.cost);
  const record = usage?.(charge);
  // The usage record rides in the same statement as the entries.
  const recorded =
    record === undefined
      ? sql``
      : sql`, recorded as (
        insert into usage_records (id, request_id, account_id, key_id, model, prompt_tokens, cached_prompt_tokens, completion_tokens, cost, latency_ms, status, finish_reason, stream, created_at)
        values (${newId("use", record.created_at)}, ${record.request_id}, ${record.account_id}, ${record.key_id}, ${record.model}, ${record.prompt_tokens}, ${record.cached_prompt_tokens},
                ${record.completion_tokens}, ${record.cost}, ${record.latency_ms}, ${record.status}, ${record.finish_reason}, ${record.stream}, ${record.created_at})
      )`;
  const entries = closingEntries(closed.account_id, holdId, amount, charge, now).map(
    (entry) => sql`(${entry.id}, ${entry.account_id}, ${entry.kind}, ${entry.amount}::bigint, ${entry.hold_id}, ${entry.created_at}::bigint)`,
  );
  await sql`
    with entries as (
      insert into ledger_entries (id, account_id, kind, amount, hold_id, created_at) values ${sql.join(entries)}
    ), key_charged as (
      update api_keys set reserved = reserved - ${amount}, spent = spent + ${charge} where id = ${closed.key_id}
    )${recorded}, ordered_lots as (
      -- The lots with credit left, soonest-expiring first (lots without expiry last: NULLs
      -- sort last here), each with the credit of the lots before it.
      select id, remaining, sum(remaining) over (order by expires_at nulls last, id) - remaining as before_lot
      from credit_lots
      where account_id = ${closed.account_id} and remaining > 0
    )
    -- Each lot gives min(remaining, charge - before_lot); lots past the charge are left alone.
    update credit_lots
    set remaining = credit_lots.remaining - least(ordered_lots.remaining, ${charge} - ordered_lots.before_lot)
    from ordered_lots
    where credit_lots.id = ordered_lots.id and ordered_lots.before_lot < ${charge}
  `.execute(transaction);
  return charge;
}

/**
 * A hold that was closed already. One released early (its node looked dead) and never
 * charged: the tokens were still generated, so charge them once now, as far as the balance
 * covers, and close its cost. One whose cost is closed was settled: null, nothing to do.
 */
async function chargeClosedHold(transaction: Transaction<Database>, holdId: string, cost: number, now: number): Promise<number | null> {
  let query = transaction.selectFrom("holds").selectAll().where("id", "=", holdId);
  if (isPostgres(transaction)) query = query.forUpdate();
  const hold = await query.executeTakeFirst();
  if (hold === undefined) throw new Error(`no hold '${holdId}'`);
  if (hold.status !== "released" || hold.cost !== null) return null;
  const account = await lockAccount(transaction, hold.account_id);
  const charge = account === undefined ? 0 : Math.max(0, Math.min(cost, account.balance));
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
