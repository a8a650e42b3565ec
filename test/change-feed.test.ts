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
import { freshPostgresSchema } from "./helpers/databases.ts";
import { startTestServer, type TestServer } from "./helpers/server.ts";

describe("key changes reach PostgreSQL nodes through the change feed", { timeout: 120_000 }, () => {
  let schema: Awaited<ReturnType<typeof freshPostgresSchema>>;
  let listening: TestServer;
  let deaf: TestServer;
  let database: Kysely<Database>;

  before(async () => {
    schema = await freshPostgresSchema();
    listening = await startTestServer({ flags: { database_url: schema.url } });
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

  it("without the feed, reads a key again after the 1 s bound", async () => {
    const created = await createApiKey(database, { name: "deaf" });
    assert.equal(await statusOf(deaf, created.key), 200);
    await revokeUnheard(created.id);
    await delay(VERIFIED_KEY_MAX_AGE_MS + 100);
    assert.equal(await statusOf(deaf, created.key), 401);
  });
});
