/**
 * PostgreSQL connections failing under the store (this machine's real server, a schema of its
 * own): a connection killed while a transaction holds it, and a query that goes unanswered.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { sql, type Kysely } from "kysely";
import pg from "pg";
import { freshPostgresSchema, postgresUrl } from "../../test/helpers/databases.ts";
import { TcpProxy } from "../../test/helpers/tcp-proxy.ts";
import { DatabaseTimeoutError, isDatabaseUnavailable } from "./errors.ts";
import { openPostgres } from "./postgres.ts";
import type { Database } from "./schema.ts";

describe("openPostgres", () => {
  let url: string;
  let drop: () => Promise<void>;
  let database: Kysely<Database>;
  const broken: Error[] = [];
  before(async () => {
    ({ url, drop } = await freshPostgresSchema());
    database = openPostgres(url, { queryTimeoutMs: 1_000, onConnectionError: (error) => broken.push(error) });
  });
  after(async () => {
    await database?.destroy();
    await drop?.();
  });

  /** Ends a server process from outside, as a restart or `pg_terminate_backend` would. */
  async function terminate(pid: number): Promise<void> {
    const admin = new pg.Client({ connectionString: postgresUrl });
    await admin.connect();
    try {
      await admin.query("SELECT pg_terminate_backend($1)", [pid]);
    } finally {
      await admin.end();
    }
  }

  it("survives a connection killed while a transaction holds it: the query fails as unavailable, the next one reconnects", async () => {
    const uncaught: unknown[] = [];
    const onUncaught = (error: unknown) => uncaught.push(error);
    process.on("uncaughtException", onUncaught);
    try {
      const failure = await database
        .transaction()
        .execute(async (transaction) => {
          const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(transaction);
          const killed = terminate(rows[0]!.pid);
          await sql`select pg_sleep(0.5)`.execute(transaction);
          await killed;
        })
        .then(
          () => undefined,
          (error: unknown) => error,
        );
      assert.ok(failure !== undefined, "the transaction failed");
      assert.ok(isDatabaseUnavailable(failure), `answered as unavailable: ${String(failure)}`);
      await new Promise((resolve) => setImmediate(resolve));
      assert.deepEqual(uncaught.map(String), [], "no error went unhandled");
      assert.ok(broken.length > 0, "the broken connection was reported");
    } finally {
      process.off("uncaughtException", onUncaught);
    }
    const { rows } = await sql<{ one: number }>`select 1 as one`.execute(database);
    assert.equal(rows[0]!.one, 1);
  });

  it("has PostgreSQL cancel a statement that runs past the timeout, keeping the connection", async () => {
    const brokenBefore = broken.length;
    await assert.rejects(sql`select pg_sleep(5)`.execute(database), (error: unknown) => {
      assert.equal((error as { code?: string }).code, "57014", String(error));
      assert.ok(isDatabaseUnavailable(error), "answered as 503 database_unavailable");
      return true;
    });
    assert.equal(broken.length, brokenBefore, "a slow statement costs no connection");
    const { rows } = await sql<{ one: number }>`select 1 as one`.execute(database);
    assert.equal(rows[0]!.one, 1);
  });

  it("fails a query a black-holed server never answers, drops its connection and serves the next query", async () => {
    const proxy = new TcpProxy(postgresUrl);
    await proxy.open();
    const dropped: Error[] = [];
    const behind = openPostgres(proxy.url(url), { queryTimeoutMs: 1_000, onConnectionError: (error) => dropped.push(error) });
    try {
      await sql`select 1`.execute(behind);
      proxy.startBlackHole();
      const started = Date.now();
      await assert.rejects(sql`select 1`.execute(behind), (error: unknown) => error instanceof DatabaseTimeoutError);
      assert.ok(Date.now() - started < 5_000, `failed after ${Date.now() - started} ms`);
      assert.ok(dropped.length > 0, "the connection was dropped and reported");
      proxy.endBlackHole();
      const { rows } = await sql<{ one: number }>`select 1 as one`.execute(behind);
      assert.equal(rows[0]!.one, 1);
    } finally {
      await behind.destroy();
      await proxy.close();
    }
  });

  it("has PostgreSQL end statements and idle transactions that run past the timeout too", async () => {
    const { rows } = await sql<{ statement: string; idle: string }>`select current_setting('statement_timeout') as statement, current_setting('idle_in_transaction_session_timeout') as idle`.execute(database);
    assert.deepEqual(rows[0], { statement: "1s", idle: "1s" });
  });
});
