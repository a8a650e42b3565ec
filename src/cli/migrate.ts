/** `turnpike migrate`: applies pending database migrations and says which. */
import type { Command } from "commander";
import { withStore, withStoreFlags, type StoreFlags } from "./store.ts";

export function registerMigrateCommand(program: Command): void {
  withStoreFlags(program.command("migrate").description("apply pending database migrations")).action(async (options: StoreFlags) => {
    let applied = 0;
    await withStore(
      options,
      async () => {},
      (name) => {
        applied++;
        process.stdout.write(`applied ${name}\n`);
      },
    );
    process.stdout.write(applied === 0 ? "The database is up to date.\n" : `Applied ${applied} migration(s).\n`);
  });
}
