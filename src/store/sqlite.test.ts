import assert from "node:assert/strict";
import { test } from "node:test";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { sql } from "kysely";
import { openSqlite } from "./sqlite.ts";

test("a SELECT reads integers beyond 2^53 as (approximate) numbers instead of throwing, and small ones exactly", async () => {
  const database = openSqlite(":memory:");
  try {
    await sql`create table numbers (id text primary key, value integer, ratio real, label text)`.execute(database);
    await sql`insert into numbers values ('big', 9007199254740993, 1.5, 'x'), ('small', 42, 0.25, 'y')`.execute(database);
    const { rows } = await sql<{ id: string; value: number; ratio: number; label: string }>`select * from numbers order by id`.execute(database);
    assert.deepEqual(
      rows.map((row) => ({ ...row })),
      [
        { id: "big", value: 9007199254740992, ratio: 1.5, label: "x" },
        { id: "small", value: 42, ratio: 0.25, label: "y" },
      ],
    );
    assert.equal(typeof rows[1]?.value, "number");
    // A write returning small values still reads as numbers (only plain SELECTs are read again on a big one).
    const { rows: returned } = await sql<{ value: number }>`update numbers set value = value + 1 where id = 'small' returning value`.execute(database);
    assert.deepEqual(returned.map((row) => row.value), [43]);
    const summed = await sql<{ total: number }>`select sum(value) as total from numbers`.execute(database);
    assert.equal(typeof summed.rows[0]?.total, "number");
  } finally {
    await database.destroy();
  }
});

test("keeps temp files in memory (the group commit's statement journals no longer spill to disk) beside WAL, NORMAL sync and foreign keys", async () => {
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-sqlite-pragmas-"));
  const database = openSqlite(path.join(directory, "store.sqlite"));
  try {
    const read = async (pragma: string) => Object.values((await sql.raw<Record<string, unknown>>(`pragma ${pragma}`).execute(database)).rows[0]!)[0];
    // temp_store 2 is MEMORY; synchronous 1 is NORMAL.
    assert.equal(await read("temp_store"), 2);
    assert.equal(await read("journal_mode"), "wal");
    assert.equal(await read("synchronous"), 1);
    assert.equal(await read("foreign_keys"), 1);
  } finally {
    await database.destroy();
    fs.rmSync(directory, { recursive: true, force: true });
  }
});
