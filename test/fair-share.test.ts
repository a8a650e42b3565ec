/**
 * Fair share and priority between accounts on a saturated model, end to end over real HTTP, on
 * the embedded engine (stories260K, 2 slots) and on a pool of a real llama-server (2 slots):
 * - one account keeping 40 requests queued does not make another wait behind them: the other's
 *   request is next in line (`: queued 1`) and waits at most about one slot release, while the
 *   flooding account keeps every slot the other does not use;
 * - four backlogged accounts of weights 2:1:1:1 share the generated tokens 40/20/20/20 (±10%),
 *   equal weights give Jain's index ≥ 0.95;
 * - `flex` is refused with 429 and a retry-after under saturation and served when idle;
 *   `priority` jumps the queue.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { Kysely } from "kysely";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { backlog, jainIndex, percentile, streamOnce, until, type Backlog } from "./helpers/fair-load.ts";
import { skipWithoutLlamaServer, startLlamaServer, type RunningLlamaServer } from "./helpers/llama-server.ts";
import { meteredKey } from "./helpers/metered.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

const TIERS = { default: 1, flex: 0.5, priority: 2 };
const PLANS = [
  { id: "basic", name: "Basic", price: { amount: 100, currency: "usd" }, credit: 1_000_000_000, weight: 1, service_tiers: TIERS },
  { id: "heavy", name: "Heavy", price: { amount: 200, currency: "usd" }, credit: 1_000_000_000, weight: 2, service_tiers: TIERS },
];
const PROMPT = [{ role: "user", content: "Once upon a time" }];

type Setup = { server: TestServer; database: Kysely<Database>; llama?: RunningLlamaServer };

async function start(kind: "embedded" | "llama-server"): Promise<Setup> {
  const directory = temporaryDirectory();
  const configFile = path.join(directory, "turnpike.json");
  let llama: RunningLlamaServer | undefined;
  let model: Record<string, unknown> = { id: "story", path: storiesModel };
  if (kind === "llama-server") {
    llama = await startLlamaServer({ model: storiesModel, parallel: 2, contextSize: 2048 });
    model = { id: "story", upstream: { urls: [`${llama.url}/v1`], kind: "llama-server", max_in_flight: 2, health_interval: 60 } };
  }
  fs.writeFileSync(configFile, JSON.stringify({ models: [model], plans: PLANS }));
  const server = await startTestServer({
    configFile,
    flags: { parallel: "2", queue_size: "64", queue_per_account: "48", flex_max_wait: "1", context_size: "512" },
  });
  const database = await openStore({ dataDir: server.dataDir, databaseUrl: "" });
  return { server, database, ...(llama === undefined ? {} : { llama }) };
}

async function stop(setup: Setup | undefined): Promise<void> {
  await setup?.database.destroy();
  await setup?.server.close();
  await setup?.llama?.close();
}

function waiting(setup: Setup): number {
  return setup.server.server.catalog.get("story")!.engine.members().reduce((sum, member) => sum + member.waiting, 0);
}

/** A floods (40 waiting behind 2 running); B sends a short request every half second. */
async function floodedProbe(setup: Setup) {
  const a = await meteredKey(setup.database, "basic");
  const b = await meteredKey(setup.database, "basic");
  const flood = backlog(setup.server.baseURL, a.key, { model: "story", messages: PROMPT, max_tokens: 48, temperature: 0 }, 42);
  try {
    await until(() => waiting(setup) >= 40 && flood.done.length >= 4, 60_000, "A's backlog of 40");
    const windowStart = performance.now();
    const aDoneBefore = flood.done.length;
    const probes = [];
    for (let probe = 0; probe < 8; probe++) {
      probes.push(await streamOnce(setup.server.baseURL, b.key, { model: "story", messages: PROMPT, max_tokens: 4, temperature: 0 }));
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    const windowMs = performance.now() - windowStart;
    const aInWindow = flood.done.slice(aDoneBefore);
    return { probes, aInWindow, aAll: [...flood.done], windowMs, waitingAtEnd: waiting(setup) };
  } finally {
    await flood.stop();
  }
}

function assertNotBehindTheBacklog(result: Awaited<ReturnType<typeof floodedProbe>>): void {
  const { probes, aInWindow, aAll } = result;
  for (const probe of probes) {
    assert.equal(probe.status, 200, JSON.stringify(probe.error));
    // Whenever B found every slot busy, it was next in line, not behind A's 40.
    for (const position of probe.queued.slice(0, 1)) assert.equal(position, 1, `B was put at ${position}`);
  }
  assert.ok(probes.some((probe) => probe.queued.length > 0), "B did find the slots busy (the model was saturated)");
  // One slot release at most: no longer than A's slowest request took once it had its slot.
  const service = aAll.filter((outcome) => outcome.status === 200 && outcome.firstDataMs !== undefined).map((outcome) => outcome.totalMs - outcome.firstDataMs!);
  const bWaits = probes.map((probe) => probe.firstDataMs!);
  const aWaits = aInWindow.filter((outcome) => outcome.firstDataMs !== undefined).map((outcome) => outcome.firstDataMs!);
  assert.ok(Math.max(...bWaits) <= Math.max(...service) + 250, `B waited ${Math.max(...bWaits).toFixed(0)} ms at most; A's slowest request ran ${Math.max(...service).toFixed(0)} ms`);
  assert.ok(percentile(bWaits, 50) * 5 < percentile(aWaits, 50), `B's median wait ${percentile(bWaits, 50).toFixed(0)} ms is far below A's ${percentile(aWaits, 50).toFixed(0)} ms`);
  // A is never starved: it kept the slots B did not use.
  assert.ok(aInWindow.length >= 10, `A finished ${aInWindow.length} requests meanwhile`);
  const aTokens = aInWindow.reduce((sum, outcome) => sum + outcome.completionTokens, 0);
  const bTokens = probes.reduce((sum, probe) => sum + probe.completionTokens, 0);
  assert.ok(aTokens / (aTokens + bTokens) >= 0.75, `A got ${aTokens} of ${aTokens + bTokens} tokens`);
}

/** Four accounts, each keeping 6 requests open, until 128 requests finished after a warm-up; token shares per account. */
async function shares(setup: Setup, plans: readonly string[]): Promise<number[]> {
  const keys = await Promise.all(plans.map((plan) => meteredKey(setup.database, plan)));
  // Greedy on one prompt: every request costs the same, so shares of tokens are shares of requests.
  const backlogs: Backlog[] = keys.map((key) => backlog(setup.server.baseURL, key.key, { model: "story", messages: PROMPT, max_tokens: 24, temperature: 0 }, 6));
  try {
    const total = () => backlogs.reduce((sum, each) => sum + each.done.length, 0);
    await until(() => total() >= 12, 60_000, "a warm-up");
    const before = backlogs.map((each) => each.tokens());
    const counted = total();
    await until(() => total() >= counted + 128, 120_000, "128 more requests");
    const gained = backlogs.map((each, index) => each.tokens() - before[index]!);
    const sum = gained.reduce((a, b) => a + b, 0);
    return gained.map((value) => value / sum);
  } finally {
    await Promise.all(backlogs.map((each) => each.stop()));
  }
}

function assertWeighted(result: number[]): void {
  const [heavy, ...basics] = result;
  assert.ok(Math.abs(heavy! - 0.4) <= 0.04, `weight 2 got ${(heavy! * 100).toFixed(1)}% (want 40 ± 4): ${JSON.stringify(result)}`);
  for (const share of basics) assert.ok(Math.abs(share - 0.2) <= 0.02, `weight 1 got ${(share * 100).toFixed(1)}% (want 20 ± 2): ${JSON.stringify(result)}`);
}

for (const kind of ["embedded", "llama-server"] as const) {
  const skip = kind === "llama-server" ? skipWithoutLlamaServer() : false;
  describe(`fair share between accounts (${kind}, 2 slots)`, { skip, timeout: 600_000 }, () => {
    let setup: Setup | undefined;
    before(async () => {
      setup = await start(kind);
    });
    after(async () => {
      await stop(setup);
    });

    it("serves an account's single request next, not behind another account's 40 queued, and never starves the flooder", async () => {
      assertNotBehindTheBacklog(await floodedProbe(setup!));
      // Every wait is in /metrics, by tier and how it ended.
      const metrics = await (await fetch(`${setup!.server.url}/metrics`)).text();
      const served = /turnpike_queue_wait_seconds_count\{model="story",tier="default",outcome="served"\} (\d+)/.exec(metrics);
      assert.ok(served !== null && Number(served[1]) >= 40, `waits counted: ${served?.[1]}`);
      assert.match(metrics, /turnpike_queue_account_share\{model="story",account="[^"]+"\} 0\.\d+/);
    });

    it("shares generated tokens 40/20/20/20 between backlogged accounts of weights 2:1:1:1", async () => {
      assertWeighted(await shares(setup!, ["heavy", "basic", "basic", "basic"]));
    });

    it("shares them evenly between accounts of equal weight (Jain's index ≥ 0.95)", async () => {
      const result = await shares(setup!, ["basic", "basic", "basic", "basic"]);
      assert.ok(jainIndex(result) >= 0.95, `Jain's index ${jainIndex(result).toFixed(3)} of ${JSON.stringify(result)}`);
    });

    it("refuses flex with 429 and a retry-after under saturation, serves it when idle, and lets priority jump the queue", async () => {
      const a = await meteredKey(setup!.database, "basic");
      const c = await meteredKey(setup!.database, "basic");
      const flood = backlog(setup!.server.baseURL, a.key, { model: "story", messages: PROMPT, max_tokens: 48, temperature: 0 }, 10);
      try {
        await until(() => waiting(setup!) >= 6, 60_000, "A's backlog");
        const flex = await streamOnce(setup!.server.baseURL, c.key, { model: "story", messages: PROMPT, max_tokens: 4, service_tier: "flex" });
        assert.equal(flex.status, 429, JSON.stringify(flex));
        assert.equal(flex.error?.code, "resource_unavailable");
        assert.ok(Number(flex.retryAfter) >= 1, `retry-after ${flex.retryAfter}`);
        const urgent = await streamOnce(setup!.server.baseURL, c.key, { model: "story", messages: PROMPT, max_tokens: 4, service_tier: "priority" });
        assert.equal(urgent.status, 200, JSON.stringify(urgent.error));
        assert.deepEqual(urgent.queued.slice(0, 1), [1], "priority went to the head of the queue");
        assert.equal(urgent.serviceTier, "priority");
      } finally {
        await flood.stop();
      }
      await until(() => waiting(setup!) === 0, 30_000, "an idle model");
      const idle = await streamOnce(setup!.server.baseURL, c.key, { model: "story", messages: PROMPT, max_tokens: 4, service_tier: "flex" });
      assert.equal(idle.status, 200, JSON.stringify(idle.error));
      assert.equal(idle.serviceTier, "flex");
    });
  });
}
