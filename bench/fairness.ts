/**
 * Fair share between accounts on a saturated model, as figures: the fair queue (`--queue-policy
 * fair`, the default) against plain FIFO (`--queue-policy fifo`, every queue before it) in the same
 * run, on the embedded engine (stories260K, 2 slots, 1 thread) and on a pool of one real
 * llama-server (2 slots, 1 thread), Turnpike in this process, real HTTP.
 *
 * Per engine and policy:
 * - **alone**: account B sends `--probes` short requests (4 tokens), one every 0.5 s, on an idle
 *   model: its wait (time to the first streamed chunk) p50/p95, the baseline;
 * - **flooded**: account A keeps 42 requests open (2 running, 40 queued, 48 tokens each) while B
 *   probes again: B's wait p50/p95, and the position the queue first gave it (`: queued N`);
 * - **shares**: four backlogged accounts of plan weights 2:1:1:1 (6 requests open each, 24 tokens
 *   each, greedy) until `--requests` requests finished after a warm-up: each one's share of the
 *   generated tokens, Jain's index of the three of weight 1, and the throughput (generated
 *   tokens/s), in `--rounds` rounds alternating between the two servers (both up at once, the
 *   first policy swapped each round): medians, and the median of the per-round ratios fair ÷ FIFO;
 * - **solo**: in the same rounds, one account alone with 8 requests open (2 running, 6 waiting):
 *   the throughput fair ÷ FIFO when there is nobody to be fair to.
 * First, what the queue's own work costs per hand-over of a slot (no HTTP, no engine), fair
 * against FIFO. JSON to bench/results/fairness.json.
 *
 *   node bench/fairness.ts [--engines embedded,llama-server] [--probes 12] [--requests 160] [--rounds 5] [--out bench/results/fairness.json]
 */
import fs from "node:fs";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { SlotQueue } from "../src/engines/slot-queue.ts";
import { openStore } from "../src/store/open.ts";
import { backlog, jainIndex, percentile, streamOnce, until, type Backlog } from "../test/helpers/fair-load.ts";
import { findLlamaServer, startLlamaServer, type RunningLlamaServer } from "../test/helpers/llama-server.ts";
import { meteredKey } from "../test/helpers/metered.ts";
import { repoRoot, startTestServer, storiesModel, temporaryDirectory, type TestServer } from "../test/helpers/server.ts";

const { values } = parseArgs({
  options: {
    engines: { type: "string", default: "embedded,llama-server" },
    probes: { type: "string", default: "12" },
    requests: { type: "string", default: "160" },
    rounds: { type: "string", default: "5" },
    out: { type: "string", default: path.join(repoRoot, "bench", "results", "fairness.json") },
  },
});
const PROBES = Number(values.probes);
const REQUESTS = Number(values.requests);
const ROUNDS = Number(values.rounds);
const PROMPT = [{ role: "user", content: "Once upon a time" }];
const TIERS = { default: 1, flex: 0.5, priority: 2 };
const PLANS = [
  { id: "basic", name: "Basic", price: { amount: 100, currency: "usd" }, credit: 1_000_000_000, weight: 1, service_tiers: TIERS },
  { id: "heavy", name: "Heavy", price: { amount: 200, currency: "usd" }, credit: 1_000_000_000, weight: 2, service_tiers: TIERS },
];

type Engine = "embedded" | "llama-server";
type Policy = "fair" | "fifo";

async function serve(engine: Engine, policy: Policy, llama: RunningLlamaServer | undefined) {
  const configFile = path.join(temporaryDirectory("turnpike-bench-"), "turnpike.json");
  const model =
    engine === "embedded"
      ? { id: "story", path: storiesModel }
      : { id: "story", upstream: { urls: [`${llama!.url}/v1`], kind: "llama-server", max_in_flight: 2, health_interval: 60 } };
  fs.writeFileSync(configFile, JSON.stringify({ models: [model], plans: PLANS }));
  const server = await startTestServer({ configFile, flags: { parallel: "2", threads: "1", queue_size: "64", queue_per_account: "48", queue_policy: policy, context_size: "512", log_level: "warn" } });
  const database = await openStore({ dataDir: server.dataDir, databaseUrl: "" });
  return { server, database };
}

function waiting(server: TestServer): number {
  return server.server.catalog.get("story")!.engine.members().reduce((sum, member) => sum + member.waiting, 0);
}

