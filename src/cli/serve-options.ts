/**
 * The `serve` settings as flags, shared by every command that reads the same settings as `serve`
 * (`serve`, `check`): registering them from the settings table, and reading them back by key.
 */
import type { Command } from "commander";
import { defaultTextOf, serveOptionList } from "../config/options.ts";

/** What commander gives an action for the serve flags: each by its camelCase attribute name. */
export type RawServeFlags = Record<string, string | string[] | boolean | undefined>;

/** Commander's camelCase attribute name for a flag like `--data-dir <dir>`. */
function attributeName(flag: string): string {
  return flag
    .split(" ")[0]!
    .replace(/^--/, "")
    .replace(/-([a-z])/g, (_match, letter: string) => letter.toUpperCase());
}

/** Adds every `serve` setting's flag to `command`, with its meaning, variable and default in `--help`. */
export function withServeOptions(command: Command): Command {
  for (const option of serveOptionList) {
    const description = `${option.description} (${option.env}, default: ${defaultTextOf(option)})`;
    if (option.kind === "models" || option.kind === "upstreams") command.option(option.flag, description, (value: string, previous: string[] = []) => [...previous, value]);
    else command.option(option.flag, description);
  }
  return command;
}

/** The flags given, by setting key, as `loadProcessSettings` takes them. */
export function serveFlagsOf(raw: RawServeFlags): Record<string, string | string[] | undefined> {
  const flags: Record<string, string | string[] | undefined> = {};
  for (const option of serveOptionList) {
    const value = raw[attributeName(option.flag)];
    flags[option.key] = typeof value === "boolean" ? undefined : value;
  }
  return flags;
}
