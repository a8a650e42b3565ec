/**
 * Whether what a node keeps in memory from the database may have changed under it: a count of
 * this process's own writes that matter (`noteChange`, bumped by the code that makes them) and,
 * where the store can tell, a count of other connections' commits (SQLite's `PRAGMA
 * data_version`: the CLI or another process writing the same file), read at most every
 * `FOREIGN_CHANGES_CHECK_MS`. A cache compares the
 * pair it last saw with `changeMark` and starts over when it moved. PostgreSQL has no such
 * count here: writes by other nodes reach a cache by its age bound alone.
 *
 * By adapter, like `dialect.ts`: a transaction shares its database's adapter, so a write made in
 * one is noted on the database it was begun on.
 */
import type { DialectAdapter, Kysely, Transaction } from "kysely";
import type { Database } from "./schema.ts";

type Changes = { local: number; foreign: (() => number) | undefined; seen: number; seenAt: number };

/**
 * Other connections' commits are read at most this often. Reading SQLite's count costs ~15 µs in
 * a busy server (a read transaction of its own), more than the rest of a cached key lookup: once
 * per request would give back much of what caching saved. A commit by another process is seen
 * within this.
 */
export const FOREIGN_CHANGES_CHECK_MS = 10;

const changes = new WeakMap<DialectAdapter, Changes>();

function changesOf(database: Kysely<Database> | Transaction<Database>): Changes {
  const adapter = database.getExecutor().adapter;
  let found = changes.get(adapter);
  if (found === undefined) {
    found = { local: 0, foreign: undefined, seen: 0, seenAt: -Infinity };
    changes.set(adapter, found);
  }
  return found;
}

/** Records how to read other connections' commits (`openSqlite`); returns `database`. */
export function withForeignChanges(database: Kysely<Database>, probe: () => number): Kysely<Database> {
  changesOf(database).foreign = probe;
  return database;
}

/** This process changed something a node may keep in memory (a key revoked, an account disabled). */
export function noteChange(database: Kysely<Database> | Transaction<Database>): void {
  changesOf(database).local++;
}

/** Where the database stands: equal marks mean nothing was noted here and no other connection committed in between. */
export type ChangeMark = { local: number; foreign: number };

export function changeMark(database: Kysely<Database>, now = performance.now()): ChangeMark {
  const found = changesOf(database);
  if (found.foreign !== undefined && now - found.seenAt >= FOREIGN_CHANGES_CHECK_MS) {
    found.seen = found.foreign();
    found.seenAt = now;
  }
  return { local: found.local, foreign: found.seen };
}

export function sameMark(a: ChangeMark, b: ChangeMark): boolean {
  return a.local === b.local && a.foreign === b.foreign;
}
