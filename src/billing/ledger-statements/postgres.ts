/**
 * The ledger's statements on PostgreSQL. Every statement is a network round trip, and round trips
 * are what a hold and a settlement cost, so here they run as data-modifying CTEs: a hold is one
 * statement with no explicit transaction in the common case (the transactional path decides the
 * rest), a settlement two statements, the usage record included, between BEGIN and COMMIT. They
 * do what `sqlite.ts`'s plain steps do, and take the rows in the same order: hold, then account,
 * then key. Rows read before a write are locked `FOR UPDATE`.
 */
import { sql, type Kysely, type Transaction } from "kysely";
import { newId } from "../../store/ids.ts";
import type { Database } from "../../store/schema.ts";
import type { UsageRecord } from "../usage.ts";
import type { HoldInput, LedgerStatements } from "./statements.ts";
import { closingEntries, USAGE_OVERWRITTEN } from "./writes.ts";

async function lockAccount(transaction: Transaction<Database>, accountId: string): Promise<{ balance: number } | undefined> {
  const row = await transaction.selectFrom("accounts").select(["balance"]).where("id", "=", accountId).forUpdate().executeTakeFirst();
  return row && { balance: Number(row.balance) };
}

/**
 * The common case of `placeHold` in one round trip and no explicit transaction:
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
 * `recordHold` in one round trip: the key's conditional write and both inserts
 * as one statement (data-modifying CTEs); the inserts take place only when the key admitted
 * the amount (or there is no key). The casts type the parameters of `insert … select`.
 */
async function recordHold(transaction: Transaction<Database>, input: HoldInput, holdId: string, now: number): Promise<boolean> {
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

/**
 * `settleActiveHold` in two round trips (data-modifying CTEs): the writes of SQLite's steps, in
 * the same lock order. The first statement closes the hold (the conditional write) and gives
 * the account back what was not charged, locking the hold, then the account row. The second
 * writes the entries and the usage record, charges the lots and updates the key: it starts after the account lock is
 * held, so its snapshot of the lots is current (a single statement's would predate the lock),
 * and charges the lots in one UPDATE where `consumeLots` reads them and updates each.
 */
async function settleActiveHold(transaction: Transaction<Database>, holdId: string, cost: number, now: number, usage?: (charged: number) => UsageRecord): Promise<number | undefined> {
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
  if (closed === undefined) return undefined;
  const amount = Number(closed.amount);
  const charge = Number(closed.cost);
  const record = usage?.(charge);
  // The usage record rides in the same statement as the entries.
  const recorded =
    record === undefined
      ? sql``
      : sql`, recorded as (
        insert into usage_records (id, request_id, account_id, key_id, model, prompt_tokens, cached_prompt_tokens, completion_tokens, reasoning_tokens, usage_source,
                                   cost, latency_ms, status, finish_reason, stream, created_at, hold_id)
        values (${record.id ?? newId("use", record.created_at)}, ${record.request_id}, ${record.account_id}, ${record.key_id}, ${record.model}, ${record.prompt_tokens},
                ${record.cached_prompt_tokens}, ${record.completion_tokens}, ${record.reasoning_tokens ?? 0}, ${record.usage_source ?? null}, ${record.cost}, ${record.latency_ms},
                ${record.status}, ${record.finish_reason}, ${record.stream}, ${record.created_at}, ${record.hold_id ?? null})
        -- Written already (the sweeper's record of this request's last checkpoint): this one replaces it.
        on conflict (id) do update set ${sql.join(USAGE_OVERWRITTEN.map((column) => sql`${sql.ref(column)} = ${sql.ref(`excluded.${column}`)}`))}
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

export const postgresStatements: LedgerStatements = {
  lockAccount,
  lockHold: (transaction, holdId) => transaction.selectFrom("holds").selectAll().where("id", "=", holdId).forUpdate().executeTakeFirst(),
  lockHolds: async (transaction, holdIds) =>
    holdIds.length === 0 ? [] : transaction.selectFrom("holds").selectAll().where("id", "in", [...holdIds]).orderBy("id").forUpdate().execute(),
  placeHoldInOneStatement,
  recordHold,
  settleActiveHold,
};
