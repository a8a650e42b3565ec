/**
 * Retention end to end: a stored response past its retention (`--responses-retention-days`, at
 * least a day, so the row is aged here as 30 days would have aged it) reads as gone at once
 * (`GET`, `input_items`, `previous_response_id`, `DELETE`: 404), before the sweeper deletes it,
 * which it then does; a response within its retention is untouched.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import type { Kysely } from "kysely";
import { FakeEngine } from "../src/engines/fake/fake-engine.ts";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { postJson, startTestServer, type TestServer } from "./helpers/server.ts";

const DAY_MS = 24 * 60 * 60 * 1000;

describe("stored responses past their retention", { timeout: 60_000 }, () => {
  let server: TestServer;
  let database: Kysely<Database>;
  const engine = new FakeEngine({ script: () => [{ steps: [{ text: "Hello" }] }] });

  before(async () => {
    server = await startTestServer({ engines: { fake: engine }, flags: { sweep_interval: "0.5", responses_retention_days: "30" } });
    database = await openStore({ dataDir: server.dataDir, databaseUrl: "" });
  });
  after(async () => {
    await database?.destroy();
    await server?.close();
  });

  const headers = () => ({ authorization: `Bearer ${server.key}` });
  const create = (body: Record<string, unknown> = {}) => postJson(`${server.baseURL}/responses`, { model: "fake", input: "Hi", max_output_tokens: 16, ...body }, headers());

  it("reads as gone once past its retention, and is swept; a younger one stays", async () => {
    const old = await create();
    const young = await create();
    // Written once the commit window closed.
    await server.server.responses.drain();
    const stored = await database.selectFrom("responses").select(["id", "created_at", "expires_at"]).where("id", "=", old.body.id).executeTakeFirstOrThrow();
    assert.equal(Number(stored.expires_at) - Number(stored.created_at), 30 * DAY_MS, "kept the retention setting's 30 days");
    // Made 30 days and a second ago.
    await database
      .updateTable("responses")
      .set({ created_at: Number(stored.created_at) - 30 * DAY_MS - 1000, expires_at: Number(stored.expires_at) - 30 * DAY_MS - 1000 })
      .where("id", "=", old.body.id)
      .execute();

    const got = await fetch(`${server.baseURL}/responses/${old.body.id}`, { headers: headers() });
    assert.equal(got.status, 404);
    assert.equal(((await got.json()) as { error: { code: string } }).error.code, "response_not_found");
    assert.equal((await fetch(`${server.baseURL}/responses/${old.body.id}/input_items`, { headers: headers() })).status, 404);
    assert.equal((await fetch(`${server.baseURL}/responses/${old.body.id}`, { method: "DELETE", headers: headers() })).status, 404);
    const continued = await create({ previous_response_id: old.body.id });
    assert.equal(continued.status, 404, continued.text);
    assert.equal(continued.body.error.param, "previous_response_id");

    for (let attempt = 0; attempt < 200; attempt++) {
      if ((await database.selectFrom("responses").select("id").where("id", "=", old.body.id).executeTakeFirst()) === undefined) break;
      await delay(50);
    }
    assert.equal(await database.selectFrom("responses").select("id").where("id", "=", old.body.id).executeTakeFirst(), undefined, "the sweeper deleted it");
    const kept = await fetch(`${server.baseURL}/responses/${young.body.id}`, { headers: headers() });
    assert.equal(kept.status, 200, "a response within its retention is kept");
  });
});
