/**
 * Hostile input: does a flood of requests that are bound to be refused keep `/health` answering?
 * Starts Turnpike in-process (stories260K, 1 thread, a priced model from a config file) with a
 * key whose account has zero credit (the audit's attacker) and one whose account is funded (whose
 * refusals need the request's validation to run). For each kind of refused request (issue 9 rows 1, 2 and 7,
 * an unknown key, no credit, bad JSON, ...) a child process floods the server from several
 * concurrent clients for a few seconds, while this process probes `/health` every ~10 ms.
 * Prints, per kind: refused requests/s, the statuses seen, `/health` p50/p99/max, and the
 * server's CPU per refused request (this process's `process.cpuUsage`, less the probing's own
 * rate measured in the baseline row, over the refusals). The flood runs in a separate process
 * so its CPU is not counted. Kinds aimed at an upstream model (issue 19 row 2's poison kwargs)
 * go to a model served by the scripted fake upstream of test/helpers/fault-upstream.ts, while a
 * paying client sends it valid requests one after another: its success rate is printed too.
 *
 *   node_modules/.bin/node bench/hostile.ts [--seconds 4] [--concurrency 4] [--kinds a,b,...] [--accounts zero,funded]
 *     [--out bench/results/hostile.json]
 */
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { pino } from "pino";
import { loadSettings } from "../src/config/load.ts";
import { startServer } from "../src/main.ts";
import { openStore } from "../src/store/open.ts";
import { createApiKey } from "../src/auth/api-keys.ts";
import { createAccount } from "../src/accounts/accounts.ts";
import { grantPlan } from "../src/billing/grant-plan.ts";
import { findPlan, syncConfigPlans } from "../src/billing/plans-store.ts";
import { FaultUpstream } from "../test/helpers/fault-upstream.ts";

const benchDir = path.dirname(fileURLToPath(import.meta.url));
const { values: flags } = parseArgs({
  options: {
    seconds: { type: "string", default: "4" },
    concurrency: { type: "string", default: "4" },
    kinds: { type: "string" },
    // Which keys flood: zero (no credit: the audit's attacker), funded (the request is validated), or both.
    accounts: { type: "string", default: "zero,funded" },
    model: { type: "string", default: path.resolve(benchDir, "../../shared/models/stories260K.gguf") },
    out: { type: "string", default: path.join(benchDir, "results", "hostile.json") },
    // Internal: run as the flooding child.
    flood: { type: "string" },
    url: { type: "string" },
    key: { type: "string" },
  },
});

const MODEL = "stories260K";
const valid = { model: MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 4 };
/** A model served by the scripted fake upstream (one member, three attempts a request). */
const UPSTREAM_MODEL = "upstream";
const validUpstream = { ...valid, model: UPSTREAM_MODEL };

/** Issue 19 row 2: `chat_template_kwargs` nested `depth` arrays deep, as JSON text (`JSON.stringify` cannot write it). */
function poisonKwargsBody(depth: number): string {
  return `${JSON.stringify(validUpstream).slice(0, -1)},"chat_template_kwargs":{"enable_thinking":${"[".repeat(depth)}true${"]".repeat(depth)}}}`;
}

/** Issue 9 row 1: `levels` definitions, each an anyOf of `fanOut` references to the next, under a oneOf. */
function chainSchema(fanOut: number, levels: number): Record<string, unknown> {
  const $defs: Record<string, unknown> = {};
  for (let level = 0; level < levels; level++) {
    $defs[`d${level}`] = level === levels - 1 ? { type: "string" } : { anyOf: Array.from({ length: fanOut }, () => ({ $ref: `#/$defs/d${level + 1}` })) };
  }
  return { $defs, type: "object", properties: { x: { oneOf: [{ $ref: "#/$defs/d0" }, { type: "string" }] } } };
}

const schemaFormat = (schema: Record<string, unknown>) => ({ ...valid, response_format: { type: "json_schema", json_schema: { name: "x", schema } } });
const call = (index: number, argumentsText: string) => ({ id: `c${index}`, type: "function", function: { name: "f", arguments: argumentsText } });

