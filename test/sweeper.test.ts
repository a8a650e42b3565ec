/**
 * The ledger sweeper's settings: `--sweep-interval` (how often it runs and beats the heartbeat), `--dead-node-after` (when a
 * silent node's holds are released) and `--hold-ttl` (how long any hold may live) take effect; it deletes stored
 * responses past their retention.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import type { Kysely } from "kysely";
import OpenAI from "openai";
import { createAccount } from "../src/accounts/accounts.ts";
import { createApiKey } from "../src/auth/api-keys.ts";
import { grantPlan } from "../src/billing/grant-plan.ts";
import { checkLedger, placeHold } from "../src/billing/ledger.ts";
import { findPlan } from "../src/billing/plans-store.ts";
import { openStore } from "../src/store/open.ts";
import { ResponseStore } from "../src/responses/store.ts";
import type { Database } from "../src/store/schema.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

describe("the ledger sweeper's settings", () => {
  let test: TestServer;
  let database: Kysely<Database>;
  before(async () => {
    const configFile = path.join(temporaryDirectory(), "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [{ id: "story", path: storiesModel, pricing: { prompt: 1_000_000, cached_prompt: 1_000_000, completion: 1_000_000 } }],
        plans: [{ id: "big", name: "Big", price: { amount: 100, currency: "usd" }, credit: 1_000_000 }],
      }),
    );
    // The defaults are 10 s, 60 s and 30 min: nothing below would be released within the test.
    test = await startTestServer({ configFile, flags: { sweep_interval: "0.2", dead_node_after: "3", hold_ttl: "3" } });
    database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
  });
  after(async () => {
    await database?.destroy();
    await test?.close();
  });

  async function fundedAccount(): Promise<string> {
    const account = await createAccount(database, { email: `sweep-${Math.random().toString(36).slice(2)}@example.com` });
    await grantPlan(database, { accountId: account.id, plan: (await findPlan(database, "big"))!, source: `test:${account.id}` });
    return account.id;
  }

  async function holdStatus(id: string): Promise<string> {
    return (await database.selectFrom("holds").select("status").where("id", "=", id).executeTakeFirstOrThrow()).status;
  }

  /** Polls until `condition` holds; returns the milliseconds it took, or fails after `limitMs`. */
  async function within(limitMs: number, what: string, condition: () => Promise<boolean>): Promise<number> {
    const started = Date.now();
    while (!(await condition())) {
      assert.ok(Date.now() - started < limitMs, `${what} within ${limitMs} ms`);
      await delay(50);
    }
    return Date.now() - started;
  }

  it("beats this node's heartbeat every --sweep-interval", async () => {
    const self = async () => Number((await database.selectFrom("nodes").select("last_seen_at").where("pid", "=", process.pid).executeTakeFirstOrThrow()).last_seen_at);
    const seen = new Set<number>([await self()]);
    // Every 0.2 s: several beats in 2 s (the default, every 10 s, gives none).
    await within(2_000, "three more heartbeats", async () => {
      seen.add(await self());
      return seen.size >= 4;
    });
  });

  it("releases the holds of a node whose heartbeat is older than --dead-node-after", async () => {
    const accountId = await fundedAccount();
    // A node on another host (so only its heartbeat tells whether it lives) that beats no more.
    const nodeId = `node_elsewhere_${Math.random().toString(36).slice(2)}`;
    const now = Date.now();
    await database.insertInto("nodes").values({ id: nodeId, hostname: "elsewhere.invalid", pid: 1, started_at: now, last_seen_at: now }).execute();
    const holdId = await placeHold(database, { accountId, keyId: null, amount: 1_000, nodeId, ttlMs: 3_600_000 });
    assert.equal((await checkLedger(database, accountId)).balance, 1_000_000 - 1_000);

    await delay(500);
    assert.equal(await holdStatus(holdId), "active", "a node heard from less than 3 s ago is alive");
    const tookMs = await within(15_000, "the dead node's hold is released", async () => (await holdStatus(holdId)) === "released");
    const closed = await database.selectFrom("holds").select("closed_at").where("id", "=", holdId).executeTakeFirstOrThrow();
    assert.ok(Number(closed.closed_at) - now >= 3_000, "not before the node was silent for 3 s");
    const check = await checkLedger(database, accountId);
    assert.deepEqual([check.balance, check.activeHolds, check.sumOfEntries], [1_000_000, 0, 1_000_000], `released after ${tookMs} ms more`);
    assert.equal(await database.selectFrom("nodes").select("id").where("id", "=", nodeId).executeTakeFirst(), undefined, "the dead node is forgotten");
  });

  it("gives each hold --hold-ttl to live, after which the sweeper releases it", async () => {
    const accountId = await fundedAccount();
    const key = await createApiKey(database, { name: "sweep", accountId });
    const client = new OpenAI({ baseURL: test.baseURL, apiKey: key.key, maxRetries: 0 });
    await client.chat.completions.create({ model: "story", messages: [{ role: "user", content: "Hi" }], max_tokens: 3 });
    const placed = await database.selectFrom("holds").select(["created_at", "expires_at"]).where("account_id", "=", accountId).executeTakeFirstOrThrow();
    assert.equal(Number(placed.expires_at) - Number(placed.created_at), 3_000, "the server's holds live 3 s");

    // A hold of this (living) node whose request never settled: released once its 3 s are up.
    const self = await database.selectFrom("nodes").select("id").where("pid", "=", process.pid).executeTakeFirstOrThrow();
    const holdId = await placeHold(database, { accountId, keyId: null, amount: 1_000, nodeId: self.id, ttlMs: 3_000 });
    await delay(500);
    assert.equal(await holdStatus(holdId), "active");
    await within(15_000, "the expired hold is released", async () => (await holdStatus(holdId)) === "released");
    const check = await checkLedger(database, accountId);
    assert.equal(check.activeHolds, 0);
    assert.equal(check.balance, check.sumOfEntries);
  });

  it("deletes stored responses once their retention is up, and keeps the others", async () => {
    const day = 24 * 60 * 60 * 1000;
    // Saved as if two days ago, kept one day: expired a day ago. The other is kept 30 days.
    const twoDaysAgo = new ResponseStore(database, { retentionSeconds: 24 * 60 * 60 });
    const now = new ResponseStore(database);
    const record = (id: string, createdAt: number) => ({
      id,
      accountId: null,
      keyId: null,
      model: "story",
      status: "completed" as const,
      createdAt,
      previousResponseId: null,
      background: false,
      inputItems: [],
      response: { id, object: "response" },
    });
    const expired = `resp_sweep_expired_${Math.random().toString(36).slice(2)}`;
    const kept = `resp_sweep_kept_${Math.random().toString(36).slice(2)}`;
    await twoDaysAgo.save(record(expired, Date.now() - 2 * day));
    await now.save(record(kept, Date.now()));
    const stored = async (id: string) => (await database.selectFrom("responses").select("id").where("id", "=", id).executeTakeFirst()) !== undefined;
    await within(15_000, "the server's sweeper deletes the expired response", async () => !(await stored(expired)));
    assert.equal(await stored(kept), true);
  });
});
