/**
 * Opens the configured database and migrates it: SQLite in the data dir by default,
 * PostgreSQL when a `postgres://` URL is given (the `database_url` setting).
 */
import path from "node:path";
import type { Kysely } from "kysely";
import type { Database } from "./schema.ts";
import { openSqlite } from "./sqlite.ts";
import { openPostgres } from "./postgres.ts";
import { MigrationsPendingError, migrateToLatest, refuseNewerDatabase } from "./migrate.ts";

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
  /**
   * `apply` (the default): apply pending migrations, under the migration lock. `verify`
   * (`--auto-migrate false`): refuse a database that needs migrations (`MigrationsPendingError`),
   * changing nothing. `none`: open it as it is (`turnpike migrate --check` reads its state). A
   * database migrated by a newer Turnpike is refused by the first two (`DatabaseNewerError`).
   */
  migrate?: "apply" | "verify" | "none";
};

/** Opens the database `options` name, migrated to the latest schema (or checked to be, or as it is). */
export async function openStore(options: StoreOptions): Promise<Kysely<Database>> {
  const url = options.databaseUrl;
  const prepare = (database: Kysely<Database>) => prepared(database, options);
  if (!url) return prepare(openSqlite(path.join(options.dataDir, "turnpike.sqlite")));
  // Only applying migrations needs connections of its own (below): checking them reads one table.
  if (options.queryTimeoutMs === undefined || (options.migrate ?? "apply") !== "apply") {
    return prepare(openPostgres(url, { onConnectionError: options.onConnectionError, ...(options.queryTimeoutMs === undefined ? {} : { queryTimeoutMs: options.queryTimeoutMs }) }));
  }
  // A migration may rightly run long (an index on a large table), or wait for another node's:
  // it gets connections of its own, without the query timeout.
  await (await prepare(openPostgres(url, { onConnectionError: options.onConnectionError }))).destroy();
  return openPostgres(url, { onConnectionError: options.onConnectionError, queryTimeoutMs: options.queryTimeoutMs });
}

/** `database`, migrated or checked as `options.migrate` says (and destroyed if that fails). */
async function prepared(database: Kysely<Database>, options: StoreOptions): Promise<Kysely<Database>> {
  try {
    const mode = options.migrate ?? "apply";
    if (mode === "apply") await migrateToLatest(database, options.onMigration);
    else if (mode === "verify") {
      const state = await refuseNewerDatabase(database);
      if (state.pending.length > 0) throw new MigrationsPendingError(state);
    }
  } catch (error) {
    await database.destroy();
    throw error;
  }
  return database;
}
