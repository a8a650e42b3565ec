/**
 * Metering costs, measured three ways on SQLite and on PostgreSQL (+ Redis for limits):
 *
 * 1. Ledger throughput: hold + settle pairs per second (each settle writes its usage record in
 *    the same transaction, as the server does), one worker, 8 workers on 8 accounts, and 8
 *    workers on one account (every pair contends for the same balance row); on PostgreSQL also
 *    two nodes (two connection pools) with 8 workers each on one account.
 * 2. The admission steps alone, per request: key lookup (auth), plan lookup, rate limits
 *    (consume + refund), hold + settle.
 * 3. End to end over HTTP: the same 1-token chat completion with an operator key (metering off:
 *    no hold, no limits) and with an account key on a plan with RPM/TPM limits (metering on),
 *    alternating, in one process. The difference of the medians is what metering adds. Three
 *    times: as served by default (the metered key, busy, draws on a credit lease); with every key
 *    quiet (`--lease-above` out of reach), where a key that comes back is served from a standing
 *    lease; and quiet with standing leases off (`--standing-lease-idle 0`: a hold of its own per
 *    request, what a key's first request after a quiet spell pays).
 *
 *   node_modules/.bin/node bench/ledger.ts [--pairs 1000] [--requests 200] [--backends sqlite,postgres]
 *     [--postgres postgres://postgres@127.0.0.1:5432/test] [--redis redis://127.0.0.1:6379]
 *     [--out bench/results/ledger.json]
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import OpenAI from "openai";
import pg from "pg";
import type { Kysely } from "kysely";
import { randomBytes } from "node:crypto";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { createAccount } from "../src/accounts/accounts.ts";
import { createApiKey, verifyApiKey } from "../src/auth/api-keys.ts";
import { checkLedger, grantCredit, placeHold, settleHold } from "../src/billing/ledger.ts";
import type { CatalogModel } from "../src/catalog/catalog.ts";
import { Metering } from "../src/billing/metering.ts";
import { grantPlan } from "../src/billing/grant-plan.ts";
import { findPlan } from "../src/billing/plans-store.ts";
import { createRateLimiter } from "../src/limits/index.ts";
import { RequestLimits } from "../src/limits/request-limits.ts";
import { loadSettings } from "../src/config/load.ts";
import { createLogger, startServer } from "../src/main.ts";

const benchDir = path.dirname(fileURLToPath(import.meta.url));
const { values: flags } = parseArgs({
  options: {
    pairs: { type: "string", default: "1000" },
    requests: { type: "string", default: "200" },
    backends: { type: "string", default: "sqlite,postgres" },
    postgres: { type: "string", default: process.env.TURNPIKE_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test" },
    redis: { type: "string", default: process.env.TURNPIKE_TEST_REDIS_URL ?? "redis://127.0.0.1:6379" },
    model: { type: "string", default: path.resolve(benchDir, "../../shared/models/stories260K.gguf") },
    out: { type: "string", default: path.join(benchDir, "results", "ledger.json") },
  },
});
const PAIRS = Number(flags.pairs);
const REQUESTS = Number(flags.requests);
const backends = flags.backends.split(",") as Array<"sqlite" | "postgres">;

type Backend = { name: "sqlite" | "postgres"; databaseUrl: string; dataDir: string; cleanup: () => Promise<void> };

async function prepareBackend(name: "sqlite" | "postgres"): Promise<Backend> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-bench-"));
  if (name === "sqlite") return { name, databaseUrl: "", dataDir, cleanup: async () => fs.rmSync(dataDir, { recursive: true, force: true }) };
  const schema = `turnpike_bench_${randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: flags.postgres });
  await admin.connect();
  await admin.query(`CREATE SCHEMA ${schema}`);
  await admin.end();
  const databaseUrl = `${flags.postgres}${flags.postgres.includes("?") ? "&" : "?"}options=${encodeURIComponent(`-c search_path=${schema}`)}`;
  return {
    name,
    databaseUrl,
    dataDir,
    cleanup: async () => {
      const client = new pg.Client({ connectionString: flags.postgres });
      await client.connect();
      await client.query(`DROP SCHEMA ${schema} CASCADE`);
      await client.end();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length === 0 ? NaN : sorted[Math.floor((sorted.length - 1) / 2)]!;
};
const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
};

async function holdAndSettle(database: Kysely<Database>, accountId: string, keyId: string, index: number): Promise<number> {
  const started = performance.now();
  const holdId = await placeHold(database, { accountId, keyId, amount: 100, nodeId: "bench", ttlMs: 60_000 });
  await settleHold(database, holdId, 37, Date.now(), (charged) => ({
    request_id: `bench_${index}`,
    account_id: accountId,
    key_id: keyId,
    model: "bench",
    prompt_tokens: 10,
    cached_prompt_tokens: 0,
    completion_tokens: 13,
    cost: charged,
    latency_ms: 1,
    status: 200,
    finish_reason: "stop",
    stream: 0,
    created_at: Date.now(),
  }));
  return performance.now() - started;
}

/**
 * The metered path as the server runs it, without HTTP: `Metering.admit` then `settle`, each node
 * (a Metering with its own connection pool) serving its 8 workers from credit leases. Timed until
 * every usage record is written and every lease closed, then the books are checked.
 */
