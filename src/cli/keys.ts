/**
 * `turnpike keys create|list|revoke`. The key is printed once at creation: in plain output it
 * is the last line of stdout, with `--json` it is the `key` field. `--scope` (or `--admin`) sets
 * what the key may reach; an admin-scoped key needs an admin account (or none: the operator's).
 */
import { MAX_CREDIT } from "../protocol/money-bounds.ts";
import type { Command } from "commander";
import { createApiKey, listApiKeys, revokeApiKey, type ApiKeyRecord } from "../auth/api-keys.ts";
import { KEY_SCOPES, type KeyScope } from "../auth/key-scopes.ts";
import { requireAccountByEmail } from "../accounts/accounts.ts";
import { withStore, withStoreFlags, type StoreFlags } from "./store.ts";

function isoOrDash(time: number | null): string {
  return time === null ? "-" : new Date(time).toISOString();
}

function keyStatus(key: ApiKeyRecord, now = Date.now()): string {
  if (key.revoked !== null) return "revoked";
  if (key.expires !== null && key.expires <= now) return "expired";
  return "active";
}

/** `30d`, `12h`, `90m` or an ISO date → milliseconds since the epoch. */
export function parseExpiry(value: string, now = Date.now()): number {
  const relative = /^(\d+)\s*([dhm])$/.exec(value.trim());
  if (relative) {
    const unit = { d: 86_400_000, h: 3_600_000, m: 60_000 }[relative[2] as "d" | "h" | "m"];
    return now + Number(relative[1]) * unit;
  }
  const time = Date.parse(value);
  if (Number.isNaN(time)) throw new Error(`'${value}' is not an expiry: use 30d, 12h, 90m or an ISO date`);
  return time;
}

function positiveInteger(name: string, max = Number.MAX_SAFE_INTEGER): (value: string) => number {
  return (value) => {
    const number = Number(value);
    if (!Number.isSafeInteger(number) || number < 0) throw new Error(`${name} must be a non-negative integer, got '${value}'`);
    if (number > max) throw new Error(`${name} must be at most ${max}, got '${value}'`);
    return number;
  };
}

function keyScope(value: string): KeyScope {
  if (!(KEY_SCOPES as readonly string[]).includes(value)) throw new Error(`--scope must be one of ${KEY_SCOPES.join(", ")}, got '${value}'`);
  return value as KeyScope;
}

type CreateFlags = StoreFlags & {
  scope?: KeyScope;
  admin?: boolean;
  name: string;
  json?: boolean;
  account?: string;
  expires?: string;
  models?: string;
  spendCap?: number;
  rpm?: number;
  tpm?: number;
};

export function registerKeysCommands(program: Command): void {
  const keys = program.command("keys").description("create, list and revoke API keys");

  withStoreFlags(
    keys
      .command("create")
      .description("create an API key and print it once")
      .option("--name <name>", "a name to tell the key apart", "")
      .option("--account <email>", "the account it belongs to (metered); default: the operator's own, not metered")
      .option("--expires <when>", "expiry: 30d, 12h, 90m or an ISO date")
      .option("--models <ids>", "comma-separated model ids the key may use")
      .option("--spend-cap <credits>", "most credit the key may spend", positiveInteger("--spend-cap", MAX_CREDIT))
      .option("--rpm <n>", "requests per minute for this key", positiveInteger("--rpm"))
      .option("--tpm <n>", "tokens per minute for this key", positiveInteger("--tpm"))
      .option("--scope <scope>", "inference (/v1 only), account (also the account's /api) or admin (also admin routes); default: account, admin for operator keys", keyScope)
      .option("--admin", "short for --scope admin (the account must be an admin)")
      .option("--json", "print {id, key, name, created} as JSON"),
  ).action(async (options: CreateFlags) => {
    let created;
    try {
      created = await withStore(options, async (database) => {
        if (options.admin && options.scope !== undefined && options.scope !== "admin") throw new Error("--admin and --scope disagree: give one of them");
        const scope = options.admin ? "admin" : options.scope;
        const account = options.account === undefined ? undefined : await requireAccountByEmail(database, options.account);
        if (scope === "admin" && account !== undefined && account.role !== "admin") {
          throw new Error(`${account.email} is not an admin: only an admin's key may have admin scope`);
        }
        return createApiKey(database, {
          name: options.name,
          accountId: account?.id ?? null,
          scope,
          expires: options.expires === undefined ? undefined : parseExpiry(options.expires),
          models: options.models?.split(",").map((model) => model.trim()).filter((model) => model !== ""),
          spendCap: options.spendCap,
          rpm: options.rpm,
          tpm: options.tpm,
        });
      });
    } catch (error) {
      process.stderr.write(`turnpike: ${(error as Error).message}\n`);
      process.exitCode = 1;
      return;
    }
    if (options.json) {
      process.stdout.write(
        `${JSON.stringify({ id: created.id, key: created.key, name: created.name, scope: created.scope, created: Math.floor(created.created / 1000) })}\n`,
      );
      return;
    }
    process.stderr.write(`Created API key ${created.id}${created.name ? ` (${created.name})` : ""}, scope ${created.scope}.\n`);
    process.stderr.write("Copy it now: it is shown only this once and cannot be recovered.\n");
    process.stdout.write(`${created.key}\n`);
  });

  withStoreFlags(keys.command("list").description("list API keys (never the keys themselves)").option("--json", "print JSON")).action(
    async (options: StoreFlags & { json?: boolean }) => {
      const records = await withStore(options, (database) => listApiKeys(database));
      if (options.json) {
        const rows = records.map((key) => ({
          id: key.id,
          name: key.name,
          prefix: key.displayPrefix,
          status: keyStatus(key),
          scope: key.scope,
          parent_key_id: key.parentKeyId,
          account_id: key.accountId,
          expires: key.expires === null ? null : Math.floor(key.expires / 1000),
          models: key.models,
          spend_cap: key.spendCap,
          spent: key.spent,
          rpm: key.rpm,
          tpm: key.tpm,
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
      const table = records.map((key) => [key.id, key.name || "-", `${key.displayPrefix}…`, keyStatus(key), key.scope, isoOrDash(key.created), isoOrDash(key.lastUsed)]);
      const header = ["ID", "NAME", "PREFIX", "STATUS", "SCOPE", "CREATED", "LAST USED"];
      const widths = header.map((title, column) => Math.max(title.length, ...table.map((row) => row[column]!.length)));
      for (const row of [header, ...table]) process.stdout.write(`${row.map((cell, column) => cell.padEnd(widths[column]!)).join("  ").trimEnd()}\n`);
    },
  );

  withStoreFlags(keys.command("revoke").description("revoke an API key and the keys it created; takes effect on the next request").argument("<id>", "the key's id (from keys list)")).action(
    async (id: string, options: StoreFlags) => {
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
