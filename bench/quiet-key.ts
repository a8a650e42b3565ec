/**
 * What a quiet key pays on PostgreSQL, with and without the change feed (`--change-feed`), and how
 * soon a revocation reaches a node. Two Turnpike nodes in this process on one fresh schema (rate
 * limits in memory, the tiny story model, 1 token a request), one listening to the change feed
 * and one not; each has an account key (metered: a standing lease serves it once it comes back)
 * and an operator key. Every `--interval` seconds, longer than the 1 s that keys are otherwise
 * cached, each key sends one 1-token chat completion (the order alternates), so without the feed
 * every request reads its key again. Then each node's account key is revoked by another
 * connection (as the CLI or another node would), while its node is asked every 2 ms: the time
 * until the first 401.
 *
 *   node bench/quiet-key.ts [--requests 30] [--interval 1.5] [--postgres postgres://…]
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { setTimeout as delay } from "node:timers/promises";
import OpenAI from "openai";
import { openStore } from "../src/store/open.ts";
import { createAccount } from "../src/accounts/accounts.ts";
import { createApiKey, revokeApiKey } from "../src/auth/api-keys.ts";
import { grantPlan } from "../src/billing/grant-plan.ts";
import { findPlan } from "../src/billing/plans-store.ts";
import { loadSettings } from "../src/config/load.ts";
import { createLogger, startServer, type RunningServer } from "../src/main.ts";
import { postgresSchema } from "./gateway/turnpike.ts";

const benchDir = path.dirname(fileURLToPath(import.meta.url));
const { values: flags } = parseArgs({
  options: {
    requests: { type: "string", default: "30" },
    interval: { type: "string", default: "1.5" },
    postgres: { type: "string", default: process.env.TURNPIKE_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test" },
    model: { type: "string", default: path.resolve(benchDir, "../../shared/models/stories260K.gguf") },
    out: { type: "string", default: path.join(benchDir, "results", "quiet-key.json") },
  },
});
const REQUESTS = Number(flags.requests);
const INTERVAL_MS = Number(flags.interval) * 1000;

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor((values.length - 1) / 2)]!;
const percentile = (values: number[], p: number) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(values.length * p))]!;

const schema = await postgresSchema(flags.postgres);
const databaseUrl = schema.url;
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-quiet-key-"));
const configFile = path.join(dataDir, "bench.json");
fs.writeFileSync(
  configFile,
  JSON.stringify({
    models: [{ id: "story", path: flags.model, pricing: { prompt: 1000, cached_prompt: 500, completion: 2000 } }],
    plans: [{ id: "bench", name: "Bench", price: { amount: 0, currency: "usd" }, credit: 1_000_000_000_000, rpm: 1_000_000, tpm: 100_000_000 }],
  }),
);
const database = await openStore({ dataDir, databaseUrl });
const nodes: Array<{ name: "feed" | "no feed"; server: RunningServer }> = [];
try {
  for (const [name, feed] of [["feed", "true"], ["no feed", "false"]] as const) {
    const settings = loadSettings({
      flags: { port: "0", threads: "1", gpu: "cpu", parallel: "1", data_dir: fs.mkdtempSync(path.join(dataDir, "node-")), log_level: "warn", database_url: databaseUrl, change_feed: feed },
      env: {},
      configFile,
    });
    const server = await startServer(settings, createLogger("warn"));
    await server.modelsSettled;
    nodes.push({ name, server });
  }
  const plan = (await findPlan(database, "bench"))!;
  const sides = [];
  for (const node of nodes) {
    const account = await createAccount(database, { email: `quiet-${randomBytes(4).toString("hex")}@example.com` });
    await grantPlan(database, { accountId: account.id, plan, source: `bench:${account.id}` });
    const metered = await createApiKey(database, { name: "metered", accountId: account.id, rpm: 1_000_000, tpm: 100_000_000 });
    const operator = await createApiKey(database, { name: "operator" });
    for (const [kind, key] of [["account key", metered], ["operator key", operator]] as const) {
      sides.push({ node: node.name, kind, key, server: node.server, client: new OpenAI({ baseURL: `${node.server.url}/v1`, apiKey: key.key, maxRetries: 0 }), latencies: [] as number[] });
    }
  }
  const body = { model: "story", messages: [{ role: "user" as const, content: "Hi" }], max_tokens: 1, temperature: 0 };
  process.stderr.write(`quiet keys: ${REQUESTS} requests each, one every ${INTERVAL_MS / 1000} s (about ${Math.round((REQUESTS * INTERVAL_MS) / 1000)} s)…\n`);
  // Two warm-up rounds (the engines' first decodes, the standing leases' first takes).
  for (let round = -2; round < REQUESTS; round++) {
    const startedRound = performance.now();
    for (const side of round % 2 === 0 ? sides : [...sides].reverse()) {
      const started = performance.now();
      const completion = await side.client.chat.completions.create(body);
      if (completion.usage?.completion_tokens !== 1) throw new Error("expected one token");
      if (round >= 0) side.latencies.push(performance.now() - started);
    }
    await delay(Math.max(0, INTERVAL_MS - (performance.now() - startedRound)));
  }
  const rows = sides.map((side) => ({ node: side.node, kind: side.kind, p50Ms: median(side.latencies), p99Ms: percentile(side.latencies, 0.99) }));
  console.log(`\n## A quiet key on PostgreSQL (one request every ${INTERVAL_MS / 1000} s), 1-token chat completion, median (p99) ms`);
  for (const kind of ["account key", "operator key"] as const) {
    const feed = rows.find((row) => row.kind === kind && row.node === "feed")!;
    const none = rows.find((row) => row.kind === kind && row.node === "no feed")!;
    console.log(`- ${kind}: with the change feed ${feed.p50Ms.toFixed(2)} (${feed.p99Ms.toFixed(2)}), without ${none.p50Ms.toFixed(2)} (${none.p99Ms.toFixed(2)}): ${(feed.p50Ms - none.p50Ms).toFixed(2)} ms`);
  }
  // Revocation: each node's account key, revoked by another connection while the node is asked every 2 ms.
  const revocations: Array<{ node: string; refusedAfterMs: number }> = [];
  for (const side of sides.filter((candidate) => candidate.kind === "account key")) {
    // Busy first, so the node's cache holds the key as a busy node's does.
    for (let index = 0; index < 20; index++) await fetch(`${side.server.url}/v1/models`, { headers: { authorization: `Bearer ${side.key.key}` } });
    const revokedAt = performance.now();
    await revokeApiKey(database, side.key.id);
    let refusedAfterMs = Infinity;
    while (performance.now() - revokedAt < 5_000) {
      const status = (await fetch(`${side.server.url}/v1/models`, { headers: { authorization: `Bearer ${side.key.key}` } })).status;
      if (status === 401) {
        refusedAfterMs = performance.now() - revokedAt;
        break;
      }
      await delay(2);
    }
    revocations.push({ node: side.node, refusedAfterMs });
    console.log(`- revoked by another connection: ${side.node === "feed" ? "the node with the feed" : "the node without it"} refused the key ${refusedAfterMs.toFixed(0)} ms after the revocation began`);
  }
  fs.mkdirSync(path.dirname(flags.out), { recursive: true });
  fs.writeFileSync(flags.out, JSON.stringify({ when: new Date().toISOString(), requests: REQUESTS, intervalMs: INTERVAL_MS, rows, revocations }, null, 2));
  console.log(`\nwrote ${flags.out}`);
} finally {
  for (const node of nodes) await node.server.close();
  await database.destroy();
  await schema.cleanup();
  fs.rmSync(dataDir, { recursive: true, force: true });
}
