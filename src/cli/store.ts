/**
 * The flags every CLI command that opens the database shares (`--config`, `--data-dir`,
 * `--database-url`), and opening the store the settings name.
 */
import type { Command } from "commander";
import type { Kysely } from "kysely";
import type { Database } from "../store/schema.ts";
import { openStore } from "../store/open.ts";
import { loadProcessSettings, type ResolvedSettings } from "../config/load.ts";
import { defaultTextOf, serveOptions, type OptionSpec } from "../config/options.ts";

export type StoreFlags = { config?: string; dataDir?: string; databaseUrl?: string };

/** The settings these flags give, over the environment and the config file: the same as `serve` reads. */
export function storeSettings(options: StoreFlags): ResolvedSettings {
  return loadProcessSettings({ config: options.config, data_dir: options.dataDir, database_url: options.databaseUrl });
}

/** `--help` text of a setting: its meaning, variable and default, from the settings table. */
function help(spec: Pick<OptionSpec, "description" | "env" | "default" | "defaultText">, meaning = spec.description): string {
  return `${meaning} (${spec.env}, default: ${defaultTextOf(spec)})`;
}

/** Adds `--config`, `--data-dir` and `--database-url` to a command. */
export function withStoreFlags(command: Command): Command {
  return command
    .option(serveOptions.config.flag, help(serveOptions.config, "the serve config file: its data dir and database (and, for plans and codes, its plans, written to the database first)"))
    .option(serveOptions.data_dir.flag, help(serveOptions.data_dir))
    .option(serveOptions.database_url.flag, help(serveOptions.database_url));
}

/** Opens the store the settings name (migrating it), runs `work`, closes it. */
export async function withStore<T>(
  options: StoreFlags,
  work: (database: Kysely<Database>, settings: ResolvedSettings) => Promise<T>,
  onMigration?: (name: string) => void,
): Promise<T> {
  const settings = storeSettings(options);
  const database = await openStore({ dataDir: settings.data_dir, databaseUrl: settings.database_url, onMigration });
  try {
    return await work(database, settings);
  } finally {
    await database.destroy();
  }
}
