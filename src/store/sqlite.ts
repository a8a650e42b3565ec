/**
 * SQLite through Node's built-in `node:sqlite`, adapted to Kysely's SQLite dialect.
 * WAL mode lets the CLI and the server use the same file at once.
 */
import fs from "node:fs";
import path from "node:path";
import { DatabaseSync, type SQLInputValue, type StatementSync } from "node:sqlite";
import { Kysely, SqliteAdapter, SqliteDialect, sql, type DialectAdapter, type SqliteDatabase, type SqliteStatement } from "kysely";
import type { Database } from "./schema.ts";
import { withDialect } from "./dialect.ts";
import { markStoreError } from "./errors.ts";
import { withForeignChanges } from "./changes.ts";

/** A row with its BigInts as numbers (approximate past 2^53, as PostgreSQL's BIGINTs are through `pg`). */
function withNumbers<Row>(row: Row): Row {
  const record = row as Record<string, unknown>;
  for (const column in record) {
    const value = record[column];
    if (typeof value === "bigint") record[column] = Number(value);
  }
  return row;
}

/** `node:sqlite` refuses to read an integer beyond 2^53 as a number. */
function isOutOfRange(error: unknown): boolean {
  return (error as { code?: unknown }).code === "ERR_OUT_OF_RANGE";
}

/** `action`'s result; what it throws is marked as the store's (`isStoreError`). */
function fromStore<T>(action: () => T): T {
  try {
    return action();
  } catch (error) {
    throw markStoreError(error);
  }
}

/** Prepared statements kept for reuse, by SQL text (the queries are a fixed set; a bound keeps odd ones from piling up). */
const STATEMENT_CACHE_SIZE = 512;

/**
 * Adapts `DatabaseSync` to the interface Kysely's `SqliteDialect` drives (better-sqlite3's shape).
 * Statements are prepared once per SQL text and reused: preparing took more of a request's CPU
 * than running it (the gateway bench's profile). `all` and `run` finish synchronously, so one
 * statement never serves two calls at once; `iterate` (a cursor that stays open) gets its own.
 */
function adapt(database: DatabaseSync): SqliteDatabase {
  /** Each statement with whether it returns rows. */
  const statements = new Map<string, { statement: StatementSync; reader: boolean }>();
  const cached = (sql: string): { statement: StatementSync; reader: boolean } => {
    let entry = statements.get(sql);
    if (entry !== undefined) {
      // Most recently used last: the first entry is the one to drop.
      statements.delete(sql);
      statements.set(sql, entry);
      return entry;
    }
    const statement = database.prepare(sql);
    entry = { statement, reader: statement.columns().length > 0 };
    statements.set(sql, entry);
    if (statements.size > STATEMENT_CACHE_SIZE) statements.delete(statements.keys().next().value!);
    return entry;
  };
  return {
    close: () => {
      statements.clear();
      database.close();
    },
    prepare: (text: string): SqliteStatement => {
      // Write transactions take the lock up front, so two processes sharing the file wait
      // (busy_timeout) instead of failing on a lock upgrade.
      const sql = /^\s*begin\s*$/i.test(text) ? "begin immediate" : text;
      const { statement, reader } = fromStore(() => cached(sql));
      const values = (parameters: ReadonlyArray<unknown>) => parameters as SQLInputValue[];
      // A plain read that meets an integer beyond 2^53 (money is bounded far below; this is for
      // rows written before the bounds) reads it again with BigInts, made numbers: one bad value
      // must not turn every query that reads it into a 500. Only statements starting with SELECT
      // are read twice (reading them again changes nothing; a WITH or RETURNING read is not); the
      // fast path stays free of BigInts and of this check.
      const readsOnly = () => /^\s*select\b/i.test(sql);
      return {
        reader,
        all: (parameters) =>
          fromStore(() => {
            try {
              return statement.all(...values(parameters));
            } catch (error) {
              if (!isOutOfRange(error) || !readsOnly()) throw error;
              statement.setReadBigInts(true);
              try {
                return statement.all(...values(parameters)).map(withNumbers);
              } finally {
                statement.setReadBigInts(false);
              }
            }
          }),
        run: (parameters) => fromStore(() => statement.run(...values(parameters))),
        iterate: (parameters) => fromStore(() => storeIterator(database.prepare(sql).iterate(...values(parameters)))),
      };
    },
  };
}