async function leasedThroughput(backend: Backend) {
  const nodes = await Promise.all(
    Array.from({ length: backend.name === "postgres" ? 2 : 1 }, () => openStore({ dataDir: backend.dataDir, databaseUrl: backend.databaseUrl })),
  );
  const results: Record<string, { pairsPerSecond: number; p50Ms: number; p99Ms: number }> = {};
  const model = { id: "bench", pricing: { prompt: 1000, cachedPrompt: 500, completion: 2000 } } as unknown as CatalogModel;
  try {
    const database = nodes[0]!;
    const scenarios: Array<[string, number]> = [["leases: 8 workers, 1 account", 1]];
    if (nodes.length === 2) scenarios.push(["leases: 2 nodes × 8 workers, 1 account", 2]);
    for (const [label, nodeCount] of scenarios) {
      const account = await createAccount(database, { email: `lease-${Math.random()}@example.com` });
      const granted = 1e12;
      await grantCredit(database, { accountId: account.id, amount: granted, source: `bench:${account.id}` });
      const created = await createApiKey(database, { accountId: account.id });
      const verified = await verifyApiKey(database, created.key);
      if (!verified.ok) throw new Error("key refused");
      const meterings = nodes.slice(0, nodeCount).map((node, index) => new Metering({ database: node, nodeId: () => `bench-${index}`, holdTtlMs: 60_000 }));
      const pair = async (metering: Metering, index: number) => {
        const started = performance.now();
        const admission = await metering.admit({ key: verified.key, plan: null, model, promptTokens: 10, maxTokens: 16, choices: 1, requestId: `lease_${index}`, stream: false });
        await admission.settle({ usage: { promptTokens: 10, cachedPromptTokens: 0, completionTokens: 13, reasoningTokens: 0, source: "counted" }, status: 200, finishReason: "stop", latencyMs: 1 });
        return performance.now() - started;
      };
      const latencies: number[] = [];
      let next = 0;
      const started = performance.now();
      await Promise.all(
        Array.from({ length: 8 * nodeCount }, async (_unused, worker) => {
          const metering = meterings[worker % nodeCount]!;
          while (next < PAIRS * 4) {
            const index = next++;
            latencies.push(await pair(metering, index));
          }
        }),
      );
      // Durable: every record written, every lease closed.
      for (const metering of meterings) await metering.drain();
      const seconds = (performance.now() - started) / 1000;
      results[label] = { pairsPerSecond: (PAIRS * 4) / seconds, p50Ms: median(latencies), p99Ms: percentile(latencies, 0.99) };
      const books = await checkLedger(database, account.id);
      const usage = await database.selectFrom("usage_records").select((expression) => [expression.fn.countAll<number>().as("count"), expression.fn.sum<number>("cost").as("cost")]).where("key_id", "=", created.id).executeTakeFirstOrThrow();
      const charged = granted - books.balance;
      if (books.balance !== books.sumOfEntries || books.activeHolds !== 0 || Number(usage.count) !== PAIRS * 4 || Number(usage.cost) !== charged) {
        throw new Error(`books do not balance after ${label}: ${JSON.stringify({ books, usage, charged })}`);
      }
    }
  } finally {
    for (const node of nodes) await node.destroy();
  }
  return results;
}

