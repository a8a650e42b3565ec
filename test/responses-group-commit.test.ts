/**
 * A stored response costs one group-committed write, not a synchronous round trip of its own:
 * 50 responses ending together share a handful of commits (on SQLite and PostgreSQL), and so do
 * responses made one after another within the commit window (`--responses-commit-window`); the
 * node that answered reads each at once, before its commit. On the fake engine, whose gate ends
 * them at once.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Kysely } from "kysely";
import { FakeEngine, FakeGate, type ScriptStep } from "../src/engines/fake/fake-engine.ts";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { backends, freshPostgresSchema } from "./helpers/databases.ts";
import { postJson, startTestServer, type TestServer } from "./helpers/server.ts";

const RESPONSES = 50;

async function getJson(url: string, headers: Record<string, string>): Promise<{ status: number; body: any }> {
  const response = await fetch(url, { headers });
  return { status: response.status, body: await response.json() };
}

for (const backend of backends) {
  describe(`stored responses under concurrency (${backend})`, { timeout: 60_000 }, () => {
    let server: TestServer;
    let database: Kysely<Database>;
    let dropSchema: (() => Promise<void>) | undefined;
    let steps: ScriptStep[] = [{ text: "Hello" }];
    const engine = new FakeEngine({ capacity: RESPONSES, queueSize: RESPONSES, script: () => [{ steps }] });

    let databaseUrl = "";
    before(async () => {
      if (backend === "postgres") ({ url: databaseUrl, drop: dropSchema } = await freshPostgresSchema());
      server = await startTestServer({ engines: { fake: engine }, flags: { database_url: databaseUrl } });
      database = await openStore({ dataDir: server.dataDir, databaseUrl });
    });
    after(async () => {
      await database?.destroy();
      await server?.close();
      await dropSchema?.();
    });

    const create = (body: Record<string, unknown>) => postJson(`${server.baseURL}/responses`, { model: "fake", input: "Hi", max_output_tokens: 16, ...body }, { authorization: `Bearer ${server.key}` });

    it("writes responses made one after another in shared commits, off their response path", async (t) => {
      const own = new FakeEngine({ capacity: 1, queueSize: 1, script: () => [{ steps: [{ text: "Hello" }] }] });
      const windowed = await startTestServer({ engines: { fake: own }, flags: { database_url: databaseUrl, responses_commit_window: "1000" } });
      const windowedDatabase = await openStore({ dataDir: windowed.dataDir, databaseUrl });
      try {
        const store = windowed.server.responses;
        const before = store.commits;
        let previous: string | undefined;
        for (let index = 0; index < 10; index++) {
          const response = await postJson(
            `${windowed.baseURL}/responses`,
            { model: "fake", input: "Hi", max_output_tokens: 16, ...(previous === undefined ? {} : { previous_response_id: previous }) },
            { authorization: `Bearer ${windowed.key}` },
          );
          assert.equal(response.status, 200, response.text.slice(0, 300));
          // Each continues the last one, which may not be written yet: this node has it in memory.
          previous = response.body.id as string;
        }
        const read = await getJson(`${windowed.baseURL}/responses/${previous}/input_items`, { authorization: `Bearer ${windowed.key}` });
        assert.equal(read.status, 200);
        await store.drain();
        const commits = store.commits - before;
        t.diagnostic(`${commits} commits`);
        assert.ok(commits <= 5, `${commits} commits for 10 responses made one after another`);
        const rows = await windowedDatabase.selectFrom("responses").select(["id", "previous_response_id"]).execute();
        assert.equal(rows.length, 10, "all ten written");
        assert.equal(rows.filter((row) => row.previous_response_id !== null).length, 9, "each continuing the one before");
      } finally {
        await windowedDatabase.destroy();
        await windowed.close();
      }
    });

    for (const stream of [false, true]) {
      it(`writes ${RESPONSES} concurrent ${stream ? "streamed" : "non-streamed"} responses in far fewer commits than responses, each readable at once on its node`, async (t) => {
        const gate = new FakeGate();
        steps = [{ text: "Hello" }, { gate }, { text: " world" }];
        const store = server.server.responses;
        const before = store.commits;
        const pending = Array.from({ length: RESPONSES }, () => create({ stream }));
        // Every one generating, then all end at once.
        for (let attempt = 0; attempt < 400 && engine.running < RESPONSES; attempt++) await new Promise((resolve) => setTimeout(resolve, 10));
        assert.equal(engine.running, RESPONSES);
        gate.release();
        const answered = await Promise.all(pending);
        const ids = answered.map((response) => {
          assert.equal(response.status, 200, response.text.slice(0, 300));
          if (!stream) return response.body.id as string;
          const created = /"type":"response\.created".*?"id":"(resp_[^"]+)"/.exec(response.text);
          assert.ok(response.text.includes("response.completed"), "the stream ended completed");
          return created![1]!;
        });
        // The node that answered reads each at once (from memory while it waits for its commit).
        for (const id of ids) {
          const read = await getJson(`${server.baseURL}/responses/${id}`, { authorization: `Bearer ${server.key}` });
          assert.equal(read.status, 200);
          assert.equal(read.body.status, "completed");
        }
        // In the database once the commit window closed (another node reads them then).
        await new Promise((resolve) => setTimeout(resolve, store.visibleWithinMs));
        await store.drain();
        const commits = store.commits - before;
        const rows = await database.selectFrom("responses").select(["id", "status"]).where("id", "in", ids).execute();
        assert.equal(rows.length, RESPONSES, "every response was stored");
        assert.ok(rows.every((row) => row.status === "completed"));
        t.diagnostic(`${commits} commits for ${RESPONSES} stored responses`);
        assert.ok(commits <= RESPONSES / 5, `${commits} commits for ${RESPONSES} stored responses`);
      });
    }
  });
}
