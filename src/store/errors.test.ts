import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { sql } from "kysely";
import { DatabaseTimeoutError, isDatabaseFailure, isDatabaseUnavailable, isStoreError } from "./errors.ts";
import { openPostgres } from "./postgres.ts";
import { openSqlite } from "./sqlite.ts";

const withCode = (code: string, message = "x") => Object.assign(new Error(message), { code });

describe("isDatabaseUnavailable", () => {
  it("recognises an unreachable or departing database", () => {
    for (const error of [
      withCode("ECONNREFUSED"),
      withCode("ECONNRESET"),
      withCode("08006"),
      withCode("57P01", "terminating connection due to administrator command"),
      withCode("53300", "sorry, too many clients already"),
      withCode("57014", "canceling statement due to statement timeout"),
      withCode("25P03", "terminating connection due to idle-in-transaction timeout"),
      new DatabaseTimeoutError(2_000),
      new Error("Client has encountered a connection error and is not queryable"),
      new Error("Connection terminated unexpectedly"),
      new Error("timeout exceeded when trying to connect"),
      new AggregateError([withCode("ECONNREFUSED"), withCode("ECONNREFUSED")]),
      new Error("wrapped", { cause: withCode("ETIMEDOUT") }),
      Object.assign(new Error("database is locked"), { code: "ERR_SQLITE_ERROR", errcode: 5 }),
    ]) {
      assert.equal(isDatabaseUnavailable(error), true, String(error));
    }
  });

  it("leaves bugs and bad data as they are", () => {
    for (const error of [
      new Error("boom"),
      new TypeError("x is undefined"),
      withCode("23505", "duplicate key value violates unique constraint"),
      withCode("42P01", "relation does not exist"),
      Object.assign(new Error("UNIQUE constraint failed"), { code: "ERR_SQLITE_ERROR", errcode: 2067 }),
      "a string",
      null,
    ]) {
      assert.equal(isDatabaseUnavailable(error), false, String(error));
    }
  });
});

describe("isDatabaseFailure: only what the store threw", () => {
  it("does not call a socket error from elsewhere (a client gone mid-upload) a database failure", () => {
    const aborted = Object.assign(new Error("aborted"), { code: "ECONNRESET", statusCode: 400 });
    assert.equal(isDatabaseUnavailable(aborted), true, "it looks like one");
    assert.equal(isStoreError(aborted), false);
    assert.equal(isDatabaseFailure(aborted), false);
  });

  it("marks what the drivers throw: a PostgreSQL server that refuses connections, and a locked SQLite file", async () => {
    const closedPort = await new Promise<number>((resolve) => {
      const server = net.createServer().listen(0, "127.0.0.1", () => {
        const { port } = server.address() as net.AddressInfo;
        server.close(() => resolve(port));
      });
    });
    const postgres = openPostgres(`postgres://nobody@127.0.0.1:${closedPort}/none`);
    try {
      const error = await sql`select 1`.execute(postgres).then(
        () => assert.fail("no server listens there"),
        (failure: unknown) => failure,
      );
      assert.equal(isStoreError(error), true, String(error));
      assert.equal(isDatabaseFailure(error), true, String(error));
      // Wrapped by code that called the store, still the store's.
      assert.equal(isDatabaseFailure(new Error("could not settle", { cause: error })), true);
    } finally {
      await postgres.destroy();
    }

    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-store-errors-")), "locked.sqlite");
    const holder = openSqlite(file);
    const waiter = openSqlite(file);
    try {
      await sql`create table t (x integer)`.execute(holder);
      // The holder keeps a write transaction open; the waiter's write meets SQLITE_BUSY (after the busy timeout).
      await sql`pragma busy_timeout = 50`.execute(waiter);
      const locked = await holder.transaction().execute(async (transaction) => {
        await sql`insert into t values (1)`.execute(transaction);
        return sql`insert into t values (2)`.execute(waiter).then(
          () => assert.fail("the file is locked"),
          (failure: unknown) => failure,
        );
      });
      assert.equal(isStoreError(locked), true, String(locked));
      assert.equal(isDatabaseFailure(locked), true, String(locked));
    } finally {
      await holder.destroy();
      await waiter.destroy();
    }
  });
});