async function probe(server: TestServer, key: string) {
  const waits: number[] = [];
  const positions: number[] = [];
  for (let index = 0; index < PROBES; index++) {
    const outcome = await streamOnce(server.baseURL, key, { model: "story", messages: PROMPT, max_tokens: 4, temperature: 0 });
    if (outcome.status !== 200 || outcome.firstDataMs === undefined) throw new Error(`probe refused: ${JSON.stringify(outcome.error)}`);
    waits.push(outcome.firstDataMs);
    if (outcome.queued.length > 0) positions.push(outcome.queued[0]!);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  return { p50: percentile(waits, 50), p95: percentile(waits, 95), positions };
}

/** Four backlogged accounts (weights 2:1:1:1), 6 requests open each, until `REQUESTS` finished after a warm-up: token shares and tokens/s. */
async function shares(server: TestServer, database: Awaited<ReturnType<typeof serve>>["database"], plans: readonly string[] = ["heavy", "basic", "basic", "basic"], inFlight = 6) {
  const keys = await Promise.all(plans.map((plan) => meteredKey(database, plan)));
  const backlogs: Backlog[] = keys.map((key) => backlog(server.baseURL, key.key, { model: "story", messages: PROMPT, max_tokens: 24, temperature: 0 }, inFlight));
  try {
    const total = () => backlogs.reduce((sum, each) => sum + each.done.length, 0);
    await until(() => total() >= 16, 60_000, "a warm-up");
    const startTokens = backlogs.map((each) => each.tokens());
    const startedAt = performance.now();
    const counted = total();
    await until(() => total() >= counted + REQUESTS, 300_000, `${REQUESTS} requests`);
    const seconds = (performance.now() - startedAt) / 1000;
    const gained = backlogs.map((each, index) => each.tokens() - startTokens[index]!);
    const sum = gained.reduce((x, y) => x + y, 0);
    return { shares: gained.map((value) => value / sum), tokensPerSecond: sum / seconds };
  } finally {
    await Promise.all(backlogs.map((each) => each.stop()));
  }
}

/** B alone, then B behind A's flood, on one server. */
async function waits(server: TestServer, database: Awaited<ReturnType<typeof serve>>["database"]) {
  const b = await meteredKey(database, "basic");
  const alone = await probe(server, b.key);
  const a = await meteredKey(database, "basic");
  const flood = backlog(server.baseURL, a.key, { model: "story", messages: PROMPT, max_tokens: 48, temperature: 0 }, 42);
  try {
    await until(() => waiting(server) >= 40 && flood.done.length >= 4, 60_000, "A's backlog");
    const before = flood.done.length;
    const flooded = await probe(server, b.key);
    const floodingAccountP50WaitMs = percentile(flood.done.slice(before).map((outcome) => outcome.firstDataMs ?? NaN), 50);
    return { alone, flooded, floodingAccountP50WaitMs };
  } finally {
    await flood.stop();
    await until(() => waiting(server) === 0, 30_000, "an idle model");
  }
}

const median = (values: readonly number[]) => percentile(values, 50);

async function run(engine: Engine, llama: RunningLlamaServer | undefined) {
  const servers = { fifo: await serve(engine, "fifo", llama), fair: await serve(engine, "fair", llama) };
  try {
    type Rounds = Array<Awaited<ReturnType<typeof shares>>>;
    const out: Record<Policy, { waits?: Awaited<ReturnType<typeof waits>>; rounds: Rounds; solo: Rounds }> = { fifo: { rounds: [], solo: [] }, fair: { rounds: [], solo: [] } };
    for (const policy of ["fifo", "fair"] as const) out[policy].waits = await waits(servers[policy].server, servers[policy].database);
    // Throughput in alternating rounds (the first policy swaps each round), so drift in the machine's load falls on both.
    for (let round = 0; round < ROUNDS; round++) {
      const order: Policy[] = round % 2 === 0 ? ["fifo", "fair"] : ["fair", "fifo"];
      for (const policy of order) out[policy].rounds.push(await shares(servers[policy].server, servers[policy].database));
      // One account alone, 8 requests open (2 running, 6 waiting): what fairness may not cost.
      for (const policy of order) out[policy].solo.push(await shares(servers[policy].server, servers[policy].database, ["basic"], 8));
    }
    const ratios = out.fair.rounds.map((fair, index) => fair.tokensPerSecond / out.fifo.rounds[index]!.tokensPerSecond);
    const soloRatios = out.fair.solo.map((fair, index) => fair.tokensPerSecond / out.fifo.solo[index]!.tokensPerSecond);
    return {
      engine,
      fifo: { ...out.fifo.waits!, tokensPerSecond: median(out.fifo.rounds.map((each) => each.tokensPerSecond)), shares: out.fifo.rounds.at(-1)!.shares },
      fair: { ...out.fair.waits!, tokensPerSecond: median(out.fair.rounds.map((each) => each.tokensPerSecond)), shares: out.fair.rounds.at(-1)!.shares, jain: jainIndex(out.fair.rounds.at(-1)!.shares.slice(1)) },
      throughputRatio: median(ratios),
      ratios,
      soloTokensPerSecond: { fifo: median(out.fifo.solo.map((each) => each.tokensPerSecond)), fair: median(out.fair.solo.map((each) => each.tokensPerSecond)) },
      soloRatio: median(soloRatios),
      soloRatios,
    };
  } finally {
    for (const { server, database } of Object.values(servers)) {
      await database.destroy();
      await server.close();
    }
  }
}

/**
 * What the queue's own work costs, without HTTP or an engine: a slot queue of 2 slots with 24
 * requests of 4 accounts waiting, every release handing the slot to the next (its account charged
 * 25 tokens): microseconds per hand-over, fair against FIFO, the median of 5 runs of 50,000.
 */
async function queueCost(policy: Policy): Promise<number> {
  const runs: number[] = [];
  for (let run = 0; run < 5; run++) {
    const queue = new SlotQueue(["s0", "s1"], 64, { policy });
    const served = new Map<string, number>();
    const never = new AbortController().signal;
    let handed = 0;
    let finish: () => void = () => {};
    const finished = new Promise<void>((resolve) => (finish = resolve));
    const ask = (account: string, weight: number): void => {
      const waiting = queue.acquire(never, undefined, { ticket: { account, weight, tier: "default" }, served: () => served.get(account) ?? 0 });
      void waiting.then((lease) => {
        served.set(account, (served.get(account) ?? 0) + 25);
        if (++handed === 50_000) finish();
        queueMicrotask(() => {
          lease.release();
          if (handed < 50_000) ask(account, weight);
        });
      });
    };
    const started = performance.now();
    for (let index = 0; index < 26; index++) ask(`account-${index % 4}`, index % 4 === 0 ? 2 : 1);
    await finished;
    runs.push(((performance.now() - started) * 1000) / handed);
  }
  return percentile(runs, 50);
}

const costs = { fifo: await queueCost("fifo"), fair: await queueCost("fair") };
console.log(`queue hand-over (2 slots, 24 waiting, 4 accounts): FIFO ${costs.fifo.toFixed(2)} µs, fair ${costs.fair.toFixed(2)} µs`);

const results = [];
// `--engines none`: the queue's cost alone.
for (const engine of values.engines!.split(",").filter((name): name is Engine => name === "embedded" || name === "llama-server")) {
  let llama: RunningLlamaServer | undefined;
  if (engine === "llama-server") {
    if (findLlamaServer() === undefined) {
      console.log("llama-server is not built (scripts/build-llama-server.sh): skipping its pool");
      continue;
    }
    llama = await startLlamaServer({ model: storiesModel, parallel: 2, contextSize: 2048 });
  }
  try {
    const result = await run(engine, llama);
    results.push(result);
    const pct = (value: number) => `${(value * 100).toFixed(1)}%`;
    for (const policy of ["fifo", "fair"] as const) {
      const side = result[policy];
      console.log(
        `${engine.padEnd(12)} ${policy.padEnd(4)}  B alone p50/p95 ${side.alone.p50.toFixed(0)}/${side.alone.p95.toFixed(0)} ms` +
          `  B flooded p50/p95 ${side.flooded.p50.toFixed(0)}/${side.flooded.p95.toFixed(0)} ms (first positions ${[...new Set(side.flooded.positions)].join(",")}; A's p50 wait ${side.floodingAccountP50WaitMs.toFixed(0)} ms)` +
          `  shares 2:1:1:1 ${side.shares.map(pct).join("/")}  ${side.tokensPerSecond.toFixed(0)} tokens/s (median of ${ROUNDS})`,
      );
    }
    console.log(`${engine}: throughput fair ÷ FIFO, four accounts ${result.throughputRatio.toFixed(3)} (per round ${result.ratios.map((ratio) => ratio.toFixed(3)).join(", ")})`);
    console.log(`${engine}: throughput fair ÷ FIFO, one account alone ${result.soloRatio.toFixed(3)} (${result.soloTokensPerSecond.fair.toFixed(0)} ÷ ${result.soloTokensPerSecond.fifo.toFixed(0)} tokens/s; per round ${result.soloRatios.map((ratio) => ratio.toFixed(3)).join(", ")})`);
  } finally {
    await llama?.close();
  }
}
fs.mkdirSync(path.dirname(values.out!), { recursive: true });
fs.writeFileSync(values.out!, JSON.stringify({ at: new Date().toISOString(), probes: PROBES, requests: REQUESTS, rounds: ROUNDS, queueCostMicroseconds: costs, results }, null, 2));
console.log(`written to ${values.out}`);
process.exit(0);