/**
 * Each kind of refused request: its body (text), and whether it uses a key that does not exist or
 * is one only a zero-credit key has refused (a funded key's would be served, or refused the same way).
 */
const KINDS: Record<string, { body: () => string; unknownKey?: boolean; zeroOnly?: boolean; what: string; paying?: Record<string, unknown> }> = {
  "schema-chain": { what: "row 1: 7 $defs, each anyOf of 10 $refs to the next, under a oneOf (~2 KB)", body: () => JSON.stringify(schemaFormat(chainSchema(10, 8))) },
  "schema-budget": {
    what: "oneOf of 64 enums of 60 values (work budget)",
    body: () => JSON.stringify(schemaFormat({ oneOf: Array.from({ length: 64 }, (_, index) => ({ enum: Array.from({ length: 60 }, (_, value) => index * 1000 + value) })) })),
  },
  "grammar-bound": { what: "row 7: {type: string, maxLength: 1500}", body: () => JSON.stringify(schemaFormat({ type: "string", maxLength: 1500 })) },
  "messages-300k": { what: "row 2: 300,000 empty messages (8.7 MB)", body: () => JSON.stringify({ ...valid, messages: Array.from({ length: 300_000 }, () => ({ role: "user", content: "" })) }) },
  "description-9mb": { what: "row 2: a 9 MB tool description", body: () => JSON.stringify({ ...valid, tools: [{ type: "function", function: { name: "f", description: "d".repeat(9_000_000) } }] }) },
  "arguments-9mb": {
    what: "row 2: 9 MB of arguments in one tool call",
    body: () => JSON.stringify({ ...valid, messages: [{ role: "user", content: "x" }, { role: "assistant", content: null, tool_calls: [call(0, JSON.stringify({ a: "a".repeat(9_000_000) }))] }] }),
  },
  "arguments-9mb-36-calls": {
    what: "row 2: 9 MB of arguments over 36 tool calls (under the per-call cap)",
    body: () =>
      JSON.stringify({
        ...valid,
        messages: [{ role: "user", content: "x" }, { role: "assistant", content: null, tool_calls: Array.from({ length: 36 }, (_, index) => call(index, JSON.stringify({ a: "a".repeat(250_000) }))) }],
        tools: [{ type: "function", function: { name: "f" } }],
      }),
  },
  "tools-10k": { what: "row 2: 10,000 tools", body: () => JSON.stringify({ ...valid, tools: Array.from({ length: 10_000 }, (_, index) => ({ type: "function", function: { name: `f${index}`, parameters: { type: "object", properties: { a: { type: "string" } } } } })) }) },
  "logit-bias-850k": { what: "row 2: 850,000 logit_bias entries (9.4 MB)", body: () => JSON.stringify({ ...valid, logit_bias: Object.fromEntries(Array.from({ length: 850_000 }, (_, index) => [String(index), 1])) }) },
  "unknown-key": { what: "a valid request with a key that does not exist", body: () => JSON.stringify(valid), unknownKey: true, zeroOnly: true },
  "unknown-key-9mb": { what: "a 9 MB body with a key that does not exist", body: () => JSON.stringify({ ...valid, messages: [{ role: "user", content: "x".repeat(9_000_000) }] }), unknownKey: true, zeroOnly: true },
  "no-credit": { what: "a valid request from the zero-credit account", body: () => JSON.stringify(valid), zeroOnly: true },
  "bad-json": { what: "a body that is not JSON", body: () => '{"model": "stories260K", "messages": [', zeroOnly: true },
  "poison-kwargs": {
    what: "issue 19 row 2: chat_template_kwargs nested 5,000 deep (10 kB) to an upstream model, a paying client beside",
    body: () => poisonKwargsBody(5000),
    paying: validUpstream,
  },
};

/**
 * Issue 19 rows 1 and 4, the body worker's kinds; each runs a paying client (the funded key, with
 * valid ~300 KB chat requests, parsed in the worker) beside the flood. How they are flooded: without
 * any key, at these paths in turn, from this many clients, with the "greedy" key (a funded account
 * of its own, so its share of the parse queue is not the paying client's).
 */
