/**
 * A stored response costs one group-committed write, not a synchronous round trip of its own:
 * 50 responses ending together share a handful of commits (on SQLite and PostgreSQL), each still
 * durable before its client hears the end. On the fake engine, whose gate ends them at once.
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

for (const backend of backends) {
  describe(`stored responses under concurrency (${backend})`, { timeout: 60_000 }, () => {
    let server: TestServer;
    let database: Kysely<Database>;
    let dropSchema: (() => Promise<void>) | undefined;
    let steps: ScriptStep[] = [{ text: "Hello" }];
    const engine = new FakeEngine({ capacity: RESPONSES, queueSize: RESPONSES, script: () => [{ steps }] });

    before(async () => {
      let databaseUrl = "";
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

    for (const stream of [false, true]) {
      it(`writes ${RESPONSES} concurrent ${stream ? "streamed" : "non-streamed"} responses in far fewer commits than responses, each stored before its client hears the end`, async (t) => {
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
        const commits = store.commits - before;
        const ids = answered.map((response) => {
          assert.equal(response.status, 200, response.text.slice(0, 300));
          if (!stream) return response.body.id as string;
          const created = /"type":"response\.created".*?"id":"(resp_[^"]+)"/.exec(response.text);
          assert.ok(response.text.includes("response.completed"), "the stream ended completed");
          return created![1]!;
        });
        // Durable before the client heard the end: read now, with nothing left to write.
        const rows = await database.selectFrom("responses").select(["id", "status"]).where("id", "in", ids).execute();
        assert.equal(rows.length, RESPONSES, "every response was stored before its client heard the end");
        assert.ok(rows.every((row) => row.status === "completed"));
        t.diagnostic(`${commits} commits for ${RESPONSES} stored responses`);
        assert.ok(commits <= RESPONSES / 5, `${commits} commits for ${RESPONSES} stored responses`);
      });
    }
  });
}
