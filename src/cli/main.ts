/**
 * The `turnpike` command: `serve`, `check`, `keys create|list|revoke`, `migrate`.
 */
import { Command } from "commander";
import { registerServeCommand } from "./serve.ts";
import { registerCheckCommand } from "./check.ts";
import { registerKeysCommands } from "./keys.ts";
import { registerMigrateCommand } from "./migrate.ts";
import { registerAccountCommands } from "./accounts.ts";
import { registerCodesCommands } from "./codes.ts";

const program = new Command()
  .name("turnpike")
  .description("Self-hostable, OpenAI-compatible chat completion service.")
  .showHelpAfterError()
  .configureOutput({ outputError: (text, write) => write(text) });

registerServeCommand(program);
registerCheckCommand(program);
registerKeysCommands(program);
registerMigrateCommand(program);
registerAccountCommands(program);
registerCodesCommands(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  process.stderr.write(`turnpike: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
}

