/**
 * The one interface behind which the ledger's SQL differs between its two dialects, and the
 * types it takes. `sqlite.ts` runs the plain steps (SQLite is in-process: a statement costs no
 * round trip); `postgres.ts` runs the same writes as data-modifying CTEs, in as few round trips,
 * taking the rows in the same order (hold, then account, then key). `ledger.ts` holds the rest.
 */
import type { Kysely, Selectable, Transaction } from "kysely";
import type { Database, HoldTable } from "../../store/schema.ts";
import type { UsageRecord } from "../usage.ts";

export type HoldInput = {
  accountId: string;
  keyId: string | null;
  amount: number;
  nodeId: string;
  /** How long the hold may live before the sweeper releases it. */
  ttlMs: number;
  now?: number;
};

export type LedgerStatements = {
  /**
   * The account's balance, its row locked for the rest of the transaction (PostgreSQL `FOR
   * UPDATE`; SQLite write transactions are exclusive already). Undefined: no such account.
   */
  lockAccount(transaction: Transaction<Database>, accountId: string): Promise<{ balance: number } | undefined>;
  /** The hold, its row locked as `lockAccount` locks the account's. Undefined: no such hold. */
  lockHold(transaction: Transaction<Database>, holdId: string): Promise<Selectable<HoldTable> | undefined>;
  /**
   * The holds, their rows locked in the order of their ids (so that two writers of the same
   * holds never wait on each other in a cycle): a group commit fences its records' holds off
   * from a close until it commits.
   */
  lockHolds(transaction: Transaction<Database>, holdIds: readonly string[]): Promise<Array<Selectable<HoldTable>>>;
  /**
   * The common case of `placeHold` without an explicit transaction, where the dialect does it in
   * one statement: debits the account, reserves the amount against the key, writes the hold and
   * its entry, and returns the hold's id. Undefined, having changed nothing, when the
   * transactional path must decide (always, where the dialect has no such statement).
   */
  placeHoldInOneStatement(database: Kysely<Database>, input: HoldInput, now: number): Promise<string | undefined>;
  /**
   * After the debit: reserves the amount against the key's spend cap (a conditional write), then
   * writes the hold and its entry. False, having written nothing, when the cap refuses.
   */
  recordHold(transaction: Transaction<Database>, input: HoldInput, holdId: string, now: number): Promise<boolean>;
  /**
   * Closes the hold if it is still active: releases the reservation, charges `cost` (at most the
   * amount held) to the account, its lots and its key, writes the entries and `usage`'s record,
   * and returns the charge. Undefined, having changed nothing, when the hold is not active.
   */
  settleActiveHold(transaction: Transaction<Database>, holdId: string, cost: number, now: number, usage?: (charged: number) => UsageRecord): Promise<number | undefined>;
};
