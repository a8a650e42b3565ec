/**
 * Brings a database to the latest schema version. Reports each migration as it is applied.
 *
 * Safe to run from several places at once (`turnpike migrate` in a hook Job while nodes start):
 * PostgreSQL takes a session advisory lock on a fixed key (Kysely's) and migrates in one
 * transaction; SQLite holds a write transaction (`sqlite.ts`). Whoever comes second waits, then
 * finds nothing pending. A database migrated by a newer Turnpike is refused, untouched.
 */
import { sql, type Kysely } from "kysely";
import { dialectOf } from "./dialect.ts";
import { Migrator } from "kysely/migration";
import { migrations } from "./migrations/index.ts";

export class MigrationError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "MigrationError";
  }
}

/** The database was migrated by a newer Turnpike: it holds migrations this one does not know. */
export class DatabaseNewerError extends MigrationError {
  constructor(state: SchemaState) {
    super(
      `the database's schema is at ${state.unknown.at(-1)}, newer than this turnpike knows (up to ${LATEST_MIGRATION}): ` +
        `it was migrated by a newer version (migrations unknown here: ${state.unknown.join(", ")}). Run that version or a newer one, or restore a backup taken before the upgrade; nothing was changed`,
    );
    this.name = "DatabaseNewerError";
  }
}

/** `--auto-migrate false` on a database that is behind. */
export class MigrationsPendingError extends MigrationError {
  constructor(state: SchemaState) {
    super(
      `the database needs ${state.pending.length} migration${state.pending.length === 1 ? "" : "s"}: run \`turnpike migrate\` ` +
        `(pending: ${state.pending.join(", ")}; the database is at ${state.applied.at(-1) ?? "no schema yet"}, this turnpike at ${LATEST_MIGRATION}), or start with --auto-migrate true`,
    );
    this.name = "MigrationsPendingError";
  }
}

/** The migrations this binary knows, oldest first. */
const KNOWN_MIGRATIONS = Object.keys(migrations).sort();

/** The name of the newest migration this binary knows: its schema version. */
export const LATEST_MIGRATION = KNOWN_MIGRATIONS.at(-1)!;

/** Where a database records the migrations applied to it (Kysely's bookkeeping table). */
export const MIGRATION_TABLE = "turnpike_migrations";

/** Where a database stands against this binary's migrations. */
export type SchemaState = {
  /** Migrations the database records, oldest first. */
  applied: string[];
  /** Known here, not applied yet. */
  pending: string[];
  /** Recorded in the database, unknown here: it was migrated by a newer Turnpike. */
  unknown: string[];
};

/** Where a database that records `applied` (oldest first) stands against this binary's migrations. */
export function schemaStateOf(applied: readonly string[]): SchemaState {
  const recorded = new Set(applied);
  return { applied: [...applied], pending: KNOWN_MIGRATIONS.filter((name) => !recorded.has(name)), unknown: applied.filter((name) => !Object.hasOwn(migrations, name)) };
}

/** Reads which migrations `database` has, without changing anything (no table is created). */
export async function schemaState(database: Kysely<any>): Promise<SchemaState> {
  if (!(await migrationTableExists(database))) return schemaStateOf([]);
  const { rows } = await sql<{ name: string }>`select name from ${sql.table(MIGRATION_TABLE)} order by name`.execute(database);
  return schemaStateOf(rows.map((row) => row.name));
}

async function migrationTableExists(database: Kysely<any>): Promise<boolean> {
  if (dialectOf(database) === "postgres") {
    // Resolved through the search_path, as the store's queries are.
    const { rows } = await sql<{ present: boolean }>`select to_regclass(${MIGRATION_TABLE}) is not null as present`.execute(database);
    return rows[0]?.present === true;
  }
  const { rows } = await sql<{ count: number }>`select count(*) as count from sqlite_master where type = 'table' and name = ${MIGRATION_TABLE}`.execute(database);
  return Number(rows[0]?.count) > 0;
}

/** Throws `DatabaseNewerError` when `database` was migrated by a newer Turnpike; returns its state. */
export async function refuseNewerDatabase(database: Kysely<any>): Promise<SchemaState> {
  const state = await schemaState(database);
  if (state.unknown.length > 0) throw new DatabaseNewerError(state);
  return state;
}

/** Applies pending migrations (under the migration lock); returns the names applied. */
export async function migrateToLatest(database: Kysely<any>, onApplied?: (name: string) => void): Promise<string[]> {
  await refuseNewerDatabase(database);
  const migrator = new Migrator({
    db: database,
    provider: { getMigrations: async () => migrations },
    migrationTableName: MIGRATION_TABLE,
    migrationLockTableName: "turnpike_migrations_lock",
    // PostgreSQL: keep the bookkeeping in the schema the store uses. Without it Kysely looks for
    // its tables in every schema, and another installation's (or test's) tables in the same
    // database would pass for ours.
    ...(dialectOf(database) === "postgres" ? { migrationTableSchema: await currentSchema(database) } : {}),
  });
  const { error, results } = await migrator.migrateToLatest();
  const applied: string[] = [];
  for (const result of results ?? []) {
    if (result.status === "Success") {
      applied.push(result.migrationName);
      onApplied?.(result.migrationName);
    }
  }
  if (error !== undefined) {
    // A newer Turnpike migrated it while this one waited for the lock: say so, not Kysely's "corrupted migrations".
    await refuseNewerDatabase(database);
    throw new MigrationError(`database migration failed: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
  }
  return applied;
}

async function currentSchema(database: Kysely<any>): Promise<string> {
  const { rows } = await sql<{ schema: string }>`select current_schema() as schema`.execute(database);
  const schema = rows[0]?.schema;
  if (!schema) throw new MigrationError("database migration failed: the PostgreSQL search_path names no schema that exists");
  return schema;
}
