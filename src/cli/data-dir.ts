import path from "node:path";
import type { Command } from "commander";

/** Adds `--data-dir` (TURNPIKE_DATA_DIR, default ./data) to a command. */
export function withDataDir(command: Command): Command {
  return command.option("--data-dir <dir>", "the SQLite database and downloaded models (TURNPIKE_DATA_DIR)");
}

export function resolveDataDir(options: { dataDir?: string }): string {
  return path.resolve(options.dataDir ?? process.env.TURNPIKE_DATA_DIR ?? "./data");
}
