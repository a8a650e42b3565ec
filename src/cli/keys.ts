/**
 * `turnpike keys create|list|revoke`. The key is printed once at creation: in plain output it
 * is the last line of stdout, with `--json` it is the `key` field.
 */
import type { Command } from "commander";
import { createApiKey, listApiKeys, revokeApiKey, type ApiKeyRecord } from "../auth/api-keys.ts";
import { openStore } from "../store/open.ts";
import { resolveDataDir, withDataDir } from "./data-dir.ts";

function isoOrDash(time: number | null): string {
  return time === null ? "-" : new Date(time).toISOString();
}

function keyStatus(key: ApiKeyRecord, now = Date.now()): string {
  if (key.revoked !== null) return "revoked";
  if (key.expires !== null && key.expires <= now) return "expired";
  return "active";
}

async function withStore<T>(options: { dataDir?: string }, work: (database: Awaited<ReturnType<typeof openStore>>) => Promise<T>): Promise<T> {
  const database = await openStore({ dataDir: resolveDataDir(options) });
  try {
    return await work(database);
  } finally {
    await database.destroy();
  }
}

export function registerKeysCommands(program: Command): void {
  const keys = program.command("keys").description("create, list and revoke API keys");

  withDataDir(
    keys
      .command("create")
      .description("create an API key and print it once")
      .option("--name <name>", "a name to tell the key apart", "")
      .option("--json", "print {id, key, name, created} as JSON"),
  ).action(async (options: { name: string; json?: boolean; dataDir?: string }) => {
    const created = await withStore(options, (database) => createApiKey(database, { name: options.name }));
    if (options.json) {
      process.stdout.write(
        `${JSON.stringify({ id: created.id, key: created.key, name: created.name, created: Math.floor(created.created / 1000) })}\n`,
      );
      return;
    }
    process.stderr.write(`Created API key ${created.id}${created.name ? ` (${created.name})` : ""}.\n`);
    process.stderr.write("Copy it now: it is shown only this once and cannot be recovered.\n");
    process.stdout.write(`${created.key}\n`);
  });

  withDataDir(keys.command("list").description("list API keys (never the keys themselves)").option("--json", "print JSON")).action(
    async (options: { json?: boolean; dataDir?: string }) => {
      const records = await withStore(options, (database) => listApiKeys(database));
      if (options.json) {
        const rows = records.map((key) => ({
          id: key.id,
          name: key.name,
          prefix: key.displayPrefix,
          status: keyStatus(key),
          created: Math.floor(key.created / 1000),
          last_used: key.lastUsed === null ? null : Math.floor(key.lastUsed / 1000),
          revoked: key.revoked === null ? null : Math.floor(key.revoked / 1000),
        }));
        process.stdout.write(`${JSON.stringify(rows)}\n`);
        return;
      }
      if (records.length === 0) {
        process.stdout.write("No API keys yet. Create one with: turnpike keys create --name NAME\n");
        return;
      }
      const table = records.map((key) => [key.id, key.name || "-", `${key.displayPrefix}…`, keyStatus(key), isoOrDash(key.created), isoOrDash(key.lastUsed)]);
      const header = ["ID", "NAME", "PREFIX", "STATUS", "CREATED", "LAST USED"];
      const widths = header.map((title, column) => Math.max(title.length, ...table.map((row) => row[column]!.length)));
      for (const row of [header, ...table]) process.stdout.write(`${row.map((cell, column) => cell.padEnd(widths[column]!)).join("  ").trimEnd()}\n`);
    },
  );

  withDataDir(keys.command("revoke").description("revoke an API key; takes effect on the next request").argument("<id>", "the key's id (from keys list)")).action(
    async (id: string, options: { dataDir?: string }) => {
      const found = await withStore(options, (database) => revokeApiKey(database, id));
      if (!found) {
        process.stderr.write(`turnpike: no API key with id '${id}'. See: turnpike keys list\n`);
        process.exitCode = 1;
        return;
      }
      process.stdout.write(`Revoked ${id}.\n`);
    },
  );
}
