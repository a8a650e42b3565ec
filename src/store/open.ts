/**
 * Opens the configured database and migrates it. SQLite in the data dir by default;
 * PostgreSQL support arrives with the accounts work (TURNPIKE_DATABASE_URL).
 */
import path from "node:path";
import type { Kysely } from "kysely";
import type { Database } from "./schema.ts";
import { openSqlite } from "./sqlite.ts";
import { migrateToLatest } from "./migrate.ts";

export type StoreOptions = {
  dataDir: string;
  /** Called for each migration applied (progress for operators). */
  onMigration?: (name: string) => void;
};

export async function openStore(options: StoreOptions): Promise<Kysely<Database>> {
  const database = openSqlite(path.join(options.dataDir, "turnpike.sqlite"));
  await migrateToLatest(database, options.onMigration);
  return database;
}
