/**
 * `turnpike check`'s database line: SQLite in the data dir or PostgreSQL (its URL printed without
 * the password), whether it answers, and how its migrations stand against this binary's: up to
 * date, some pending (`serve` applies them at start), or newer than this binary (an older binary
 * over a newer schema: it would refuse to start). Nothing is written: SQLite is opened read-only,
 * and a database not created yet is only said to be so.
 */
import fs from "node:fs";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import pg from "pg";
import { MIGRATION_TABLE, schemaStateOf } from "../../store/migrate.ts";
import { messageOf, redactUrl, within, withoutUrlSecrets, type CheckResult } from "./result.ts";

/** How the applied migrations stand against the ones this binary knows, in words. */
export function migrationState(applied: readonly string[]): { ok: boolean; words: string; pending: number; unknown: string[] } {
  const state = schemaStateOf(applied);
  const { unknown } = state;
  const pending = state.pending.length;
  if (unknown.length > 0) {
    return { ok: false, pending, unknown, words: `migrations newer than this binary (${unknown.join(", ")}): run the Turnpike version that applied them, or newer` };
  }
  if (pending === 0) return { ok: true, pending, unknown, words: `migrations up to date (${state.applied.length})` };
  return { ok: true, pending, unknown, words: `${pending} migration(s) pending (serve applies them at start, or run turnpike migrate)` };
}

/** Checks the database the settings name (on PostgreSQL with `change_feed` on, also that a notification comes back). */
export async function checkDatabase(settings: { data_dir: string; database_url: string; change_feed?: boolean }, timeoutMs: number): Promise<CheckResult> {
  return settings.database_url === "" ? checkSqlite(path.join(settings.data_dir, "turnpike.sqlite")) : checkPostgres(settings.database_url, timeoutMs, settings.change_feed !== false);
}

function checkSqlite(file: string): CheckResult {
  const name = `SQLite ${file}`;
  if (!fs.existsSync(file)) {
    const directory = nearestDirectory(path.dirname(file));
    try {
      fs.accessSync(directory, fs.constants.W_OK);
    } catch {
      return { check: "database", name, ok: false, detail: `${name}: not created yet, and ${directory} is not writable: set --data-dir (TURNPIKE_DATA_DIR) to a writable directory`, facts: { engine: "sqlite", path: file, exists: false } };
    }
    const state = migrationState([]);
    return { check: "database", name, ok: true, detail: `${name}: not created yet (serve creates it and applies ${state.pending} migrations)`, facts: { engine: "sqlite", path: file, exists: false, pending_migrations: state.pending } };
  }
  let database: DatabaseSync | undefined;
  try {
    database = new DatabaseSync(file, { readOnly: true });
    const table = database.prepare("select name from sqlite_master where type = 'table' and name = ?").get(MIGRATION_TABLE);
    const applied = table === undefined ? [] : database.prepare(`select name from ${MIGRATION_TABLE}`).all().map((row) => String(row.name));
    const state = migrationState(applied);
    return { check: "database", name, ok: state.ok, detail: `${name}: readable, ${state.words}`, facts: { engine: "sqlite", path: file, exists: true, pending_migrations: state.pending, unknown_migrations: state.unknown } };
  } catch (error) {
    return { check: "database", name, ok: false, detail: `${name}: cannot be read: ${messageOf(error)}`, facts: { engine: "sqlite", path: file, exists: true } };
  } finally {
    database?.close();
  }
}

/** `directory`, or its nearest ancestor that exists (where `serve` would create the rest). */
function nearestDirectory(directory: string): string {
  let current = path.resolve(directory);
  while (!fs.existsSync(current) && path.dirname(current) !== current) current = path.dirname(current);
  return current;
}

/**
 * Whether a notification sent on `client`'s own channel comes back within `timeoutMs` (what the
 * change feed needs: a pooler in transaction mode, for one, drops LISTEN): its round trip in ms, or
 * undefined.
 */
async function notificationRoundTrip(client: pg.Client, timeoutMs: number): Promise<number | undefined> {
  const channel = `turnpike_check_${Math.random().toString(36).slice(2, 10)}`;
  const started = performance.now();
  const heard = new Promise<number>((resolve) => {
    client.on("notification", (message) => {
      if (message.channel === channel) resolve(performance.now() - started);
    });
  });
  await client.query(`LISTEN ${channel}`);
  await client.query(`NOTIFY ${channel}`);
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), timeoutMs)));
  try {
    return await Promise.race([heard, late]);
  } finally {
    clearTimeout(timer);
    await client.query(`UNLISTEN ${channel}`).catch(() => {});
  }
}

async function checkPostgres(url: string, timeoutMs: number, changeFeed: boolean): Promise<CheckResult> {
  const name = `PostgreSQL ${redactUrl(url)}`;
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: timeoutMs, query_timeout: timeoutMs });
  // A connection that breaks after the check answered is of no interest.
  client.on("error", () => {});
  try {
    await within(client.connect(), timeoutMs, "PostgreSQL");
    const schema = (await client.query<{ schema: string | null }>("select current_schema() as schema")).rows[0]?.schema ?? null;
    if (schema === null) return { check: "database", name, ok: false, detail: `${name}: the search_path names no schema that exists`, facts: { engine: "postgres" } };
    const exists = (await client.query<{ table: string | null }>("select to_regclass(quote_ident($1) || '.' || $2)::text as table", [schema, MIGRATION_TABLE])).rows[0]?.table ?? null;
    const applied = exists === null ? [] : (await client.query<{ name: string }>(`select name from ${quoteIdentifier(schema)}.${MIGRATION_TABLE}`)).rows.map((row) => row.name);
    const state = migrationState(applied);
    const facts: Record<string, unknown> = { engine: "postgres", schema, pending_migrations: state.pending, unknown_migrations: state.unknown };
    if (!changeFeed) return { check: "database", name, ok: state.ok, detail: `${name}: reachable, ${state.words}`, facts };
    // Not a failure: without notifications the change feed never proves itself, and keys are read again after 1 s.
    const roundTrip = await notificationRoundTrip(client, Math.min(timeoutMs, 2_000));
    facts.notification_round_trip_ms = roundTrip === undefined ? null : Math.round(roundTrip);
    const feed =
      roundTrip === undefined
        ? "a notification sent did not come back (a pooler in transaction mode drops LISTEN): the change feed cannot work, keys are read again after 1 s; connect to PostgreSQL directly or in session mode, or set --change-feed false"
        : `notifications come back (${Math.max(1, Math.round(roundTrip))} ms): the change feed can listen`;
    return { check: "database", name, ok: state.ok, detail: `${name}: reachable, ${state.words}; ${feed}`, facts };
  } catch (error) {
    return { check: "database", name, ok: false, detail: `${name}: unreachable: ${withoutUrlSecrets(messageOf(error), url)}: check --database-url (TURNPIKE_DATABASE_URL) and that the server is up`, facts: { engine: "postgres" } };
  } finally {
    await client.end().catch(() => {});
  }
}

function quoteIdentifier(identifier: string): string {
  return `"${identifier.replace(/"/g, '""')}"`;
}
