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
 * so its CPU is not counted. Kinds marked `payingClient` (issue 19's deep bodies without a key, and
 * one key filling the parse queue) also run a paying client (another funded account, a child of
 * its own) sending ~300 KB chat requests one after another, and report its success rate.
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
    // Internal: run as the paying client's child, with this key.
    paying: { type: "string" },
    url: { type: "string" },
    key: { type: "string" },
  },
});

const MODEL = "stories260K";
const valid = { model: MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 4 };

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
const KINDS: Record<
  string,
  {
    body: () => string;
    unknownKey?: boolean;
    zeroOnly?: boolean;
    what: string;
    /** Sent without any key. */
    noKey?: boolean;
    /** Flooded with the funded key only (the zero-credit key's large bodies are refused on their headers). */
    fundedOnly?: boolean;
    /** The paths flooded in turn; `/v1/chat/completions` when absent. */
    paths?: string[];
    /** Clients flooding at once, instead of `--concurrency`. */
    concurrency?: number;
    /** A paying client (another funded account) sends ~300 KB chat requests meanwhile: its success rate is reported. */
    payingClient?: boolean;
  }
> = {
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
  "deep-no-key": {
    what: "issue 19 row 1: arrays nested 200,000 deep (400 KB), no key, at POST /nope and /v1/chat/completions",
    body: () => "[".repeat(200_000) + "]".repeat(200_000),
    noKey: true,
    zeroOnly: true,
    paths: ["/nope", "/v1/chat/completions"],
    payingClient: true,
  },
  "queue-one-key": {
    what: "issue 19 row 4: one funded key, 20 connections of 100,000 messages (2.9 MB, refused by the worker's validation) filling the parse queue",
    body: () => JSON.stringify({ ...valid, messages: Array.from({ length: 100_000 }, () => ({ role: "user", content: "" })) }),
    fundedOnly: true,
    concurrency: 20,
    payingClient: true,
  },
};

/** The paying client's request: valid, ~300 KB (an unknown field pads it, so it is parsed in the worker). */
const payingBody = () => JSON.stringify({ ...valid, max_tokens: 2, padding: "p".repeat(300_000) });

