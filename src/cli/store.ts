/**
 * The database flags every CLI command shares, and opening the store they name.
 */
import path from "node:path";
import type { Command } from "commander";
import type { Kysely } from "kysely";
import type { Database } from "../store/schema.ts";
import { openStore } from "../store/open.ts";

export type StoreFlags = { dataDir?: string; databaseUrl?: string };

/** The data dir: `--data-dir`, else TURNPIKE_DATA_DIR, else ./data. */
export function resolveDataDir(options: { dataDir?: string }): string {
  return path.resolve(options.dataDir ?? process.env.TURNPIKE_DATA_DIR ?? "./data");
}

/** Adds `--data-dir` and `--database-url` to a command. */
export function withStoreFlags(command: Command): Command {
  return command
    .option("--data-dir <dir>", "the SQLite database and downloaded models (TURNPIKE_DATA_DIR)")
    .option("--database-url <url>", "postgres://… (TURNPIKE_DATABASE_URL); default: SQLite in the data dir");
}

/** Opens the store named by the flags (migrating it), runs `work`, closes it. */
export async function withStore<T>(
  options: StoreFlags,
  work: (database: Kysely<Database>) => Promise<T>,
  onMigration?: (name: string) => void,
): Promise<T> {
  const database = await openStore({ dataDir: resolveDataDir(options), databaseUrl: options.databaseUrl, onMigration });
  try {
    return await work(database);
  } finally {
    await database.destroy();
  }
}
