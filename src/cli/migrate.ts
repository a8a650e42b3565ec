/**
 * `turnpike migrate`: applies pending database migrations and says which. Safe to run from
 * several places at once (the migration lock, `store/migrate.ts`). `--wait <seconds>` keeps
 * trying to reach the database that long (a Kubernetes hook Job may start before it is up);
 * `--check` changes nothing: exit 0 when up to date, 1 when migrations are pending, 2 when the
 * database was migrated by a newer Turnpike (which plain `migrate` and `serve` refuse too).
 */
import type { Command } from "commander";
import { setTimeout as delay } from "node:timers/promises";
import { openStore } from "../store/open.ts";
import { isDatabaseUnavailable } from "../store/errors.ts";
import { DatabaseNewerError, LATEST_MIGRATION, schemaState } from "../store/migrate.ts";
import { storeSettings, withStoreFlags, type StoreFlags } from "./store.ts";

type MigrateFlags = StoreFlags & { check?: boolean; wait?: string };

/** Between two tries to reach the database under `--wait`. */
const RETRY_INTERVAL_MS = 1000;

export function registerMigrateCommand(program: Command): void {
  withStoreFlags(program.command("migrate").description("apply pending database migrations (safe to run from several places at once)"))
    .option("--check", "change nothing: exit 0 if the database is up to date, 1 if migrations are pending (listed), 2 if it is newer than this turnpike")
    .option("--wait <seconds>", "keep trying to reach the database this long before giving up (a hook Job that may start before the database)", "0")
    .action(async (options: MigrateFlags) => {
      const waitSeconds = Number(options.wait ?? "0");
      if (!Number.isFinite(waitSeconds) || waitSeconds < 0) {
        process.stderr.write(`turnpike: --wait must be a number of seconds, not '${options.wait}'\n`);
        process.exit(2);
      }
      const settings = storeSettings(options);
      let applied = 0;
      const open = () =>
        openStore({
          dataDir: settings.data_dir,
          databaseUrl: settings.database_url,
          migrate: options.check === true ? "none" : "apply",
          onMigration: (name) => {
            applied++;
            process.stdout.write(`applied ${name}\n`);
          },
        });
      let database;
      try {
        database = await retrying(open, waitSeconds * 1000);
      } catch (error) {
        process.stderr.write(`turnpike: ${error instanceof Error ? error.message : String(error)}\n`);
        process.exit(error instanceof DatabaseNewerError ? 2 : 1);
      }
      try {
        if (options.check === true) {
          const state = await schemaState(database);
          if (state.unknown.length > 0) {
            process.stderr.write(`turnpike: ${new DatabaseNewerError(state).message}\n`);
            process.exitCode = 2;
          } else if (state.pending.length > 0) {
            process.stdout.write(`${state.pending.length} migration(s) pending (this turnpike is at ${LATEST_MIGRATION}):\n${state.pending.map((name) => `  ${name}\n`).join("")}`);
            process.exitCode = 1;
          } else process.stdout.write(`The database is up to date (${LATEST_MIGRATION}).\n`);
          return;
        }
        process.stdout.write(applied === 0 ? `The database is up to date (${LATEST_MIGRATION}).\n` : `Applied ${applied} migration(s); the database is at ${LATEST_MIGRATION}.\n`);
      } finally {
        await database.destroy();
      }
    });
}

/** `attempt()`, tried again while the database is unreachable, for up to `waitMs`. */
async function retrying<T>(attempt: () => Promise<T>, waitMs: number): Promise<T> {
  const deadline = Date.now() + waitMs;
  let announced = false;
  for (;;) {
    try {
      return await attempt();
    } catch (error) {
      if (!isDatabaseUnavailable(error) || Date.now() + RETRY_INTERVAL_MS > deadline) throw error;
      if (!announced) {
        process.stderr.write(`turnpike: the database is not reachable yet (${error instanceof Error ? error.message : String(error)}); retrying for up to ${Math.round(waitMs / 1000)} s\n`);
        announced = true;
      }
      await delay(RETRY_INTERVAL_MS);
    }
  }
}
