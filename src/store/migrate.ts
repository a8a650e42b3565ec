/**
 * Brings a database to the latest schema version. Reports each migration as it is applied.
 */
import type { Kysely } from "kysely";
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
