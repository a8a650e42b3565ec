/**
 * Whether what a node keeps in memory from the database may have changed under it: a count of
 * this process's own writes that matter (`noteChange`, bumped by the code that makes them) and,
 * where the store can tell, a count of other connections' commits (SQLite's `PRAGMA
 * data_version`: the CLI or another process writing the same file), read at most every
 * `FOREIGN_CHANGES_CHECK_MS`; on PostgreSQL, the changes its `ChangeFeed` heard (the
 * notifications of migration 0015's triggers). A cache compares the pair it last saw with
 * `changeMark` and starts over when it moved. Without a feed (or while it cannot prove itself
 * live), writes by other nodes reach a PostgreSQL node's caches by their age bounds alone.
 *
 * By adapter, like `dialect.ts`: a transaction shares its database's adapter, so a write made in
 * one is noted on the database it was begun on.
 */
import type { DialectAdapter, Kysely, Transaction } from "kysely";
import type { Database } from "./schema.ts";

type Changes = {
  local: number;
  foreign: (() => number) | undefined;
  seen: number;
  seenAt: number;
  /** A feed of other connections' changes (PostgreSQL's `ChangeFeed`): read on every mark, and able to say when it heard them all. */
  feed: ChangeSource | undefined;
};

/** What a cache needs of a feed of other connections' changes (`store/change-feed.ts`). */
export type ChangeSource = {
  /** Changes heard so far: moves whenever another connection changed something kept. */
  readonly received: number;
  /** Whether every change committed more than `boundMs` ago has been heard. */
  watched(boundMs: number): boolean;
};

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
    found = { local: 0, foreign: undefined, seen: 0, seenAt: -Infinity, feed: undefined };
    changes.set(adapter, found);
  }
  return found;
}

/** Records how to read other connections' commits (`openSqlite`); returns `database`. */
export function withForeignChanges(database: Kysely<Database>, probe: () => number): Kysely<Database> {
  changesOf(database).foreign = probe;
  return database;
}

/** Records the feed that tells of other connections' changes (PostgreSQL's `ChangeFeed`); returns `database`. */
export function withChangeFeed(database: Kysely<Database>, feed: ChangeSource): Kysely<Database> {
  changesOf(database).feed = feed;
  return database;
}

/**
 * Whether every change another connection committed more than `boundMs` ago is already in
 * `changeMark` (a live `ChangeFeed`): a cache that starts over when the mark moves may then keep
 * an entry past `boundMs`. False where nothing proves it (SQLite's count is read every 10 ms, but
 * this process's own writes are noted by hand, not all of them: its caches keep their bounds).
 */
export function foreignChangesWatched(database: Kysely<Database>, boundMs: number): boolean {
  return changesOf(database).feed?.watched(boundMs) ?? false;
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
  // A feed's count is a field: read every time, so a change is acted on as soon as it is heard.
  return { local: found.local, foreign: found.feed === undefined ? found.seen : found.seen + found.feed.received };
}

export function sameMark(a: ChangeMark, b: ChangeMark): boolean {
  return a.local === b.local && a.foreign === b.foreign;
}