/** The flooding child: builds the body, says it is ready, floods for `seconds`, prints its counts. */
async function flood(kind: string, url: string, key: string, seconds: number, concurrency: number): Promise<void> {
  const spec = KINDS[kind]!;
  const body = Buffer.from(spec.body());
  const authorization = `Bearer ${spec.unknownKey ? "tp-unknownunknownunknownunknownunknownunknown" : key}`;
  const headers: Record<string, string> = spec.noKey ? { "content-type": "application/json" } : { "content-type": "application/json", authorization };
  const paths = spec.paths ?? ["/v1/chat/completions"];
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

/** The paying client (a child of its own): ~300 KB chat requests one after another for `seconds`; prints how many succeeded and their latencies. */
async function payingClient(url: string, key: string, seconds: number): Promise<void> {
  const body = Buffer.from(payingBody());
  process.stdout.write("ready\n");
  const latencies: number[] = [];
  const failures: Record<string, number> = {};
  let requests = 0;
  const deadline = performance.now() + seconds * 1000;
  while (performance.now() < deadline) {
    const started = performance.now();
    requests++;
    try {
      const response = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${key}` }, body });
      const text = await response.text();
      if (response.status === 200) latencies.push(performance.now() - started);
      else {
        const label = `${response.status} ${/"code":"([^"]*)"/.exec(text)?.[1] ?? ""} ${/"message":"([^"]*)"/.exec(text)?.[1]?.slice(0, 120) ?? ""}`;
        failures[label] = (failures[label] ?? 0) + 1;
      }
    } catch (error) {
      failures[`failed ${(error as Error).message}`] = (failures[`failed ${(error as Error).message}`] ?? 0) + 1;
    }
  }
  latencies.sort((a, b) => a - b);
  process.stdout.write(`${JSON.stringify({ requests, ok: latencies.length, failures, p50: quantile(latencies, 0.5), p99: quantile(latencies, 0.99) })}\n`);
}

if (flags.flood !== undefined) {
  const spec = KINDS[flags.flood];
  await flood(flags.flood, flags.url!, flags.key!, Number(flags.seconds), spec?.concurrency ?? Number(flags.concurrency));
  process.exit(0);
}
if (flags.paying !== undefined) {
  await payingClient(flags.url!, flags.paying, Number(flags.seconds));
  process.exit(0);
}

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** Probes `/health` every ~10 ms until `stop` resolves; returns each probe's latency in ms. */
async function probeHealth(url: string, stop: Promise<unknown>): Promise<number[]> {
  const { monitorEventLoopDelay } = await import("node:perf_hooks");
  const loop = monitorEventLoopDelay({ resolution: 5 });
  loop.enable();
  void stop.then(() => { loop.disable(); process.stderr.write(`event loop delay: p50 ${(loop.percentile(50) / 1e6).toFixed(1)} p99 ${(loop.percentile(99) / 1e6).toFixed(1)} max ${(loop.max / 1e6).toFixed(1)} ms\n`); });
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
  /** The paying client's requests meanwhile (kinds with `payingClient`): how many, how many succeeded, their latency. */
  paying?: { requests: number; ok: number; failures: Record<string, number>; p50: number; p99: number };
};

/** Starts the paying client's child; resolves with its counts once it is done (after `seconds`). */
async function startPayingClient(url: string, key: string, seconds: number): Promise<NonNullable<Row["paying"]>> {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), "--paying", key, "--url", url, "--seconds", String(seconds)], { stdio: ["ignore", "pipe", "inherit"] });
  let output = "";
  return new Promise((resolve, reject) => {
    child.stdout.on("data", (chunk: Buffer) => {
      output += chunk.toString();
      const last = output.trim().split("\n").at(-1)!;
      if (last.startsWith("{")) resolve(JSON.parse(last));
    });
    child.on("exit", (code) => (code === 0 ? undefined : reject(new Error(`the paying client exited with ${code}`))));
  });
}

async function main(): Promise<void> {
  const seconds = Number(flags.seconds);
  const concurrency = Number(flags.concurrency);
  const kinds = flags.kinds === undefined ? Object.keys(KINDS) : flags.kinds.split(",");
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-hostile-"));
  const configFile = path.join(dataDir, "turnpike.json");
  fs.writeFileSync(
    configFile,
    JSON.stringify({
      models: [{ id: MODEL, path: path.resolve(flags.model), pricing: { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 } }],
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
  // The paying client of the issue-19 kinds: an account of its own (the parse queue is shared per account).
  const paying = await createAccount(database, { email: "paying@example.com" });
  await grantPlan(database, { accountId: paying.id, plan: (await findPlan(database, "large"))!, source: "bench:paying" });
  const { key: payingKey } = await createApiKey(database, { name: "paying", accountId: paying.id });
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
    const runs = accounts.flatMap((holder) =>
      kinds.filter((kind) => (holder === "zero" ? !KINDS[kind]?.fundedOnly : !KINDS[kind]?.zeroOnly)).map((kind) => ({ kind, holder })),
    );
    for (const { kind, holder } of runs) {
      if (!(kind in KINDS)) throw new Error(`unknown kind '${kind}' (kinds: ${Object.keys(KINDS).join(", ")})`);
      const label = holder === "zero" || KINDS[kind]!.fundedOnly ? kind : `${kind} (funded)`;
      const child = spawn(process.execPath, [fileURLToPath(import.meta.url), "--flood", kind, "--url", server.url, "--key", holder === "zero" ? key : fundedKey, "--seconds", String(seconds), "--concurrency", String(concurrency)], {
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
      const paid = KINDS[kind]!.payingClient ? startPayingClient(server.url, payingKey, seconds) : undefined;
      const started = performance.now();
      const cpuStart = process.cpuUsage();
      const latencies = (await probeHealth(server.url, finished)).sort((a, b) => a - b);
      const result = await finished;
      const payingResult = await paid;
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
        paying: payingResult,
      });
      const row = rows.at(-1)!;
      process.stderr.write(`${label}: ${row.perSecond.toFixed(1)}/s, /health p99 ${row.healthP99.toFixed(1)} ms${row.paying === undefined ? "" : `, paying client ${row.paying.ok}/${row.paying.requests} ok ${JSON.stringify(row.paying.failures)}`}\n`);
    }
  } finally {
    await server.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }

  const table = [
    "| kind | body | refused/s | statuses | /health p50 ms | p99 ms | max ms | CPU ms per refusal | paying client ok (p50/p99 ms) |",
    "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |",
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
        row.paying === undefined
          ? ""
          : `${row.paying.ok}/${row.paying.requests} (${Number(row.paying.p50).toFixed(0)}/${Number(row.paying.p99).toFixed(0)})${Object.entries(row.paying.failures)
              .map(([status, count]) => `, ${status} ×${count}`)
              .join("")}`,
      ].join(" | "),
    ).map((line) => `| ${line} |`),
  ];
  console.log(`\nhostile input: ${concurrency} concurrent clients per kind for ${seconds} s, /health probed every ~10 ms (${os.cpus().length} CPUs)\n`);
  console.log(table.join("\n"));
  fs.mkdirSync(path.dirname(flags.out!), { recursive: true });
  fs.writeFileSync(flags.out!, JSON.stringify({ settings: { seconds, concurrency, cpus: os.cpus().length }, rows }, null, 2));
}

await main();
