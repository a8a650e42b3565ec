/**
 * Key changes reaching PostgreSQL nodes, end to end (two real servers on one schema of this
 * machine's PostgreSQL): a node listening to the change feed keeps a quiet key in memory past the
 * 1 s bound and refuses it the moment a revocation's notification arrives; a node without the
 * feed (`--change-feed false`) reads keys again after 1 s, as before.
 *
 * To see that a node answers from memory, a revocation is written with the notifying trigger
 * switched off (what no supported write does): a node that still accepts the key afterwards did
 * not read it again.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { sql, type Kysely } from "kysely";
import { createApiKey } from "../src/auth/api-keys.ts";
import { VERIFIED_KEY_MAX_AGE_MS } from "../src/auth/verified-keys.ts";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import fs from "node:fs";
import path from "node:path";
import OpenAI from "openai";
import { freshPostgresSchema } from "./helpers/databases.ts";
import { meteredKey } from "./helpers/metered.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

const pricing = { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 };

describe("key changes reach PostgreSQL nodes through the change feed", { timeout: 120_000 }, () => {
  let schema: Awaited<ReturnType<typeof freshPostgresSchema>>;
  let listening: TestServer;
  let deaf: TestServer;
  let database: Kysely<Database>;

  before(async () => {
    schema = await freshPostgresSchema();
    const configFile = path.join(temporaryDirectory(), "turnpike.json");
    fs.writeFileSync(configFile, JSON.stringify({ models: [{ id: "story", path: storiesModel, pricing }], plans: [{ id: "deep", name: "Deep", price: { amount: 100, currency: "usd" }, credit: 10_000_000 }] }));
    // A quiet key (never busy) that comes back within 10 s is served from a standing lease.
    listening = await startTestServer({ configFile, flags: { database_url: schema.url, lease_above: "1000000000", standing_lease_idle: "10" } });
    deaf = await startTestServer({ flags: { database_url: schema.url, change_feed: "false" } });
    database = await openStore({ dataDir: listening.dataDir, databaseUrl: schema.url });
  });
  after(async () => {
    await database?.destroy();
    await listening?.close();
    await deaf?.close();
    await schema?.drop();
  });

  const statusOf = async (server: TestServer, key: string) => (await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status;
  /** Revokes `id` with the notifying trigger off: no node hears of it. */
  const revokeUnheard = async (id: string) => {
    await sql`ALTER TABLE api_keys DISABLE TRIGGER api_keys_changed`.execute(database);
    try {
      await sql`UPDATE api_keys SET revoked_at = ${Date.now()} WHERE id = ${id}`.execute(database);
    } finally {
      await sql`ALTER TABLE api_keys ENABLE TRIGGER api_keys_changed`.execute(database);
    }
  };

  it("keeps a quiet key in memory past the 1 s bound, and refuses it as soon as a change to it commits", async () => {
    const created = await createApiKey(database, { name: "quiet" });
    assert.equal(await statusOf(listening, created.key), 200);
    await revokeUnheard(created.id);
    await delay(VERIFIED_KEY_MAX_AGE_MS + 500);
    assert.equal(await statusOf(listening, created.key), 200, "1.5 s later the key still came from memory: it was not read again");
    // Any write to the key's revocation is notified (here one that changes no value).
    const committed = performance.now();
    await sql`UPDATE api_keys SET revoked_at = revoked_at WHERE id = ${created.id}`.execute(database);
    let refusedAfter: number | undefined;
    while (performance.now() - committed < 2_000) {
      if ((await statusOf(listening, created.key)) === 401) {
        refusedAfter = performance.now() - committed;
        break;
      }
      await delay(5);
    }
    assert.ok(refusedAfter !== undefined && refusedAfter < VERIFIED_KEY_MAX_AGE_MS, `refused ${refusedAfter?.toFixed(0)} ms after the change committed`);
  });

  it("says in its metrics whether the feed proves itself live, and nothing where there is none", async () => {
    const metricsOf = async (server: TestServer) => (await fetch(`${server.url}/metrics`)).text();
    assert.match(await metricsOf(listening), /^turnpike_change_feed_live 1$/m);
    assert.doesNotMatch(await metricsOf(deaf), /^turnpike_change_feed_live /m);
  });

  it("serves a quiet account key that comes back from memory past the 1 s bound: its key and its account's standing", async () => {
    const { accountId, key } = await meteredKey(database, "deep");
    const client = new OpenAI({ baseURL: `${listening.url}/v1`, apiKey: key, maxRetries: 0 });
    const ask = () => client.chat.completions.create({ model: "story", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 4, temperature: 0 });
    // The second request within the idle time takes a standing lease in the background.
    await ask();
    await ask();
    await delay(300);
    await ask();
    // The balance emptied behind every cache's back (no notification): a node that read it would refuse.
    await sql`UPDATE accounts SET balance = 0 WHERE id = ${accountId}`.execute(database);
    await delay(VERIFIED_KEY_MAX_AGE_MS + 200);
    const served = await ask();
    assert.equal(served.choices.length, 1, "served: the standing came from memory (its lease holds the credit)");
    // Meanwhile the standing was read again in the background: the next request sees the empty balance.
    await delay(200);
    await assert.rejects(ask(), (error: unknown) => error instanceof OpenAI.APIError && error.status === 429);
  });

  it("without the feed, reads a key again after the 1 s bound", async () => {
    const created = await createApiKey(database, { name: "deaf" });
    assert.equal(await statusOf(deaf, created.key), 200);
    await revokeUnheard(created.id);
    await delay(VERIFIED_KEY_MAX_AGE_MS + 100);
    assert.equal(await statusOf(deaf, created.key), 401);
  });
});
