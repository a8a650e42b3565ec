/**
 * `turnpike migrate` as a deployment runs it: from several places at once (a hook Job beside
 * nodes starting), before the database is up (`--wait`), as a gate (`--check`), against a
 * database a newer Turnpike migrated (refused by `migrate` and `serve`, nothing changed), and
 * `serve --auto-migrate false` on a database that is behind. Real processes, real SQLite and
 * PostgreSQL.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, describe, it } from "node:test";
import { sql, type Kysely } from "kysely";
import { openStore } from "../src/store/open.ts";
import { LATEST_MIGRATION } from "../src/store/migrate.ts";
import { migrations } from "../src/store/migrations/index.ts";
import type { Database } from "../src/store/schema.ts";
import { backends, freshPostgresSchema } from "./helpers/databases.ts";
import { freePort, runCli, startServeProcess } from "./helpers/process.ts";
import { cliPath, nodeBinary, repoRoot, storiesModel, temporaryDirectory } from "./helpers/server.ts";
import { TcpProxy } from "./helpers/tcp-proxy.ts";

const KNOWN = Object.keys(migrations).sort();

/** A fresh, empty database of `backend`: the flags that name it, and a way to read it. */
async function freshDatabase(backend: "sqlite" | "postgres"): Promise<{ flags: string[]; open: () => Promise<Kysely<Database>>; drop: () => Promise<void> }> {
  const dataDir = temporaryDirectory();
  if (backend === "sqlite") return { flags: ["--data-dir", dataDir], open: () => openStore({ dataDir, migrate: "none" }), drop: async () => {} };
  const { url, drop } = await freshPostgresSchema();
  return { flags: ["--data-dir", dataDir, "--database-url", url], open: () => openStore({ dataDir, databaseUrl: url, migrate: "none" }), drop };
}

/** The migrations the database records, by name, with how many times each. */
async function recorded(open: () => Promise<Kysely<Database>>): Promise<string[]> {
  const database = await open();
  try {
    const { rows } = await sql<{ name: string }>`select name from turnpike_migrations order by name`.execute(database);
    return rows.map((row) => row.name);
  } finally {
    await database.destroy();
  }
}


