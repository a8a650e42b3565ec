/**
 * Opens the configured database and migrates it: SQLite in the data dir by default,
 * PostgreSQL when a `postgres://` URL is given (the `database_url` setting).
 */
import path from "node:path";
import type { Kysely } from "kysely";
import type { Database } from "./schema.ts";
import { openSqlite } from "./sqlite.ts";
import { openPostgres } from "./postgres.ts";
import { migrateToLatest } from "./migrate.ts";

export type StoreOptions = {
  dataDir: string;
  /** `postgres://…` (the `database_url` setting); undefined or empty for SQLite in the data dir. */
  databaseUrl?: string;
  /** Called for each migration applied (progress for operators). */
  onMigration?: (name: string) => void;
  /** PostgreSQL: a connection broke, idle or in use, and was dropped (the next query reconnects). */
  onConnectionError?: (error: Error) => void;
  /**
   * PostgreSQL: milliseconds a query may go unanswered before it fails and its connection is
   * dropped (`--database-timeout`); undefined: no limit. Migrations run without it.
   */
  queryTimeoutMs?: number;
};

/** Opens the database `options` name, migrated to the latest schema. */
export async function openStore(options: StoreOptions): Promise<Kysely<Database>> {
  const url = options.databaseUrl;
  if (!url) return migrated(openSqlite(path.join(options.dataDir, "turnpike.sqlite")), options.onMigration);
  if (options.queryTimeoutMs === undefined) return migrated(openPostgres(url, { onConnectionError: options.onConnectionError }), options.onMigration);
  // A migration may rightly run long (an index on a large table), or wait for another node's:
  // it gets connections of its own, without the query timeout.
  await (await migrated(openPostgres(url, { onConnectionError: options.onConnectionError }), options.onMigration)).destroy();
  return openPostgres(url, { onConnectionError: options.onConnectionError, queryTimeoutMs: options.queryTimeoutMs });
}

/** `database`, migrated to the latest schema (and destroyed if that fails). */
async function migrated(database: Kysely<Database>, onMigration: StoreOptions["onMigration"]): Promise<Kysely<Database>> {
  try {
    await migrateToLatest(database, onMigration);
  } catch (error) {
    await database.destroy();
    throw error;
  }
  return database;
}