const BODY_WORKER_FLOODS: Record<string, { noKey?: boolean; paths?: string[]; concurrency?: number; greedy?: boolean }> = {
  "deep-no-key": { noKey: true, paths: ["/nope", "/v1/chat/completions"] },
  "queue-one-key": { greedy: true, concurrency: 20 },
};
/** The paying client's request beside the body worker's kinds: valid, ~300 KB (an unknown field pads it). */
const payingLarge = { ...valid, max_tokens: 2, padding: "p".repeat(300_000) };
Object.assign(KINDS, {
  "deep-no-key": {
    what: "issue 19 row 1: arrays nested 200,000 deep (400 KB), no key, at POST /nope and /v1/chat/completions in turn",
    body: () => "[".repeat(200_000) + "]".repeat(200_000),
    zeroOnly: true,
    paying: payingLarge,
  },
  "queue-one-key": {
    what: "issue 19 row 4: one key (its own funded account), 20 connections of 100,000 messages (2.9 MB, refused by the worker's validation) filling the parse queue",
    body: () => JSON.stringify({ ...valid, messages: Array.from({ length: 100_000 }, () => ({ role: "user", content: "" })) }),
    zeroOnly: true,
    paying: payingLarge,
  },
});

/** The flooding child: builds the body, says it is ready, floods for `seconds`, prints its counts. */
async function flood(kind: string, url: string, key: string, seconds: number, concurrency: number): Promise<void> {
  const spec = KINDS[kind]!;
  const body = Buffer.from(spec.body());
  const authorization = `Bearer ${spec.unknownKey ? "tp-unknownunknownunknownunknownunknownunknown" : key}`;
  const options = BODY_WORKER_FLOODS[kind] ?? {};
  const headers: Record<string, string> = options.noKey ? { "content-type": "application/json" } : { "content-type": "application/json", authorization };
  const paths = options.paths ?? ["/v1/chat/completions"];
  let sent = 0;
  process.stdout.write(`ready ${body.length}\n`);
  const statuses: Record<string, number> = {};
  let requests = 0;
  const deadline = performance.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) {
        try {
          const response = await fetch(`${url}${paths[sent++ % paths.length]}`, { method: "POST", headers, body });
          const text = await response.text();
          let code = "";
          try {
            code = (JSON.parse(text) as { error?: { code?: string; param?: string } }).error?.code ?? "";
          } catch {
            code = "not-json";
          }
          const label = `${response.status} ${code}`;
          statuses[label] = (statuses[label] ?? 0) + 1;
        } catch (error) {
          statuses[`failed ${(error as Error).message}`] = (statuses[`failed ${(error as Error).message}`] ?? 0) + 1;
        }
        requests++;
      }
    }),
  );
  process.stdout.write(`${JSON.stringify({ requests, statuses })}\n`);
}