async function ledgerThroughput(backend: Backend) {
  const database = await openStore({ dataDir: backend.dataDir, databaseUrl: backend.databaseUrl });
  const results: Record<string, { pairsPerSecond: number; p50Ms: number; p99Ms: number }> = {};
  let secondNode: Kysely<Database> | undefined;
  try {
    const accounts: Array<{ accountId: string; keyId: string }> = [];
    for (let index = 0; index < 8; index++) {
      const account = await createAccount(database, { email: `bench-${index}-${Math.random()}@example.com` });
      await grantCredit(database, { accountId: account.id, amount: 1e12, source: `bench:${account.id}` });
      const key = await createApiKey(database, { accountId: account.id });
      accounts.push({ accountId: account.id, keyId: key.id });
    }
    // Warm-up.
    for (let index = 0; index < 50; index++) await holdAndSettle(database, accounts[0]!.accountId, accounts[0]!.keyId, index);
    // A second node: its own connection pool on the same database (PostgreSQL only: nodes share
    // a PostgreSQL, never a SQLite file), for one hot account served by two nodes at once.
    secondNode = backend.name === "postgres" ? await openStore({ dataDir: backend.dataDir, databaseUrl: backend.databaseUrl }) : undefined;
    const nodes = secondNode === undefined ? [database] : [database, secondNode];
    const scenarios: Array<[string, number, (worker: number) => { accountId: string; keyId: string }, (worker: number) => Kysely<Database>]> = [
      ["1 worker", 1, () => accounts[0]!, () => database],
      ["8 workers, 8 accounts", 8, (worker) => accounts[worker]!, () => database],
      ["8 workers, 1 account", 8, () => accounts[0]!, () => database],
    ];
    if (secondNode !== undefined) scenarios.push(["2 nodes × 8 workers, 1 account", 16, () => accounts[0]!, (worker) => nodes[worker % 2]!]);
    for (const [label, workers, pick, nodeOf] of scenarios) {
      const latencies: number[] = [];
      let next = 0;
      const started = performance.now();
      await Promise.all(
        Array.from({ length: workers }, async (_unused, worker) => {
          const { accountId, keyId } = pick(worker);
          const node = nodeOf(worker);
          while (next < PAIRS) {
            const index = next++;
            latencies.push(await holdAndSettle(node, accountId, keyId, index));
          }
        }),
      );
      const seconds = (performance.now() - started) / 1000;
      results[label] = { pairsPerSecond: PAIRS / seconds, p50Ms: median(latencies), p99Ms: percentile(latencies, 0.99) };
    }
  } finally {
    await secondNode?.destroy();
    await database.destroy();
  }
  return results;
}

async function admissionSteps(backend: Backend) {
  const database = await openStore({ dataDir: backend.dataDir, databaseUrl: backend.databaseUrl });
  const limits = new RequestLimits(createRateLimiter({ redisUrl: backend.name === "postgres" ? flags.redis : undefined }));
  const metering = new Metering({ database, nodeId: () => "bench", holdTtlMs: 60_000 });
  try {
    await database
      .insertInto("plans")
      .values({ id: "bench", name: "Bench", price_amount: 0, price_currency: "usd", credit: 1e12, days: null, rpm: 1_000_000, tpm: 100_000_000, models: null, origin: "admin", created_at: 0, updated_at: 0 })
      .onConflict((conflict) => conflict.column("id").doNothing())
      .execute();
    const account = await createAccount(database, { email: `steps-${Math.random()}@example.com` });
    await grantPlan(database, { accountId: account.id, plan: (await findPlan(database, "bench"))!, source: `bench:${account.id}` });
    const created = await createApiKey(database, { accountId: account.id, rpm: 1_000_000, tpm: 100_000_000 });
    const steps: Record<string, number[]> = { auth: [], plan: [], limits: [], "hold+settle": [], total: [] };
    for (let index = 0; index < PAIRS / 2; index++) {
      const t0 = performance.now();
      const check = await verifyApiKey(database, created.key);
      if (!check.ok) throw new Error("key refused");
      const t1 = performance.now();
      const plan = await metering.planOf(check.key);
      const t2 = performance.now();
      const limited = await limits.admit({ key: check.key, plan, tokens: 110 });
      await limited.finish(23);
      const t3 = performance.now();
      await holdAndSettle(database, account.id, created.id, index);
      const t4 = performance.now();
      steps.auth!.push(t1 - t0);
      steps.plan!.push(t2 - t1);
      steps.limits!.push(t3 - t2);
      steps["hold+settle"]!.push(t4 - t3);
      steps.total!.push(t4 - t0);
    }
    return Object.fromEntries(Object.entries(steps).map(([step, values]) => [step, { p50Ms: median(values.slice(20)), p99Ms: percentile(values.slice(20), 0.99) }]));
  } finally {
    await limits.close();
    await database.destroy();
  }
}

/**
 * `busy`: the metered key, at one request every few milliseconds, is busy and served from credit
 * leases. `standing`: no key is ever busy (`--lease-above` out of reach), as a key sending fewer
 * than 20 requests a second; the metered key comes back within `--standing-lease-idle` and is
 * served from a standing lease. `own`: quiet, with standing leases off: a hold of its own per
 * request, written before it generates.
 */
