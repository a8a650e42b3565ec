import assert from "node:assert/strict";
import { test } from "node:test";
import { Kysely, PostgresDialect } from "kysely";
import pg from "pg";
import { dialectOf } from "./dialect.ts";
import { openPostgres } from "./postgres.ts";
import type { Database } from "./schema.ts";
import { openSqlite } from "./sqlite.ts";

test("a store knows its dialect from where it was opened, and its transactions know it too", async () => {
  const sqlite = openSqlite(":memory:");
  // No connection is made until a query runs.
  const postgres = openPostgres("postgres://nobody@127.0.0.1:1/none");
  try {
    assert.equal(dialectOf(sqlite), "sqlite");
    assert.equal(dialectOf(postgres), "postgres");
    assert.equal(await sqlite.transaction().execute(async (transaction) => dialectOf(transaction)), "sqlite");
  } finally {
    await sqlite.destroy();
    await postgres.destroy();
  }
});

test("a database opened elsewhere is told by its adapter", async () => {
  const database = new Kysely<Database>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: "postgres://nobody@127.0.0.1:1/none" }) }) });
  try {
    assert.equal(dialectOf(database), "postgres");
  } finally {
    await database.destroy();
  }
});
