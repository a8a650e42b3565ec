/**
 * The books of some accounts, audited in one statement (one snapshot, on SQLite and PostgreSQL
 * alike): per account, balance = Σ ledger entries = Σ credit lots left less what active holds
 * reserve, Σ usage-record cost = Σ charged (settle entries); per key, Σ usage-record cost = Σ
 * charged through its holds = its spend; and what is still open (holds, checkpoints).
 * `assertBooksBalanced` asserts all of it, once the sweeper has run.
 */
import assert from "node:assert/strict";
import { sql, type Kysely } from "kysely";
import type { Database } from "../../src/store/schema.ts";

export type AccountBooks = {
  id: string;
  balance: number;
  /** Σ ledger entries: must equal `balance`. */
  entries: number;
  /** Σ credit left in lots: must equal `balance + held`. */
  lots: number;
  /** Credit reserved by active holds. */
  held: number;
  openHolds: number;
  checkpoints: number;
  /** Σ cost of the account's usage records. */
  usageCost: number;
  /** Σ charged: the settle entries. */
  charged: number;
};

export type KeyBooks = {
  id: string;
  accountId: string;
  openHolds: number;
  checkpoints: number;
  usageCost: number;
  /** Σ charged through the key's holds (their settle entries). */
  charged: number;
  /** The key's `spent` column. */
  spent: number;
};

export type Books = { accounts: AccountBooks[]; keys: KeyBooks[] };

type Row = {
  kind: "account" | "key";
  id: string;
  account_id: string;
  balance: unknown;
  entries: unknown;
  lots: unknown;
  held: unknown;
  open_holds: unknown;
  checkpoints: unknown;
  usage_cost: unknown;
  charged: unknown;
  spent: unknown;
};

/** The books of `accountIds` and of their keys, read in one statement. */
export async function auditBooks(database: Kysely<Database>, accountIds: readonly string[]): Promise<Books> {
  if (accountIds.length === 0) return { accounts: [], keys: [] };
  const ids = sql.join(accountIds.map((id) => sql`${id}`));
  const { rows } = await sql<Row>`
    select 'account' as kind, a.id as id, a.id as account_id, a.balance as balance,
      (select coalesce(sum(e.amount), 0) from ledger_entries e where e.account_id = a.id) as entries,
      (select coalesce(sum(l.remaining), 0) from credit_lots l where l.account_id = a.id) as lots,
      (select coalesce(sum(h.amount), 0) from holds h where h.account_id = a.id and h.status = 'active') as held,
      (select count(*) from holds h where h.account_id = a.id and h.status = 'active') as open_holds,
      (select count(*) from usage_checkpoints c where c.account_id = a.id) as checkpoints,
      (select coalesce(sum(u.cost), 0) from usage_records u where u.account_id = a.id) as usage_cost,
      (select coalesce(-sum(e.amount), 0) from ledger_entries e where e.account_id = a.id and e.kind = 'settle') as charged,
      0 as spent
    from accounts a where a.id in (${ids})
    union all
    select 'key' as kind, k.id as id, k.account_id as account_id, 0 as balance, 0 as entries, 0 as lots, 0 as held,
      (select count(*) from holds h where h.key_id = k.id and h.status = 'active') as open_holds,
      (select count(*) from usage_checkpoints c where c.key_id = k.id) as checkpoints,
      (select coalesce(sum(u.cost), 0) from usage_records u where u.key_id = k.id) as usage_cost,
      (select coalesce(-sum(e.amount), 0) from ledger_entries e join holds h on h.id = e.hold_id where h.key_id = k.id and e.kind = 'settle') as charged,
      k.spent as spent
    from api_keys k where k.account_id in (${ids})
  `.execute(database);
  const accounts: AccountBooks[] = [];
  const keys: KeyBooks[] = [];
  for (const row of rows) {
    const common = { id: row.id, openHolds: Number(row.open_holds), checkpoints: Number(row.checkpoints), usageCost: Number(row.usage_cost), charged: Number(row.charged) };
    if (row.kind === "account") accounts.push({ ...common, balance: Number(row.balance), entries: Number(row.entries), lots: Number(row.lots), held: Number(row.held) });
    else keys.push({ ...common, accountId: row.account_id, spent: Number(row.spent) });
  }
  return { accounts, keys };
}

/**
 * Asserts the books balance: per account, balance = Σ entries, Σ lots = balance + held, the
 * balance never below zero, Σ usage cost = Σ charged; per key, Σ usage cost = Σ charged = spent;
 * and, unless `open` is true, no hold or checkpoint left open (after the sweeper). Returns them.
 */
export async function assertBooksBalanced(database: Kysely<Database>, accountIds: readonly string[], options: { open?: boolean } = {}): Promise<Books> {
  const books = await auditBooks(database, accountIds);
  assert.equal(books.accounts.length, accountIds.length, "every account audited");
  for (const account of books.accounts) {
    const name = `account ${account.id}`;
    assert.equal(account.balance, account.entries, `${name}: balance = Σ ledger entries`);
    assert.equal(account.lots, account.balance + account.held, `${name}: Σ lots = balance + what active holds reserve`);
    assert.ok(account.balance >= 0, `${name}: the balance is never below zero`);
    assert.equal(account.usageCost, account.charged, `${name}: Σ usage-record cost = Σ charged`);
    if (!options.open) {
      assert.equal(account.openHolds, 0, `${name}: no hold or lease left open`);
      assert.equal(account.checkpoints, 0, `${name}: no checkpoint left`);
    }
  }
  for (const key of books.keys) {
    const name = `key ${key.id}`;
    assert.equal(key.usageCost, key.charged, `${name}: Σ usage-record cost = Σ charged through its holds`);
    assert.equal(key.spent, key.charged, `${name}: its spend = Σ charged through its holds`);
    if (!options.open) assert.equal(key.openHolds, 0, `${name}: no hold or lease left open`);
  }
  return books;
}
