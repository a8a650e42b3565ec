/**
 * What a `kill -9` costs the books, at 10, 30 and 60 requests a second on one hot key
 * (PostgreSQL): open-loop streamed requests through an upstream that streams at its own pace
 * (one token every `--pace` ms, 50–150 tokens a request), then the node is killed mid-load,
 * restarted, and its holds swept. Reported per rate:
 * - checkpoint lag: for each stream the kill cut, tokens its client received less tokens billed
 *   (p50, p99, max; a stream with no record counts all it received);
 * - records lost: requests whose client got `[DONE]` and that have no usage record;
 * - the wait before `[DONE]` (last chunk → `[DONE]`, p50/p99 ms): what writing the record first costs;
 * - requests refused with 503 `metering_behind`.
 * Optionally with `--cpu-hogs N` busy loops saturating the machine meanwhile.
 *
 *   node_modules/.bin/node bench/checkpoint-lag.ts [--rates 10,30,60] [--seconds 4] [--pace 10] [--cpu-hogs 0]
 *     [--postgres postgres://postgres@127.0.0.1:5432/test] [--out bench/results/checkpoint-lag.json]
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Worker } from "node:worker_threads";
import { setTimeout as delay } from "node:timers/promises";
import pg from "pg";
import { openStore } from "../src/store/open.ts";
import { pacedUpstream, send, type Seen } from "../test/helpers/crash-streams.ts";
import { runCli, startServeProcess } from "../test/helpers/process.ts";

const benchDir = path.dirname(fileURLToPath(import.meta.url));
const { values: flags } = parseArgs({
  options: {
    rates: { type: "string", default: "10,30,60" },
    seconds: { type: "string", default: "4" },
    pace: { type: "string", default: "10" },
    "cpu-hogs": { type: "string", default: "0" },
    postgres: { type: "string", default: process.env.TURNPIKE_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test" },
    out: { type: "string", default: path.join(benchDir, "results", "checkpoint-lag.json") },
  },
});
const rates = flags.rates.split(",").map(Number);
const SECONDS = Number(flags.seconds);
const PACE_MS = Number(flags.pace);
const pricing = { prompt: 1_000_000, cached_prompt: 1_000_000, completion: 1_000_000 };

function percentile(values: readonly number[], fraction: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(fraction * sorted.length) - 1)]!;
}

async function freshSchema(): Promise<{ url: string; drop: () => Promise<void> }> {
  const schema = `bench_lag_${Date.now()}_${Math.floor(Math.random() * 1e6)}`;
  const admin = new pg.Client({ connectionString: flags.postgres });
  await admin.connect();
  await admin.query(`CREATE SCHEMA ${schema}`);
  await admin.end();
  const url = `${flags.postgres}${flags.postgres.includes("?") ? "&" : "?"}options=${encodeURIComponent(`-c search_path=${schema}`)}`;
  return {
    url,
    drop: async () => {
      const client = new pg.Client({ connectionString: flags.postgres });
      await client.connect();
      await client.query(`DROP SCHEMA ${schema} CASCADE`);
      await client.end();
    },
  };
}

type Result = {
  rate: number;
  requests: number;
  cut: number;
  lagP50: number;
  lagP99: number;
  lagMax: number;
  done: number;
  lost: number;
  doneWaitP50Ms: number;
  doneWaitP99Ms: number;
  shed: number;
};

async function measure(rate: number, upstreamUrl: string): Promise<Result> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-lag-"));
  const database = await freshSchema();
  try {
    const configFile = path.join(dataDir, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [{ id: "paced", context_length: 16384, pricing, upstream: { kind: "openai", urls: [upstreamUrl], health_interval: 60 } }],
        plans: [{ id: "big", name: "Big", price: { amount: 100, currency: "usd" }, credit: 1_000_000_000 }],
      }),
    );
    const serve = ["--config", configFile, "--data-dir", dataDir, "--database-url", database.url];
    const node = await startServeProcess(serve);
    const cli = async (args: string[]) => (await runCli([...args, "--data-dir", dataDir, "--database-url", database.url])).stdout;
    const email = `lag-${rate}@example.com`;
    await cli(["accounts", "create", "--email", email, "--json"]);
    await cli(["plans", "grant", "--account", email, "--plan", "big", "--config", configFile]);
    const key = (JSON.parse(await cli(["keys", "create", "--account", email, "--json"])) as { key: string }).key;

    // Open loop: a request every 1/rate s, whatever the answers do.
    const seen: Seen[] = [];
    const started = performance.now();
    const sending: Promise<void>[] = [];
    for (let index = 0; performance.now() - started < SECONDS * 1000; index++) {
      const due = started + (index * 1000) / rate;
      const wait = due - performance.now();
      if (wait > 0) await delay(wait);
      const tokens = 50 + Math.floor(Math.random() * 101);
      sending.push(send(node.url, key, "paced", tokens, index).then((one) => void seen.push(one), () => undefined));
    }
    await node.stop("SIGKILL");
    await Promise.all(sending);
    await Promise.all(seen.map((one) => one.ended));
    const second = await startServeProcess(serve);
    await second.stop();

    const store = await openStore({ dataDir, databaseUrl: database.url });
    try {
      const records = await store.selectFrom("usage_records").select(["request_id", "completion_tokens"]).execute();
      const billed = new Map(records.map((record) => [record.request_id, Number(record.completion_tokens)]));
      const answered = seen.filter((one) => one.status === 200);
      const cut = answered.filter((one) => !one.done);
      const lags = cut.map((one) => one.delivered - (billed.get(one.requestId) ?? 0));
      const done = answered.filter((one) => one.done);
      const waits = done.flatMap((one) => (one.doneAt !== undefined && one.lastChunkAt !== undefined ? [one.doneAt - one.lastChunkAt] : []));
      return {
        rate,
        requests: seen.length,
        cut: cut.length,
        lagP50: percentile(lags, 0.5),
        lagP99: percentile(lags, 0.99),
        lagMax: Math.max(0, ...lags),
        done: done.length,
        lost: done.filter((one) => !billed.has(one.requestId)).length,
        doneWaitP50Ms: Math.round(percentile(waits, 0.5) * 10) / 10,
        doneWaitP99Ms: Math.round(percentile(waits, 0.99) * 10) / 10,
        shed: seen.filter((one) => one.code === "metering_behind").length,
      };
    } finally {
      await store.destroy();
    }
  } finally {
    await database.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

const hogs = Array.from({ length: Number(flags["cpu-hogs"]) }, () => new Worker("for (;;) {}", { eval: true }));
const upstream = await pacedUpstream(PACE_MS);
const results: Result[] = [];
try {
  for (const rate of rates) {
    const result = await measure(rate, upstream.baseUrl);
    results.push(result);
    console.log(
      `${rate} req/s: ${result.requests} requests; ${result.cut} cut by the kill, billed behind what they delivered by p50 ${result.lagP50}, p99 ${result.lagP99}, max ${result.lagMax} tokens; ` +
        `${result.lost} of ${result.done} with [DONE] unrecorded; [DONE] waited p50 ${result.doneWaitP50Ms} ms, p99 ${result.doneWaitP99Ms} ms; ${result.shed} shed`,
    );
  }
} finally {
  await upstream.close();
  for (const hog of hogs) await hog.terminate();
}
fs.mkdirSync(path.dirname(flags.out), { recursive: true });
fs.writeFileSync(flags.out, JSON.stringify({ date: new Date().toISOString(), cpus: os.cpus().length, cpuHogs: hogs.length, paceMs: PACE_MS, seconds: SECONDS, results }, null, 2) + "\n");
