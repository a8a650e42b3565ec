/**
 * Fresh databases for store-level tests: SQLite in a temporary directory, and PostgreSQL
 * (this machine's real server) in a schema of its own that is dropped afterwards.
 * TURNPIKE_TEST_POSTGRES_URL overrides the server (default postgres://postgres@127.0.0.1:5432/test).
 */
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import type { Kysely } from "kysely";
import pg from "pg";
import type { Database } from "../../src/store/schema.ts";
import { openStore } from "../../src/store/open.ts";
import { startTestServer, temporaryDirectory, type TestServer } from "./server.ts";

export const postgresUrl = process.env.TURNPIKE_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";

export type TestDatabase = {
  backend: "sqlite" | "postgres";
  database: Kysely<Database>;
  /** For `openStore`/`turnpike --database-url` (undefined for SQLite). */
  databaseUrl: string | undefined;
  dataDir: string;
  close(): Promise<void>;
};

/** Schemas of test runs that were killed before dropping theirs are dropped after this long. */
const STALE_SCHEMA_MS = 6 * 60 * 60 * 1000;

/**
 * A PostgreSQL URL whose connections use a fresh, empty schema, named with its creation time so
 * that schemas left behind by killed runs are dropped by later ones.
 */
export async function freshPostgresSchema(): Promise<{ url: string; drop: () => Promise<void> }> {
  const schema = `turnpike_test_${Date.now().toString(36)}_${randomBytes(6).toString("hex")}`;
  const admin = new pg.Client({ connectionString: postgresUrl });
  await admin.connect();
  const { rows } = await admin.query<{ nspname: string }>("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'turnpike\\_test\\_%'");
  for (const { nspname } of rows) {
    const created = /^turnpike_test_([0-9a-z]+)_[0-9a-f]+$/.exec(nspname)?.[1];
    if (created !== undefined && Date.now() - parseInt(created, 36) > STALE_SCHEMA_MS) {
      await admin.query(`DROP SCHEMA IF EXISTS "${nspname}" CASCADE`).catch(() => {});
    }
  }
  await admin.query(`CREATE SCHEMA ${schema}`);
  await admin.end();
  const url = `${postgresUrl}${postgresUrl.includes("?") ? "&" : "?"}options=${encodeURIComponent(`-c search_path=${schema}`)}`;
  return {
    url,
    drop: async () => {
      const client = new pg.Client({ connectionString: postgresUrl });
      await client.connect();
      await client.query(`DROP SCHEMA ${schema} CASCADE`);
      await client.end();
    },
  };
}

export async function openTestDatabase(backend: "sqlite" | "postgres"): Promise<TestDatabase> {
  const dataDir = temporaryDirectory();
  if (backend === "sqlite") {
    const database = await openStore({ dataDir, databaseUrl: "" });
    return {
      backend,
      database,
      databaseUrl: undefined,
      dataDir,
      close: async () => {
        await database.destroy();
        fs.rmSync(dataDir, { recursive: true, force: true });
      },
    };
  }
  const { url, drop } = await freshPostgresSchema();
  const database = await openStore({ dataDir, databaseUrl: url });
  return {
    backend,
    database,
    databaseUrl: url,
    dataDir,
    close: async () => {
      await database.destroy();
      await drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export const backends = ["sqlite", "postgres"] as const;

/** A test server on `backend` (a fresh PostgreSQL schema, or SQLite in its data directory) with a config file of `config`, and the store it writes. */
export type ServerOnStore = { server: TestServer; database: Kysely<Database>; close(): Promise<void> };

/** Starts `startTestServer` on `backend` with `config` (models, plans) written to a config file; `close` stops it and drops its schema. */
export async function startServerOn(backend: "sqlite" | "postgres", config: unknown, flags: Record<string, string> = {}): Promise<ServerOnStore> {
  const configFile = path.join(temporaryDirectory(), "turnpike.json");
  fs.writeFileSync(configFile, JSON.stringify(config));
  const postgres = backend === "postgres" ? await freshPostgresSchema() : undefined;
  const databaseUrl = postgres?.url ?? "";
  const server = await startTestServer({ configFile, flags: { database_url: databaseUrl, ...flags } });
  const database = await openStore({ dataDir: server.dataDir, databaseUrl });
  return {
    server,
    database,
    close: async () => {
      await database.destroy();
      await server.close();
      await postgres?.drop();
    },
  };
}
