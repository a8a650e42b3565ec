/**
 * The ledger's statements on SQLite: the plain steps, one statement each. SQLite is in-process,
 * so a statement costs no round trip, and its write transactions are exclusive (`BEGIN
 * IMMEDIATE`): no row needs locking. `postgres.ts` does the same writes in fewer statements.
 */
import { sql, type Transaction } from "kysely";
import type { Database } from "../../store/schema.ts";
import type { UsageRecord } from "../usage.ts";
import type { HoldInput, LedgerStatements } from "./statements.ts";
import { addEntry, closingEntries, consumeLots, insertUsage } from "./writes.ts";

async function lockAccount(transaction: Transaction<Database>, accountId: string): Promise<{ balance: number } | undefined> {
  const row = await transaction.selectFrom("accounts").select(["balance"]).where("id", "=", accountId).executeTakeFirst();
  return row && { balance: Number(row.balance) };
}

/** After the debit: reserves the amount against the key's spend cap, then writes the hold and its entry. */
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

/** Closes an active hold step by step (`postgres.ts` does the same in two statements). */
async function settleActiveHold(transaction: Transaction<Database>, holdId: string, cost: number, now: number, usage?: (charged: number) => UsageRecord): Promise<number | undefined> {
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
  if (closed === undefined) return undefined;
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

export const sqliteStatements: LedgerStatements = {
  lockAccount,
  lockHold: (transaction, holdId) => transaction.selectFrom("holds").selectAll().where("id", "=", holdId).executeTakeFirst(),
  lockHolds: async (transaction, holdIds) => (holdIds.length === 0 ? [] : transaction.selectFrom("holds").selectAll().where("id", "in", [...holdIds]).orderBy("id").execute()),
  // No cheaper path than the transaction, which costs no round trips here: `placeHold` takes it.
  placeHoldInOneStatement: async () => undefined,
  recordHold,
  settleActiveHold,
};