async function endToEnd(backend: Backend, kind: "busy" | "standing" | "own") {
  const quiet = kind !== "busy";
  const configFile = path.join(backend.dataDir, "bench.json");
  fs.writeFileSync(
    configFile,
    JSON.stringify({
      models: [{ id: "story", path: flags.model, pricing: { prompt: 1000, cached_prompt: 500, completion: 2000 } }],
      plans: [{ id: "bench", name: "Bench", price: { amount: 0, currency: "usd" }, credit: 1_000_000_000_000, rpm: 1_000_000, tpm: 100_000_000 }],
    }),
  );
  const settings = loadSettings({
    flags: { port: "0", threads: "1", gpu: "cpu", parallel: "1", data_dir: backend.dataDir, log_level: "warn", database_url: backend.databaseUrl, redis_url: backend.name === "postgres" ? flags.redis : "", ...(quiet ? { lease_above: "1000000000" } : {}), ...(kind === "own" ? { standing_lease_idle: "0" } : {}) },
    env: {},
    configFile,
  });
  const database = await openStore({ dataDir: backend.dataDir, databaseUrl: backend.databaseUrl });
  const operatorKey = await createApiKey(database, { name: "operator" });
  const account = await createAccount(database, { email: `e2e-${Math.random()}@example.com` });
  const server = await startServer(settings, createLogger("warn"));
  await server.modelsSettled;
  try {
    await grantPlan(database, { accountId: account.id, plan: (await findPlan(database, "bench"))!, source: `bench:${account.id}` });
    const accountKey = await createApiKey(database, { name: "metered", accountId: account.id, rpm: 1_000_000, tpm: 100_000_000 });
    const clients = {
      off: new OpenAI({ baseURL: `${server.url}/v1`, apiKey: operatorKey.key, maxRetries: 0 }),
      on: new OpenAI({ baseURL: `${server.url}/v1`, apiKey: accountKey.key, maxRetries: 0 }),
    };
    const latencies: Record<"off" | "on", number[]> = { off: [], on: [] };
    const body = { model: "story", messages: [{ role: "user" as const, content: "Hi" }], max_tokens: 1, temperature: 0 };
    for (let round = 0; round < REQUESTS + 20; round++) {
      for (const mode of round % 2 === 0 ? (["off", "on"] as const) : (["on", "off"] as const)) {
        const started = performance.now();
        const completion = await clients[mode].chat.completions.create(body);
        if (completion.usage!.completion_tokens !== 1) throw new Error("expected one token");
        if (round >= 20) latencies[mode].push(performance.now() - started);
      }
    }
    const off = median(latencies.off);
    const on = median(latencies.on);
    return { offMs: off, onMs: on, addedMs: on - off, ratio: on / off, offP99Ms: percentile(latencies.off, 0.99), onP99Ms: percentile(latencies.on, 0.99) };
  } finally {
    await server.close();
    await database.destroy();
  }
}

const report: Record<string, unknown> = { pairs: PAIRS, requests: REQUESTS, cpus: os.availableParallelism(), node: process.version, when: new Date().toISOString() };
for (const name of backends) {
  const backend = await prepareBackend(name);
  try {
    const label = name === "postgres" ? "postgres + redis" : "sqlite + memory limits";
    process.stderr.write(`${label}: ledger throughput…\n`);
    const throughput = { ...(await ledgerThroughput(backend)), ...(await leasedThroughput(backend)) };
    process.stderr.write(`${label}: admission steps…\n`);
    const steps = await admissionSteps(backend);
    process.stderr.write(`${label}: end to end…\n`);
    const e2e = await endToEnd(backend, "busy");
    const standingE2e = await endToEnd(backend, "standing");
    const quietE2e = await endToEnd(backend, "own");
    report[name] = { throughput, steps, e2e, standingE2e, quietE2e };
    console.log(`\n## ${label}`);
    console.log("hold + settle (with usage record), pairs/s  p50 ms  p99 ms   (leases: Metering.admit + settle, timed to the last write)");
    for (const [scenario, result] of Object.entries(throughput)) {
      console.log(`  ${scenario.padEnd(31)} ${result.pairsPerSecond.toFixed(0).padStart(8)} ${result.p50Ms.toFixed(2).padStart(7)} ${result.p99Ms.toFixed(2).padStart(7)}`);
    }
    console.log("admission steps per request, p50 ms  p99 ms");
    for (const [step, result] of Object.entries(steps)) console.log(`  ${step.padEnd(24)} ${result.p50Ms.toFixed(3).padStart(8)} ${result.p99Ms.toFixed(3).padStart(7)}`);
    for (const [which, result] of [["busy key (lease)", e2e], ["quiet key that comes back (standing lease)", standingE2e], ["quiet key (own hold)", quietE2e]] as const) {
      console.log(
        `1-token chat completion over HTTP, ${which}, median: metering off ${result.offMs.toFixed(2)} ms, on ${result.onMs.toFixed(2)} ms → +${result.addedMs.toFixed(2)} ms (ratio ${result.ratio.toFixed(2)})`,
      );
    }
  } finally {
    await backend.cleanup();
  }
}
fs.mkdirSync(path.dirname(flags.out), { recursive: true });
fs.writeFileSync(flags.out, `${JSON.stringify(report, null, 2)}\n`);
console.log(`\nwrote ${flags.out}`);
