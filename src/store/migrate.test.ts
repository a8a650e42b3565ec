/**
 * Migrations on this machine's real PostgreSQL and on SQLite: they apply once, and on
 * PostgreSQL an installation in one schema never mistakes another schema's bookkeeping
 * tables for its own (two installations, or two test runs, sharing one database).
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import { describe, it } from "node:test";
import { openStore } from "./open.ts";
import { migrateToLatest } from "./migrate.ts";
import { migrations } from "./migrations/index.ts";
import { freshPostgresSchema } from "../../test/helpers/databases.ts";
import { temporaryDirectory } from "../../test/helpers/server.ts";

describe("migrations", () => {
  it("apply every migration once on SQLite, reporting each", async () => {
    const dataDir = temporaryDirectory();
    const applied: string[] = [];
    const database = await openStore({ dataDir, databaseUrl: "", onMigration: (name) => applied.push(name) });
    try {
      assert.deepEqual(applied, Object.keys(migrations));
      assert.deepEqual(await migrateToLatest(database), [], "nothing left to apply");
    } finally {
      await database.destroy();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("keep each PostgreSQL schema's bookkeeping apart", async () => {
    const first = await freshPostgresSchema();
    const second = await freshPostgresSchema();
    const dataDir = temporaryDirectory();
    try {
      const one = await openStore({ dataDir, databaseUrl: first.url });
      await one.destroy();
      // The first schema now holds turnpike_migrations and its lock table; the second is empty.
      const applied: string[] = [];
      const two = await openStore({ dataDir, databaseUrl: second.url, onMigration: (name) => applied.push(name) });
      try {
        assert.deepEqual(applied, Object.keys(migrations));
        assert.deepEqual(await migrateToLatest(two), []);
        await two.selectFrom("accounts").select("id").execute();
      } finally {
        await two.destroy();
      }
    } finally {
      await first.drop();
      await second.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
