/** `turnpike migrate`: applies pending database migrations and says which. */
import type { Command } from "commander";
import { openStore } from "../store/open.ts";
import { resolveDataDir, withDataDir } from "./data-dir.ts";

export function registerMigrateCommand(program: Command): void {
  withDataDir(program.command("migrate").description("apply pending database migrations")).action(async (options: { dataDir?: string }) => {
    let applied = 0;
    const database = await openStore({
      dataDir: resolveDataDir(options),
      onMigration: (name) => {
        applied++;
        process.stdout.write(`applied ${name}\n`);
      },
    });
    await database.destroy();
    process.stdout.write(applied === 0 ? "The database is up to date.\n" : `Applied ${applied} migration(s).\n`);
  });
}
