/**
 * The database line of `turnpike check` over real databases: SQLite not created yet, migrated,
 * and migrated by a newer binary; PostgreSQL in a schema of its own, its password never printed;
 * a PostgreSQL whose notifications never come back (behind a proxy that drops them); an
 * unreachable PostgreSQL.
 */
import assert from "node:assert/strict";
import path from "node:path";
import net, { type AddressInfo } from "node:net";
import { DatabaseSync } from "node:sqlite";
import { describe, it } from "node:test";
import { openStore } from "../../store/open.ts";
import { migrations } from "../../store/migrations/index.ts";
import { freshPostgresSchema } from "../../../test/helpers/databases.ts";
import { temporaryDirectory } from "../../../test/helpers/server.ts";
import { checkDatabase, migrationState } from "./database.ts";

const known = Object.keys(migrations);

describe("the database check", () => {
  it("weighs applied migrations against this binary's", () => {
    assert.deepEqual(migrationState(known), { ok: true, pending: 0, unknown: [], words: `migrations up to date (${known.length})` });
    assert.equal(migrationState(known.slice(0, -2)).pending, 2);
    assert.equal(migrationState(known.slice(0, -2)).ok, true, "serve applies pending ones");
    const newer = migrationState([...known, "9999-from-the-future"]);
    assert.equal(newer.ok, false);
    assert.match(newer.words, /newer than this binary \(9999-from-the-future\)/);
  });

  it("says a SQLite database not created yet, up to date, and newer than this binary, creating nothing", async () => {
    const dataDir = temporaryDirectory();
    const file = path.join(dataDir, "turnpike.sqlite");
    const fresh = await checkDatabase({ data_dir: dataDir, database_url: "" }, 1000);
    assert.equal(fresh.ok, true);
    assert.equal(fresh.detail, `SQLite ${file}: not created yet (serve creates it and applies ${known.length} migrations)`);

    await (await openStore({ dataDir })).destroy();
    const migrated = await checkDatabase({ data_dir: dataDir, database_url: "" }, 1000);
    assert.equal(migrated.detail, `SQLite ${file}: readable, migrations up to date (${known.length})`);

    const database = new DatabaseSync(file);
    database.prepare("insert into turnpike_migrations (name, timestamp) values (?, ?)").run("9999-from-the-future", new Date().toISOString());
    database.close();
    const newer = await checkDatabase({ data_dir: dataDir, database_url: "" }, 1000);
    assert.equal(newer.ok, false);
    assert.match(newer.detail, /migrations newer than this binary \(9999-from-the-future\)/);
  });

  it("reaches PostgreSQL in its schema and never prints the password", async () => {
    const { url, drop } = await freshPostgresSchema();
    try {
      const withPassword = url.replace("postgres://postgres@", "postgres://postgres:not-a-real-password@");
      const empty = await checkDatabase({ data_dir: "unused", database_url: withPassword }, 5000);
      assert.equal(empty.ok, true, empty.detail);
      assert.match(empty.detail, /^PostgreSQL postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:5432\/test\?\*\*\*: reachable, \d+ migration\(s\) pending/);
      await (await openStore({ dataDir: "unused", databaseUrl: url })).destroy();
      const migrated = await checkDatabase({ data_dir: "unused", database_url: withPassword }, 5000);
      assert.match(migrated.detail, /reachable, migrations up to date \(\d+\); notifications come back \(\d+ ms\): the change feed can listen$/);
      assert.equal(typeof migrated.facts?.notification_round_trip_ms, "number");
      const withoutFeed = await checkDatabase({ data_dir: "unused", database_url: withPassword, change_feed: false }, 5000);
      assert.match(withoutFeed.detail, /reachable, migrations up to date \(\d+\)$/, "no notification sent with --change-feed false");
      assert.ok(!JSON.stringify(migrated).includes("not-a-real-password"));
    } finally {
      await drop();
    }
  });

  it("says so, without failing, when a notification sent never comes back (as through a pooler in transaction mode)", async () => {
    const { url, drop } = await freshPostgresSchema();
    // A proxy in front of the real server that drops its notifications ('A' messages) and passes
    // everything else: what a client behind PgBouncer in transaction mode sees of LISTEN.
    const target = new URL(url);
    const dropped: number[] = [];
    const proxy = net.createServer((client) => {
      const server = net.connect(Number(target.port || 5432), target.hostname);
      let pending = Buffer.alloc(0);
      server.on("data", (data: Buffer) => {
        pending = Buffer.concat([pending, data]);
        const passed: Buffer[] = [];
        while (pending.length >= 5) {
          const length = 1 + pending.readUInt32BE(1);
          if (pending.length < length) break;
          const message = pending.subarray(0, length);
          if (String.fromCharCode(message[0]!) === "A") dropped.push(length);
          else passed.push(message);
          pending = pending.subarray(length);
        }
        if (passed.length > 0) client.write(Buffer.concat(passed));
      });
      client.pipe(server);
      const end = () => (client.destroy(), server.destroy());
      client.on("error", end).on("close", end);
      server.on("error", end).on("close", end);
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    try {
      await (await openStore({ dataDir: "unused", databaseUrl: url })).destroy();
      const proxied = new URL(url);
      proxied.port = String((proxy.address() as AddressInfo).port);
      const result = await checkDatabase({ data_dir: "unused", database_url: proxied.toString() }, 3000);
      assert.equal(result.ok, true, "the database serves: only the change feed cannot listen");
      assert.match(result.detail, /reachable, migrations up to date \(\d+\); a notification sent did not come back \(a pooler in transaction mode drops LISTEN\): the change feed cannot work, keys are read again after 1 s; connect to PostgreSQL directly or in session mode, or set --change-feed false$/);
      assert.equal(result.facts?.notification_round_trip_ms, null);
      assert.equal(dropped.length, 1, "the proxy dropped the one notification the check sent");
    } finally {
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
      await drop();
    }
  });

  it("says an unreachable PostgreSQL is unreachable, naming the setting", async () => {
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const result = await checkDatabase({ data_dir: "unused", database_url: `postgres://postgres:hunter2@127.0.0.1:${port}/test` }, 2000);
    assert.equal(result.ok, false);
    assert.match(result.detail, /unreachable: .*check --database-url \(TURNPIKE_DATABASE_URL\)/);
    assert.ok(!result.detail.includes("hunter2"));
  });
});
