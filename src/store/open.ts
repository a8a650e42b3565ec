/**
 * Opens the configured database and migrates it: SQLite in the data dir by default,
 * PostgreSQL when a `postgres://` URL is given (TURNPIKE_DATABASE_URL).
 */
import path from "node:path";
import type { Kysely } from "kysely";
import type { Database } from "./schema.ts";
import { openSqlite } from "./sqlite.ts";
import { openPostgres } from "./postgres.ts";
import { migrateToLatest } from "./migrate.ts";

export type StoreOptions = {
  dataDir: string;
  /** `postgres://…`; undefined or empty for SQLite in the data dir. */
  databaseUrl?: string;
  /** Called for each migration applied (progress for operators). */
  onMigration?: (name: string) => void;
  /** PostgreSQL: an idle connection broke and was dropped (the next query reconnects). */
  onConnectionError?: (error: Error) => void;
};

export async function openStore(options: StoreOptions): Promise<Kysely<Database>> {
  const url = options.databaseUrl === undefined ? process.env.TURNPIKE_DATABASE_URL : options.databaseUrl;
  const database = url ? openPostgres(url, { onConnectionError: options.onConnectionError }) : openSqlite(path.join(options.dataDir, "turnpike.sqlite"));
  try {
    await migrateToLatest(database, options.onMigration);
  } catch (error) {
    await database.destroy();
    throw error;
  }
  return database;
}