/** `rows`, whose failures while iterating are marked as the store's too. */
function storeIterator<Row>(rows: Iterator<Row>): IterableIterator<Row> {
  const iterator: IterableIterator<Row> = {
    next: () => fromStore(() => rows.next()),
    return: (value?: unknown) => fromStore(() => rows.return?.(value) ?? { done: true, value: undefined as Row }),
    [Symbol.iterator]: () => iterator,
  };
  return iterator;
}

/** SQLITE_BUSY or SQLITE_LOCKED (any extended code): another connection holds the lock needed. */
function isBusy(error: unknown): boolean {
  const errcode = (error as { errcode?: unknown }).errcode;
  return typeof errcode === "number" && [5, 6].includes(errcode & 0xff);
}

/**
 * `PRAGMA journal_mode = WAL`, tried again for up to 5 s while another process holds the lock
 * it needs, in case SQLite answers "database is locked" without waiting on the busy handler (two
 * nodes opening a new file together failed so once, before the busy timeout was set first; once
 * more, cause not caught, after).
 */
function enableWal(database: DatabaseSync): void {
  const deadline = Date.now() + 5000;
  for (;;) {
    try {
      database.exec("PRAGMA journal_mode = WAL");
      return;
    } catch (error) {
      if (!isBusy(error) || Date.now() > deadline) throw error;
      // Synchronous like the rest of opening: 20 ms, then again.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
    }
  }
}

/** Opens (creating if needed) the SQLite database at `file`; `:memory:` for a private in-memory one. */
export function openSqlite(file: string): Kysely<Database> {
  if (file !== ":memory:") fs.mkdirSync(path.dirname(file), { recursive: true });
  const database = new DatabaseSync(file);
  // The busy timeout first: switching a new file to WAL takes a lock that another process
  // opening it at the same moment (two nodes, or `turnpike migrate`, starting together) may hold.
  database.exec("PRAGMA busy_timeout = 5000");
  enableWal(database);
  database.exec("PRAGMA synchronous = NORMAL");
  database.exec("PRAGMA foreign_keys = ON");
  // Temp files in memory: the group commit's multi-row inserts spilled their statement journals
  // to a new file about every hundred requests (`strace`: ~0.45 writes a request). The sorts and
  // groupings the app runs are bounded (keyset pages with a LIMIT, a handful of groups).
  database.exec("PRAGMA temp_store = MEMORY");
  // Other connections' commits (the CLI's, another process's): what caches of keys watch for.
  const dataVersion = database.prepare("PRAGMA data_version");
  const kysely = withDialect(new Kysely<Database>({ dialect: new LockingSqliteDialect({ database: adapt(database) }) }), "sqlite");
  return withForeignChanges(kysely, () => Number((dataVersion.get() as { data_version: number | bigint }).data_version));
}

/**
 * Kysely's SQLite adapter takes no migration lock (one connection, it assumes one process). Two
 * processes migrating one file at once (`turnpike migrate` beside a starting node) would both
 * apply the same migration: here the lock is a write transaction (`BEGIN IMMEDIATE`) held for the
 * whole run, so the second waits and then finds nothing pending. Kysely runs SQLite migrations
 * without a transaction of their own, so this one is never nested.
 */
class LockingSqliteAdapter extends SqliteAdapter {
  override async acquireMigrationLock(database: Kysely<any>): Promise<void> {
    // The busy timeout (5 s) bounds one try; a long migration elsewhere may hold the lock longer.
    const deadline = Date.now() + MIGRATION_LOCK_WAIT_MS;
    for (;;) {
      try {
        await sql`begin immediate`.execute(database);
        return;
      } catch (error) {
        if (!isBusy(error) || Date.now() > deadline) throw error;
      }
    }
  }

  override async releaseMigrationLock(database: Kysely<any>): Promise<void> {
    // Kysely calls this after a failed acquire too: then there is no transaction to end.
    await sql`commit`.execute(database).catch((error: unknown) => {
      if (!/no transaction is active/.test(String((error as Error).message))) throw error;
    });
  }
}

/** How long a migration waits for another process's to finish (as Kysely's PostgreSQL lock timeout). */
const MIGRATION_LOCK_WAIT_MS = 60 * 60 * 1000;

class LockingSqliteDialect extends SqliteDialect {
  override createAdapter(): DialectAdapter {
    return new LockingSqliteAdapter();
  }
}
