/**
 * Brings a database to the latest schema version. Reports each migration as it is applied.
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

/** Applies pending migrations; returns the names applied. */
export async function migrateToLatest(database: Kysely<any>, onApplied?: (name: string) => void): Promise<string[]> {
  const migrator = new Migrator({
    db: database,
    provider: { getMigrations: async () => migrations },
    migrationTableName: "turnpike_migrations",
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
