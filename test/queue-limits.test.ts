/**
 * The model's queue at its bounds, over real HTTP on the fake engine (1 slot, held by a gate):
 * one account past its share of the queue gets 429 `queue_share_exceeded` while another still
 * queues; a non-streamed flex request that finds no capacity in time gets 429
 * `resource_unavailable` with a retry-after and is billed nothing; a waiting stream hears
 * `: queued N`; `/metrics` and `GET /api/admin/queues` show the queue per tier.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { Kysely } from "kysely";
import { checkLedger } from "../src/billing/ledger.ts";
import { FakeEngine, FakeGate } from "../src/engines/fake/fake-engine.ts";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { streamOnce, until } from "./helpers/fair-load.ts";
import { meteredKey } from "./helpers/metered.ts";
import { postJson, startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";

const pricing = { prompt: 1_000_000, cached_prompt: 1_000_000, completion: 1_000_000 };
const messages = [{ role: "user", content: "Say hello." }];

describe("the queue at its bounds", () => {
  let test: TestServer;
  let database: Kysely<Database>;
  let gate = new FakeGate();
  const engine = new FakeEngine({
    capacity: 1,
    queueSize: 6,
    queuing: { maxWaitingPerAccount: 2 },
    script: () => [{ steps: [{ gate: gate }, { text: "Hello" }] }],
  });

  before(async () => {
    const directory = temporaryDirectory();
    const configFile = path.join(directory, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [{ id: "fake", path: path.join(directory, "fake.gguf"), pricing }],
        plans: [{ id: "tiered", name: "Tiered", price: { amount: 100, currency: "usd" }, credit: 1_000_000, service_tiers: { default: 1, flex: 0.5 } }],
      }),
    );
    test = await startTestServer({ configFile, engines: { fake: engine }, flags: { flex_max_wait: "0.3" } });
    database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
  });
  after(async () => {
    gate.release();
    await database?.destroy();
    await test?.close();
  });

  const chat = (key: string, extra: Record<string, unknown> = {}) => postJson(`${test.baseURL}/chat/completions`, { model: "fake", messages, max_tokens: 8, ...extra }, { authorization: `Bearer ${key}` });

  it("refuses an account past its share of the queue with 429 while another account still queues, and shows the queue", async () => {
    gate = new FakeGate();
    const a = await meteredKey(database, "tiered");
    const b = await meteredKey(database, "tiered");
    const running = chat(a.key);
    await until(() => engine.running === 1, 5_000, "A's first request running");
    const waitingA = [chat(a.key), chat(a.key)];
    await until(() => engine.members()[0]!.waiting === 2, 5_000, "A's two waiting");
    const refused = await chat(a.key);
    assert.equal(refused.status, 429);
    assert.equal((refused.body as { error: { code: string } }).error.code, "queue_share_exceeded");
    assert.equal(refused.headers.get("retry-after"), "1");
    // B is not refused for A's backlog, and a stream that waits hears its place.
    const streamed = streamOnce(test.baseURL, b.key, { model: "fake", messages, max_tokens: 8 });
    await until(() => engine.members()[0]!.waiting === 3, 5_000, "B waiting");

    const metrics = await (await fetch(`${test.url}/metrics`)).text();
    assert.match(metrics, /turnpike_queue_waiting\{model="fake",tier="default"\} 3/);
    assert.match(metrics, /turnpike_queue_oldest_wait_seconds\{model="fake",tier="default"\} [0-9.]+/);
    const queues = await fetch(`${test.url}/api/admin/queues`, { headers: { authorization: `Bearer ${test.key}` } });
    assert.equal(queues.status, 200);
    const fake = ((await queues.json()) as { data: Array<{ model: string; capacity: number; busy: number; waiting: Record<string, number>; oldest_wait_ms: Record<string, number | null> }> }).data.find((queue) => queue.model === "fake")!;
    assert.deepEqual({ capacity: fake.capacity, busy: fake.busy, waiting: fake.waiting }, { capacity: 1, busy: 1, waiting: { priority: 0, default: 3, flex: 0 } });
    assert.ok((fake.oldest_wait_ms.default ?? 0) > 0);
    const forbidden = await fetch(`${test.url}/api/admin/queues`, { headers: { authorization: `Bearer ${a.key}` } });
    assert.equal(forbidden.status, 403, "admins only");

    gate.release();
    const done = await Promise.all([running, ...waitingA]);
    for (const each of done) assert.equal(each.status, 200);
    const outcome = await streamed;
    assert.equal(outcome.status, 200);
    assert.deepEqual(outcome.queued.slice(0, 1), [1], "B was next in line (A had been served already)");
  });

  it("refuses a non-streamed flex request that finds no capacity in time with 429 and a retry-after, billing nothing", async () => {
    gate = new FakeGate();
    const a = await meteredKey(database, "tiered");
    const c = await meteredKey(database, "tiered");
    const running = chat(a.key);
    await until(() => engine.running === 1, 5_000, "A's request running");
    const started = performance.now();
    const flex = await chat(c.key, { service_tier: "flex" });
    assert.equal(flex.status, 429, JSON.stringify(flex.body));
    assert.equal((flex.body as { error: { code: string; param: string } }).error.code, "resource_unavailable");
    assert.ok(Number(flex.headers.get("retry-after")) >= 1);
    assert.ok(performance.now() - started >= 250, "it waited its limit first");
    gate.release();
    assert.equal((await running).status, 200);
    // Released in the group commit after the refusal.
    await test.server.usageWritten();
    const books = await checkLedger(database, c.accountId);
    assert.equal(books.activeHolds, 0, "its hold was released");
    assert.equal(books.balance, 1_000_000, "nothing was charged");
    // Idle now: the same flex request is served, at its tier.
    const idle = await chat(c.key, { service_tier: "flex" });
    assert.equal(idle.status, 200);
    assert.equal((idle.body as { service_tier: string }).service_tier, "flex");
  });
});
