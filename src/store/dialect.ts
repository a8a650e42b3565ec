/**
 * Which SQL dialect a database speaks, recorded once where it is opened (`openSqlite`,
 * `openPostgres`), for code whose statements differ between the two (the ledger's): it asks
 * `dialectOf` instead of testing the adapter wherever it writes SQL.
 */
import { PostgresAdapter, type DialectAdapter, type Kysely, type Transaction } from "kysely";
import type { Database } from "./schema.ts";

export type Dialect = "sqlite" | "postgres";

/**
 * By adapter rather than by Kysely instance: each instance has an adapter of its own, and its
 * transactions share it, so a transaction finds the dialect of the database it was begun on.
 */
const dialects = new WeakMap<DialectAdapter, Dialect>();

/** Records `database`'s dialect; returns `database`. */
export function withDialect(database: Kysely<Database>, dialect: Dialect): Kysely<Database> {
  dialects.set(database.getExecutor().adapter, dialect);
  return database;
}

/** The dialect of `database`, or of the database a transaction was begun on. */
export function dialectOf(database: Kysely<Database> | Transaction<Database>): Dialect {
  const adapter = database.getExecutor().adapter;
  let dialect = dialects.get(adapter);
  if (dialect === undefined) {
    // A database opened elsewhere than openSqlite/openPostgres: told by its adapter, once.
    dialect = adapter instanceof PostgresAdapter ? "postgres" : "sqlite";
    dialects.set(adapter, dialect);
  }
  return dialect;
}