for (const backend of backends) {
  describe(`turnpike migrate on ${backend}`, () => {
    const drops: Array<() => Promise<void>> = [];
    after(async () => {
      for (const drop of drops) await drop();
    });

    it("runs from three places at once: all succeed, each migration is applied once", async () => {
      const database = await freshDatabase(backend);
      drops.push(database.drop);
      const runs = await Promise.all([0, 1, 2].map(() => runCli(["migrate", ...database.flags])));
      for (const run of runs) assert.equal(run.code, 0, run.stderr);
      const applied = runs.map((run) => run.stdout.split("\n").filter((line) => line.startsWith("applied ")).map((line) => line.slice("applied ".length)));
      assert.deepEqual(applied.flat().sort(), KNOWN, "every migration applied once, by one of them");
      assert.deepEqual(await recorded(database.open), KNOWN, "each recorded once");
      const check = await runCli(["migrate", "--check", ...database.flags]);
      assert.equal(check.code, 0, check.stderr);
      assert.match(check.stdout, new RegExp(`up to date \\(${LATEST_MIGRATION}\\)`));
    });

    it("two nodes starting at once on a fresh database both migrate it safely (--auto-migrate true) and serve", async () => {
      const database = await freshDatabase(backend);
      drops.push(database.drop);
      const starts = await Promise.allSettled([0, 1].map(() => startServeProcess(["--model", storiesModel, ...database.flags])));
      const nodes = starts.flatMap((start) => (start.status === "fulfilled" ? [start.value] : []));
      try {
        for (const start of starts) if (start.status === "rejected") throw start.reason;
        for (const node of nodes) assert.equal((await fetch(`${node.url}/health`)).status, 200);
        assert.deepEqual(await recorded(database.open), KNOWN, "each migration recorded once");
        const applied = nodes.flatMap((node) => [...node.stdout().matchAll(/"migration":"([^"]+)"/g)].map((match) => match[1]));
        assert.deepEqual(applied.sort(), KNOWN, "each applied by one of them");
      } finally {
        for (const node of nodes) assert.equal(await node.stop("SIGTERM"), 0, node.stderr());
      }
    });

    it("--check exits 1 listing what is pending, and changes nothing", async () => {
      const database = await freshDatabase(backend);
      drops.push(database.drop);
      const check = await runCli(["migrate", "--check", ...database.flags]);
      assert.equal(check.code, 1, check.stderr);
      for (const name of KNOWN) assert.ok(check.stdout.includes(`  ${name}\n`), `lists ${name}`);
      const reader = await database.open();
      try {
        const { rows } =
          backend === "sqlite"
            ? await sql<{ name: string }>`select name from sqlite_master where type = 'table'`.execute(reader)
            : await sql<{ name: string }>`select table_name as name from information_schema.tables where table_schema = current_schema()`.execute(reader);
        assert.deepEqual(rows, [], "no table was created");
      } finally {
        await reader.destroy();
      }
    });

    it("refuses a database a newer turnpike migrated, naming both versions, in migrate, --check and serve, changing nothing", async () => {
      const database = await freshDatabase(backend);
      drops.push(database.drop);
      assert.equal((await runCli(["migrate", ...database.flags])).code, 0);
      const writer = await database.open();
      await writer.insertInto("turnpike_migrations" as never).values({ name: "9999-from-the-future", timestamp: new Date().toISOString() } as never).execute();
      await writer.destroy();
      const before = await recorded(database.open);
      const migrate = await runCli(["migrate", ...database.flags]);
      assert.equal(migrate.code, 2, migrate.stdout);
      assert.match(migrate.stderr, /newer than this turnpike knows/);
      assert.ok(migrate.stderr.includes("9999-from-the-future") && migrate.stderr.includes(LATEST_MIGRATION), migrate.stderr);
      const check = await runCli(["migrate", "--check", ...database.flags]);
      assert.equal(check.code, 2, check.stdout);
      assert.match(check.stderr, /9999-from-the-future/);
      const serve = await runCli(["serve", "--port", "0", "--threads", "1", "--gpu", "cpu", "--model", storiesModel, ...database.flags]);
      assert.equal(serve.code, 1, serve.stdout);
      assert.match(serve.stderr, /could not start: the database's schema is at 9999-from-the-future, newer than this turnpike knows \(up to \d{4}-/);
      assert.deepEqual(await recorded(database.open), before, "nothing changed");
    });

    it("serve --auto-migrate false refuses a database that is behind, saying to run turnpike migrate; starts once it ran", async () => {
      const database = await freshDatabase(backend);
      drops.push(database.drop);
      const refused = await runCli(["serve", "--port", "0", "--threads", "1", "--gpu", "cpu", "--model", storiesModel, "--auto-migrate", "false", ...database.flags]);
      assert.equal(refused.code, 1, refused.stdout);
      assert.match(refused.stderr, new RegExp(`the database needs ${KNOWN.length} migrations: run \`turnpike migrate\` \\(pending: 0001-api-keys`));
      assert.equal((await runCli(["migrate", ...database.flags])).code, 0);
      const server = await startServeProcess(["--model", storiesModel, "--auto-migrate", "false", ...database.flags]);
      assert.equal((await fetch(`${server.url}/health`)).status, 200);
      assert.equal(await server.stop("SIGTERM"), 0, server.stderr());
    });
  });
}

describe("turnpike migrate --wait", () => {
  it("keeps trying while PostgreSQL is unreachable and migrates once it is up", async () => {
    const { url, drop } = await freshPostgresSchema();
    const proxy = new TcpProxy(url);
    proxy.port = await freePort();
    const through = proxy.url(url);
    const dataDir = temporaryDirectory();
    try {
      const child = spawn(nodeBinary, [cliPath, "migrate", "--wait", "120", "--data-dir", dataDir, "--database-url", through], { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
      const waiting = new Promise<void>((resolve) =>
        child.stderr.on("data", (chunk: Buffer) => {
          stderr += chunk.toString();
          if (stderr.includes("not reachable yet")) resolve();
        }),
      );
      const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
      await waiting;
      // Only now does the database appear (the proxy opens on the port the URL names).
      await proxy.open();
      assert.equal(await exited, 0, stderr);
      assert.match(stdout, new RegExp(`Applied ${KNOWN.length} migration\\(s\\)`));
      const gaveUp = await runCli(["migrate", "--data-dir", dataDir, "--database-url", `postgres://postgres@127.0.0.1:${await freePort()}/test`]);
      assert.equal(gaveUp.code, 1, "without --wait, an unreachable database fails at once");
      assert.match(gaveUp.stderr, /ECONNREFUSED|connect/);
    } finally {
      await proxy.close();
      await drop();
    }
  });
});