if (flags.flood !== undefined) {
  await flood(flags.flood, flags.url!, flags.key!, Number(flags.seconds), BODY_WORKER_FLOODS[flags.flood]?.concurrency ?? Number(flags.concurrency));
  process.exit(0);
}

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** Probes `/health` every ~10 ms until `stop` resolves; returns each probe's latency in ms. */
async function probeHealth(url: string, stop: Promise<unknown>): Promise<number[]> {
  const latencies: number[] = [];
  let stopped = false;
  void stop.then(() => (stopped = true));
  while (!stopped) {
    const started = performance.now();
    const response = await fetch(`${url}/health`);
    await response.arrayBuffer();
    latencies.push(performance.now() - started);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return latencies;
}

/** A paying client's valid requests, one after another until `stop` resolves: how many succeeded of how many. */
async function payingClient(url: string, key: string, body: Record<string, unknown>, stop: Promise<unknown>): Promise<{ ok: number; total: number }> {
  let stopped = false;
  void stop.then(() => (stopped = true));
  let ok = 0;
  let total = 0;
  while (!stopped) {
    const response = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${key}` }, body: JSON.stringify(body) }).catch(() => undefined);
    await response?.arrayBuffer();
    total++;
    if (response?.status === 200) ok++;
  }
  return { ok, total };
}

const cpuMs = (usage: NodeJS.CpuUsage) => (usage.user + usage.system) / 1000;

type Row = {
  kind: string;
  what: string;
  bodyBytes: number;
  seconds: number;
  requests: number;
  perSecond: number;
  statuses: Record<string, number>;
  healthP50: number;
  healthP99: number;
  healthMax: number;
  probes: number;
  cpuMsPerRequest: number;
  /** Kinds with a paying client beside the flood: its requests that succeeded, of how many. */
  paying?: { ok: number; total: number };
};

async function main(): Promise<void> {
  const seconds = Number(flags.seconds);
  const concurrency = Number(flags.concurrency);
  const kinds = flags.kinds === undefined ? Object.keys(KINDS) : flags.kinds.split(",");
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-hostile-"));
  const configFile = path.join(dataDir, "turnpike.json");
  const upstream = await FaultUpstream.start({ model: UPSTREAM_MODEL, maxModelLen: 4096 });
  fs.writeFileSync(
    configFile,
    JSON.stringify({
      models: [
        { id: MODEL, path: path.resolve(flags.model), pricing: { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 } },
        { id: UPSTREAM_MODEL, upstream: { kind: "vllm", urls: [upstream.baseUrl], health_interval: 3600 }, pricing: { prompt: 1_000_000, completion: 2_000_000 } },
      ],
      plans: [{ id: "large", name: "Large", price: { amount: 500, currency: "usd" }, credit: 1_000_000_000_000, days: 30 }],
    }),
  );
  const settings = loadSettings({
    flags: { port: "0", threads: "1", gpu: "cpu", parallel: "4", data_dir: dataDir, log_level: "error" },
    env: {},
    configFile,
  });
  const database = await openStore({ dataDir, databaseUrl: settings.database_url });
  const account = await createAccount(database, { email: "broke@example.com" });
  const { key } = await createApiKey(database, { name: "broke", accountId: account.id });
  await syncConfigPlans(database, settings.plans);
  const funded = await createAccount(database, { email: "funded@example.com" });
  await grantPlan(database, { accountId: funded.id, plan: (await findPlan(database, "large"))!, source: "bench" });
  const { key: fundedKey } = await createApiKey(database, { name: "funded", accountId: funded.id });
  // Issue 19 row 4's greedy key: a funded account of its own (the parse queue is shared per account).
  const greedy = await createAccount(database, { email: "greedy@example.com" });
  await grantPlan(database, { accountId: greedy.id, plan: (await findPlan(database, "large"))!, source: "bench:greedy" });
  const { key: greedyKey } = await createApiKey(database, { name: "greedy", accountId: greedy.id });
  await database.destroy();
  const accounts = flags.accounts!.split(",") as Array<"zero" | "funded">;
  const server = await startServer(settings, pino({ level: "silent" }));
  await server.modelsSettled;
  const rows: Row[] = [];
  try {
    // Baseline: /health alone, and what probing costs this process per second.
    const baselineStart = process.cpuUsage();
    const baseline = (await probeHealth(server.url, new Promise((resolve) => setTimeout(resolve, seconds * 1000)))).sort((a, b) => a - b);
    const probingCpuPerSecond = cpuMs(process.cpuUsage(baselineStart)) / seconds;
    rows.push({
      kind: "baseline",
      what: "/health with no flood",
      bodyBytes: 0,
      seconds,
      requests: 0,
      perSecond: 0,
      statuses: {},
      healthP50: quantile(baseline, 0.5),
      healthP99: quantile(baseline, 0.99),
      healthMax: baseline.at(-1)!,
      probes: baseline.length,
      cpuMsPerRequest: NaN,
    });
    const runs = accounts.flatMap((holder) => kinds.filter((kind) => holder === "zero" || !KINDS[kind]?.zeroOnly).map((kind) => ({ kind, holder })));
    for (const { kind, holder } of runs) {
      if (!(kind in KINDS)) throw new Error(`unknown kind '${kind}' (kinds: ${Object.keys(KINDS).join(", ")})`);
      const label = holder === "zero" ? kind : `${kind} (funded)`;
      const floodKey = BODY_WORKER_FLOODS[kind]?.greedy ? greedyKey : holder === "zero" ? key : fundedKey;
      const child = spawn(process.execPath, [fileURLToPath(import.meta.url), "--flood", kind, "--url", server.url, "--key", floodKey, "--seconds", String(seconds), "--concurrency", String(concurrency)], {
        stdio: ["ignore", "pipe", "inherit"],
      });
      let output = "";
      let onReady: (bytes: number) => void = () => {};
      const ready = new Promise<number>((resolve) => (onReady = resolve));
      const finished = new Promise<{ requests: number; statuses: Record<string, number> }>((resolve, reject) => {
        child.stdout.on("data", (chunk: Buffer) => {
          output += chunk.toString();
          const readyLine = /^ready (\d+)$/m.exec(output);
          if (readyLine) onReady(Number(readyLine[1]));
          const last = output.trim().split("\n").at(-1)!;
          if (last.startsWith("{")) resolve(JSON.parse(last));
        });
        child.on("exit", (code) => (code === 0 ? undefined : reject(new Error(`flood '${kind}' exited with ${code}`))));
      });
      const bodyBytes = await ready;
      const started = performance.now();
      const cpuStart = process.cpuUsage();
      const payingBody = KINDS[kind]!.paying;
      const paying = payingBody === undefined ? undefined : payingClient(server.url, fundedKey, payingBody, finished);
      const latencies = (await probeHealth(server.url, finished)).sort((a, b) => a - b);
      const result = await finished;
      const payingResult = await paying;
      const elapsed = (performance.now() - started) / 1000;
      const serverCpu = cpuMs(process.cpuUsage(cpuStart)) - probingCpuPerSecond * elapsed;
      rows.push({
        kind: label,
        what: KINDS[kind]!.what,
        bodyBytes,
        seconds: elapsed,
        requests: result.requests,
        perSecond: result.requests / elapsed,
        statuses: result.statuses,
        healthP50: quantile(latencies, 0.5),
        healthP99: quantile(latencies, 0.99),
        healthMax: latencies.at(-1) ?? NaN,
        probes: latencies.length,
        cpuMsPerRequest: Math.max(0, serverCpu) / Math.max(1, result.requests),
        ...(payingResult !== undefined ? { paying: payingResult } : {}),
      });
      const row = rows.at(-1)!;
      const payingNote = row.paying === undefined ? "" : `, paying client ${row.paying.ok}/${row.paying.total} ok`;
      process.stderr.write(`${label}: ${row.perSecond.toFixed(1)}/s, /health p99 ${row.healthP99.toFixed(1)} ms${payingNote}\n`);
    }
  } finally {
    await server.close();
    await upstream.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }

  const table = [
    "| kind | body | refused/s | statuses | /health p50 ms | p99 ms | max ms | CPU ms per refusal | paying client ok |",
    "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ...rows.map((row) =>
      [
        row.kind,
        row.bodyBytes === 0 ? "" : row.bodyBytes >= 1e6 ? `${(row.bodyBytes / 1e6).toFixed(1)} MB` : `${(row.bodyBytes / 1e3).toFixed(1)} kB`,
        row.kind === "baseline" ? "" : row.perSecond.toFixed(1),
        Object.entries(row.statuses)
          .map(([status, count]) => `${status} ×${count}`)
          .join(", "),
        row.healthP50.toFixed(1),
        row.healthP99.toFixed(1),
        row.healthMax.toFixed(1),
        Number.isNaN(row.cpuMsPerRequest) ? "" : row.cpuMsPerRequest.toFixed(2),
        row.paying === undefined ? "" : `${row.paying.ok}/${row.paying.total}`,
      ].join(" | "),
    ).map((line) => `| ${line} |`),
  ];
  console.log(`\nhostile input: ${concurrency} concurrent clients per kind for ${seconds} s, /health probed every ~10 ms (${os.cpus().length} CPUs)\n`);
  console.log(table.join("\n"));
  fs.mkdirSync(path.dirname(flags.out!), { recursive: true });
  fs.writeFileSync(flags.out!, JSON.stringify({ settings: { seconds, concurrency, cpus: os.cpus().length }, rows }, null, 2));
}

await main();
