/**
 * What Turnpike adds as a gateway in front of an upstream, against peers, in one run. Every
 * server runs in its own process; the load (a closed loop of keep-alive clients, autocannon's
 * model) runs here. Variants:
 *
 *   direct             the zero-latency upstream itself (bench/gateway/upstream.ts)
 *   bare-proxy         a bare undici pass-through proxy (bench/gateway/bare-proxy.ts): the floor
 *   portkey            Portkey's open-source gateway (@portkey-ai/gateway), provider openai + custom host
 *   turnpike-metered   Turnpike, a key of an account on a plan: auth, limits, hold, settle, usage record
 *   turnpike-unlimited Turnpike, a key of another account on a plan without RPM/TPM limits: metering alone
 *   turnpike-operator  Turnpike, an operator key: not metered
 *   baseline-metered, baseline-operator   with --baseline <checkout>: that checkout's Turnpike (an
 *                      older commit, say), started the same way beside this one, with the same keys
 *
 * Variants take turns within each round (the order of variants and of modes rotates every
 * round), for every mode and connection count, so that the machine's load falls on all alike;
 * ratios are taken within a round. A variant that cannot start is reported as unavailable, with
 * its reason. Modes:
 *
 *   json, stream                   POST /v1/chat/completions, JSON or SSE
 *   responses, responses-stream    POST /v1/responses (stored, the default), JSON or SSE: Turnpike
 *                                  only (it translates them to chat completions for the upstream)
 *   responses-unstored, responses-stream-unstored   the same with `store: false`
 *   messages, messages-stream      POST /v1/messages (Anthropic's Messages API, `x-api-key` and
 *                                  `anthropic-version`), JSON or SSE: Turnpike only (it translates
 *                                  them to chat completions for the upstream)
 *
 * With a responses or messages mode and its chat mode in one run, the bench prints Turnpike's CPU
 * per request for /v1/responses (or /v1/messages) over /v1/chat/completions (the issues' goal: ≤ 1.15×).
 *
 *   node bench/gateway.ts [--duration 2] [--warmup 0.5] [--connections 1,16,64] [--rounds 3]
 *     [--modes json,stream,responses,responses-stream,responses-unstored,responses-stream-unstored,messages,messages-stream]
 *     [--variants direct,bare-proxy,portkey,turnpike-metered,turnpike-unlimited,turnpike-operator]
 *     [--turnpike-timeout 60] [--database sqlite|postgres://…] [--redis redis://…] [--metered-limits on|off] [--out bench/results/gateway.json]
 *     [--baseline /path/to/other/checkout] [--node-args="--flag …"] [--baseline-node-args="--flag …"]
 *
 * --node-args and --baseline-node-args are Node.js options given to this checkout's Turnpike and
 * to the baseline's (`--baseline .` with options on one side compares a runtime setting on the
 * same code, such as V8's young generation size).
 *
 * With --baseline, the bench prints this checkout's Turnpike CPU per request over the baseline's,
 * per key and mode, pooled and as the median of the rounds' own ratios: a before/after of a
 * change measured in the same rounds, seconds apart.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { request } from "undici";
import { checkResponse, runLoad, type Dialect, type LoadTarget } from "./gateway/load.ts";
import { freePort, readPortLine, startChild, startUpstream, waitForOk, type Child } from "./gateway/processes.ts";
import { postgresSchema, SQLITE, startTurnpike, type TurnpikeUnderTest } from "./gateway/turnpike.ts";

const benchDir = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(benchDir, "..");
const { values: flags } = parseArgs({
  options: {
    duration: { type: "string", default: "2" },
    warmup: { type: "string", default: "0.5" },
    connections: { type: "string", default: "1,16,64" },
    rounds: { type: "string", default: "3" },
    modes: { type: "string", default: "json,stream" },
    variants: { type: "string", default: "direct,bare-proxy,portkey,turnpike-metered,turnpike-operator" },
    "turnpike-timeout": { type: "string", default: "60" },
    "max-requests": { type: "string", default: "2000000" },
    /** Turnpike's database: `sqlite` (its data dir) or a postgres:// URL (a fresh schema there; rate limits stay in memory). */
    database: { type: "string", default: "sqlite" },
    /** `off`: the metered key and its plan have no rate limits either (turnpike-unlimited measures metering alone in every run). */
    "metered-limits": { type: "string", default: "on" },
    /** Rate limits kept in Redis (as several nodes share them) instead of each Turnpike's memory. */
    redis: { type: "string", default: "" },
    out: { type: "string", default: path.join(benchDir, "results", "gateway.json") },
    /** Another checkout (with its node_modules) whose Turnpike runs beside this one as the baseline-* variants. */
    baseline: { type: "string" },
    /** Node.js options (space-separated) for this checkout's Turnpike, and for the baseline's. */
    "node-args": { type: "string", default: "" },
    "baseline-node-args": { type: "string", default: "" },
  },
});

const VARIANT_IDS = ["direct", "bare-proxy", "portkey", "turnpike-metered", "turnpike-unlimited", "turnpike-operator", "baseline-metered", "baseline-operator"] as const;
type VariantId = (typeof VARIANT_IDS)[number];
const MODES = ["json", "stream", "responses", "responses-stream", "responses-unstored", "responses-stream-unstored", "messages", "messages-stream"] as const;
type Mode = (typeof MODES)[number];
/** What a mode sends: where, in which dialect, streamed or not, stored or not (responses). */
type ModeSpec = { path: string; dialect: Dialect; stream: boolean; store?: boolean; /** The chat-completions mode it is compared with. */ chat: Mode };
const MODE_SPECS: Record<Mode, ModeSpec> = {
  json: { path: "/v1/chat/completions", dialect: "chat", stream: false, chat: "json" },
  stream: { path: "/v1/chat/completions", dialect: "chat", stream: true, chat: "stream" },
  responses: { path: "/v1/responses", dialect: "responses", stream: false, store: true, chat: "json" },
  "responses-stream": { path: "/v1/responses", dialect: "responses", stream: true, store: true, chat: "stream" },
  "responses-unstored": { path: "/v1/responses", dialect: "responses", stream: false, store: false, chat: "json" },
  "responses-stream-unstored": { path: "/v1/responses", dialect: "responses", stream: true, store: false, chat: "stream" },
  messages: { path: "/v1/messages", dialect: "messages", stream: false, chat: "json" },
  "messages-stream": { path: "/v1/messages", dialect: "messages", stream: true, chat: "stream" },
};
/** The Messages API's version header, as the Anthropic SDKs and Claude Code send it. */
const ANTHROPIC_VERSION = "2023-06-01";

function positive(name: string, value: string): number {
  const number = Number(value);
  if (!Number.isFinite(number) || number <= 0) throw new Error(`--${name} must be a positive number, got '${value}'`);
  return number;
}
const durationMs = positive("duration", flags.duration) * 1000;
const warmupMs = Number(flags.warmup) * 1000;
const rounds = Math.floor(positive("rounds", flags.rounds));
const maxRequests = Math.floor(positive("max-requests", flags["max-requests"]));
const turnpikeTimeoutMs = positive("turnpike-timeout", flags["turnpike-timeout"]) * 1000;
const connectionCounts = flags.connections.split(",").map((value) => Math.floor(positive("connections", value.trim())));
const modes = flags.modes.split(",").map((value) => value.trim()) as Mode[];
for (const mode of modes) if (!MODES.includes(mode)) throw new Error(`--modes takes ${MODES.join(",")}, got '${mode}'`);
const selected = flags.variants.split(",").map((value) => value.trim()) as VariantId[];
for (const variant of selected) if (!VARIANT_IDS.includes(variant)) throw new Error(`--variants takes ${VARIANT_IDS.join(",")}, got '${variant}'`);
const baselineRoot = flags.baseline === undefined ? undefined : path.resolve(flags.baseline);
/** What both Turnpikes start with beyond their store: Redis for their rate limits when asked. */
const nodeArgsOf = (text: string) => text.split(/\s+/).filter((arg) => arg !== "");
const turnpikeEnv = flags.redis === "" ? {} : { env: { TURNPIKE_REDIS_URL: flags.redis } };
const turnpikeExtra = { ...turnpikeEnv, nodeArgs: nodeArgsOf(flags["node-args"]) };
const baselineExtra = { ...turnpikeEnv, nodeArgs: nodeArgsOf(flags["baseline-node-args"]) };
if (selected.some((variant) => variant.startsWith("baseline")) !== (baselineRoot !== undefined)) throw new Error("the baseline-* variants and --baseline go together");

type Variant = {
  id: VariantId;
  /** Where requests go and with which headers (the body is the mode's). */
  origin?: string;
  headers?: Record<string, string>;
  /** Turnpike's key, sent as `x-api-key` in the messages modes (as Anthropic's clients send it) instead of `headers`' Bearer. */
  apiKey?: string;
  /** The process whose CPU is the variant's own (the upstream's for `direct`). */
  process?: Child;
  /** Why it is not measured, per mode or for all. */
  unavailable: Partial<Record<Mode, string>>;
};

/** The same short prompt and 16-token bound in every dialect. */
function requestBody(mode: Mode): string {
  const spec = MODE_SPECS[mode];
  if (spec.dialect === "messages") {
    const body: Record<string, unknown> = { model: "bench", max_tokens: 16, messages: [{ role: "user", content: "Say something about foxes." }] };
    if (spec.stream) body.stream = true;
    return JSON.stringify(body);
  }
  if (spec.dialect === "responses") {
    const body: Record<string, unknown> = { model: "bench", input: "Say something about foxes.", max_output_tokens: 16 };
    if (spec.stream) body.stream = true;
    // Stored is the default: only the unstored modes say so.
    if (spec.store === false) body.store = false;
    return JSON.stringify(body);
  }
  const body: Record<string, unknown> = { model: "bench", messages: [{ role: "user", content: "Say something about foxes." }], max_tokens: 16 };
  if (spec.stream) Object.assign(body, { stream: true, stream_options: { include_usage: true } });
  return JSON.stringify(body);
}

function targetOf(variant: Variant, mode: Mode): LoadTarget {
  const spec = MODE_SPECS[mode];
  const headers = spec.dialect === "messages" ? { "x-api-key": variant.apiKey ?? "", "anthropic-version": ANTHROPIC_VERSION } : variant.headers;
  return { origin: variant.origin!, path: spec.path, headers: { "content-type": "application/json", ...headers }, body: requestBody(mode), stream: spec.stream, dialect: spec.dialect };
}

/** One request per mode before measuring: a variant that answers wrongly is reported, not timed. */
async function smokeTest(variant: Variant): Promise<void> {
  for (const mode of modes) {
    if (variant.unavailable[mode] !== undefined) continue;
    const target = targetOf(variant, mode);
    try {
      const response = await request(`${target.origin}${target.path}`, { method: "POST", headers: target.headers, body: target.body, headersTimeout: 10_000, bodyTimeout: 10_000 });
      const problem = checkResponse(response.statusCode, await response.body.text(), target.stream, target.dialect);
      if (problem !== undefined) variant.unavailable[mode] = problem;
    } catch (error) {
      variant.unavailable[mode] = (error as Error).message;
    }
  }
}

const quantile = (sorted: number[], fraction: number) => (sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))]!);
const median = (values: number[]) => quantile([...values].sort((a, b) => a - b), 0.5);

type Cell = {
  round: number;
  mode: Mode;
  connections: number;
  variant: VariantId;
  requests: number;
  errors: number;
  errorSamples: string[];
  seconds: number;
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  /** CPU the variant's own process spent in the measured phase (the upstream's for direct). */
  variantCpuMs?: number;
  upstreamCpuMs?: number;
  /** This process's CPU (the load generator). */
  clientCpuMs: number;
};

const children: Child[] = [];
let turnpike: TurnpikeUnderTest | undefined;
let baseline: TurnpikeUnderTest | undefined;
async function stopAll(): Promise<void> {
  await turnpike?.cleanup().catch(() => undefined);
  await baseline?.cleanup().catch(() => undefined);
  await Promise.all(children.map((child) => child.stop().catch(() => undefined)));
}
process.once("SIGINT", () => void stopAll().then(() => process.exit(130)));

const variants = new Map<VariantId, Variant>();
/** Every measured latency, per `mode/connections/variant`, all rounds together. */
const latencies: Record<string, number[]> = {};
let turnpikeFailure: Error | undefined;
let baselineFailure: Error | undefined;
let metering: { balanceBefore: number; balanceAfter: number; charged: number; measuredRequests: number } | undefined;
const cells: Cell[] = [];
const started = Date.now();
try {
  // The upstream first: everything else points at it.
  const { child: upstream, origin: upstreamOrigin } = await startUpstream(benchDir);
  children.push(upstream);
  const unavailableForAll = (reason: string): Variant["unavailable"] => Object.fromEntries(modes.map((mode) => [mode, reason]));

  for (const id of selected) {
    const variant: Variant = { id, unavailable: {} };
    variants.set(id, variant);
    process.stderr.write(`starting ${id}…\n`);
    try {
      if (id === "direct") Object.assign(variant, { origin: upstreamOrigin, headers: { authorization: "Bearer bench" }, process: upstream });
      if (id === "bare-proxy") {
        const proxy = startChild("bare-proxy", [path.join(benchDir, "gateway/bare-proxy.ts"), "--upstream", upstreamOrigin]);
        children.push(proxy);
        Object.assign(variant, { origin: `http://127.0.0.1:${await readPortLine(proxy, 15_000)}`, headers: { authorization: "Bearer bench" }, process: proxy });
      }
      if (id === "portkey") {
        const entry = path.join(root, "node_modules/@portkey-ai/gateway/build/start-server.js");
        if (!fs.existsSync(entry)) throw new Error(`${entry} is missing (npm install the devDependency @portkey-ai/gateway)`);
        const port = await freePort();
        const portkey = startChild("portkey", ["--import", path.join(benchDir, "gateway/portkey-preload.ts"), entry, `--port=${port}`, "--headless"], {
          env: { NODE_ENV: "production" },
          captureStdout: true,
        });
        children.push(portkey);
        const origin = `http://127.0.0.1:${port}`;
        // Its root answers 200 ("AI Gateway says hey!") once it listens.
        await waitForOk(`${origin}/`, portkey, 30_000);
        Object.assign(variant, {
          origin,
          headers: { authorization: "Bearer bench", "x-portkey-provider": "openai", "x-portkey-custom-host": `${upstreamOrigin}/v1` },
          process: portkey,
        });
      }
      if (id === "turnpike-metered" || id === "turnpike-unlimited" || id === "turnpike-operator") {
        // Started once for every key; a failure to start is the same for both.
        if (turnpikeFailure !== undefined) throw turnpikeFailure;
        turnpike ??= await startTurnpike(root, upstreamOrigin, turnpikeTimeoutMs, flags.database === "sqlite" ? SQLITE : await postgresSchema(flags.database), flags["metered-limits"] !== "off", turnpikeExtra);
        const key = id === "turnpike-metered" ? turnpike.meteredKey : id === "turnpike-unlimited" ? turnpike.unlimitedKey : turnpike.operatorKey;
        Object.assign(variant, { origin: turnpike.origin, headers: { authorization: `Bearer ${key}` }, apiKey: key, process: turnpike.child });
      }
      if (id === "baseline-metered" || id === "baseline-operator") {
        if (baselineFailure !== undefined) throw baselineFailure;
        baseline ??= await startTurnpike(baselineRoot!, upstreamOrigin, turnpikeTimeoutMs, flags.database === "sqlite" ? SQLITE : await postgresSchema(flags.database), flags["metered-limits"] !== "off", baselineExtra);
        const key = id === "baseline-metered" ? baseline.meteredKey : baseline.operatorKey;
        Object.assign(variant, { origin: baseline.origin, headers: { authorization: `Bearer ${key}` }, apiKey: key, process: baseline.child });
      }
      // Only Turnpike speaks the Responses and Messages APIs here: the upstream (and so the proxies in front of it) answers chat completions alone.
      if (!id.startsWith("turnpike") && !id.startsWith("baseline")) {
        for (const mode of modes) if (MODE_SPECS[mode].dialect !== "chat") variant.unavailable[mode] = `only Turnpike serves ${MODE_SPECS[mode].path} here (the upstream answers chat completions)`;
      }
      await smokeTest(variant);
    } catch (error) {
      variant.unavailable = unavailableForAll((error as Error).message);
      if (id.startsWith("turnpike")) turnpikeFailure = error as Error;
      if (id.startsWith("baseline")) baselineFailure = error as Error;
    }
    for (const [mode, reason] of Object.entries(variant.unavailable)) process.stderr.write(`  ${id} ${mode}: unavailable: ${reason}\n`);
  }

  const measured = (mode: Mode) => [...variants.values()].filter((variant) => variant.unavailable[mode] === undefined);
  const perRound = modes.reduce((sum, mode) => sum + measured(mode).length, 0) * connectionCounts.length;
  process.stderr.write(`measuring: ${rounds} rounds × ${perRound} runs of ${(warmupMs + durationMs) / 1000} s ≈ ${Math.ceil((rounds * perRound * (warmupMs + durationMs)) / 1000)} s\n`);

  const balanceBefore = await turnpike?.meteredBalance();
  for (let round = 0; round < rounds; round++) {
    // The modes' order rotates too, so that a responses or messages mode and its chat mode take turns at running first.
    const modeOffset = round % modes.length;
    for (const mode of [...modes.slice(modeOffset), ...modes.slice(0, modeOffset)]) {
      for (const connections of connectionCounts) {
        const list = measured(mode);
        // Rotate the order each round (and per connection count), so no variant always runs first.
        const offset = (round + connectionCounts.indexOf(connections)) % Math.max(1, list.length);
        for (const variant of [...list.slice(offset), ...list.slice(0, offset)]) {
          let variantCpu: number | undefined;
          let upstreamCpu: number | undefined;
          let clientCpu = process.cpuUsage();
          const result = await runLoad(targetOf(variant, mode), {
            connections,
            warmupMs,
            durationMs,
            maxRequests,
            onMeasureStart: () => {
              variantCpu = variant.process?.cpuMs();
              upstreamCpu = upstream.cpuMs();
              clientCpu = process.cpuUsage();
            },
            onMeasureEnd: () => {
              const variantNow = variant.process?.cpuMs();
              const upstreamNow = upstream.cpuMs();
              variantCpu = variantNow === undefined || variantCpu === undefined ? undefined : variantNow - variantCpu;
              upstreamCpu = upstreamNow === undefined || upstreamCpu === undefined ? undefined : upstreamNow - upstreamCpu;
              const client = process.cpuUsage(clientCpu);
              clientCpu = { user: client.user, system: client.system };
            },
          });
          const sorted = result.latenciesMs.sort((a, b) => a - b);
          const cell: Cell = {
            round,
            mode,
            connections,
            variant: variant.id,
            requests: result.requests,
            errors: result.errors,
            errorSamples: result.errorSamples,
            seconds: result.seconds,
            requestsPerSecond: result.seconds > 0 ? result.requests / result.seconds : 0,
            p50Ms: quantile(sorted, 0.5),
            p99Ms: quantile(sorted, 0.99),
            variantCpuMs: variantCpu,
            upstreamCpuMs: upstreamCpu,
            clientCpuMs: (clientCpu.user + clientCpu.system) / 1000,
          };
          cells.push(cell);
          (latencies[`${mode}/${connections}/${variant.id}`] ??= []).push(...sorted);
          process.stderr.write(
            `round ${round + 1}/${rounds} ${mode} c=${connections} ${variant.id}: ${cell.requestsPerSecond.toFixed(0)} req/s, p50 ${cell.p50Ms.toFixed(2)} ms, p99 ${cell.p99Ms.toFixed(2)} ms${cell.errors ? `, ${cell.errors} errors (${cell.errorSamples[0]})` : ""}\n`,
          );
        }
      }
    }
  }
  // Proof that the metered variant was metered: the credit its requests moved.
  const balanceAfter = await turnpike?.meteredBalance();
  if (balanceBefore !== undefined && balanceAfter !== undefined) {
    const meteredRequests = cells.filter((cell) => cell.variant === "turnpike-metered").reduce((sum, cell) => sum + cell.requests, 0);
    metering = { balanceBefore, balanceAfter, charged: balanceBefore - balanceAfter, measuredRequests: meteredRequests };
  }
} finally {
  await stopAll();
}


type Row = {
  mode: Mode;
  connections: number;
  variant: VariantId;
  unavailable?: string;
  requestsPerSecond?: number;
  p50Ms?: number;
  p99Ms?: number;
  addedP50Ms?: number;
  addedP99Ms?: number;
  /** Median over rounds of this variant's req/s over the bare proxy's in the same round. */
  vsBareProxy?: number;
  vsPortkey?: number;
  cpuUsPerRequest?: number;
  /** Median over rounds of this variant's CPU per request over the bare proxy's in the same round (issue 26's goal ≤ 2×). */
  cpuVsBareProxy?: number;
  errors?: number;
};

const cpuPerRequest = (cell: Cell | undefined) => (cell === undefined || cell.variantCpuMs === undefined || cell.requests === 0 ? undefined : (cell.variantCpuMs * 1000) / cell.requests);

/** Each round's CPU per request of `variant` in `mode` over `base`'s in `baseMode`, same connections, in round order: a drift of the machine's speed between rounds cancels. */
function roundCpuRatios(connections: number, variant: VariantId, mode: Mode, base: VariantId, baseMode: Mode): number[] {
  const ratios: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const find = (id: VariantId, of: Mode) => cells.find((cell) => cell.round === round && cell.mode === of && cell.connections === connections && cell.variant === id);
    const mine = cpuPerRequest(find(variant, mode));
    const theirs = cpuPerRequest(find(base, baseMode));
    if (mine !== undefined && theirs !== undefined && theirs > 0) ratios.push(mine / theirs);
  }
  return ratios;
}
const medianOrUndefined = (values: number[]) => (values.length === 0 ? undefined : median(values));

function roundRatio(mode: Mode, connections: number, variant: VariantId, base: VariantId): number | undefined {
  const ratios: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const find = (id: VariantId) => cells.find((cell) => cell.round === round && cell.mode === mode && cell.connections === connections && cell.variant === id);
    const mine = find(variant);
    const theirs = find(base);
    if (mine && theirs && theirs.requestsPerSecond > 0) ratios.push(mine.requestsPerSecond / theirs.requestsPerSecond);
  }
  return ratios.length === 0 ? undefined : median(ratios);
}

const rows: Row[] = [];
for (const mode of modes) {
  for (const connections of connectionCounts) {
    const sortedOf = (id: VariantId) => [...(latencies[`${mode}/${connections}/${id}`] ?? [])].sort((a, b) => a - b);
    const direct = sortedOf("direct");
    for (const id of selected) {
      const variant = variants.get(id);
      if (variant === undefined) continue;
      const reason = variant.unavailable[mode];
      if (reason !== undefined) {
        rows.push({ mode, connections, variant: id, unavailable: reason });
        continue;
      }
      const mine = cells.filter((cell) => cell.mode === mode && cell.connections === connections && cell.variant === id);
      const sorted = sortedOf(id);
      const requests = mine.reduce((sum, cell) => sum + cell.requests, 0);
      const cpu = mine.every((cell) => cell.variantCpuMs !== undefined) ? mine.reduce((sum, cell) => sum + cell.variantCpuMs!, 0) : undefined;
      const p50 = quantile(sorted, 0.5);
      const p99 = quantile(sorted, 0.99);
      rows.push({
        mode,
        connections,
        variant: id,
        requestsPerSecond: median(mine.map((cell) => cell.requestsPerSecond)),
        p50Ms: p50,
        p99Ms: p99,
        addedP50Ms: direct.length > 0 ? p50 - quantile(direct, 0.5) : undefined,
        addedP99Ms: direct.length > 0 ? p99 - quantile(direct, 0.99) : undefined,
        vsBareProxy: roundRatio(mode, connections, id, "bare-proxy"),
        vsPortkey: roundRatio(mode, connections, id, "portkey"),
        cpuUsPerRequest: cpu === undefined || requests === 0 ? undefined : (cpu * 1000) / requests,
        cpuVsBareProxy: medianOrUndefined(roundCpuRatios(connections, id, mode, "bare-proxy", mode)),
        errors: mine.reduce((sum, cell) => sum + cell.errors, 0),
      });
    }
  }
}

const format = (value: number | undefined, digits: number, sign = false) =>
  value === undefined || Number.isNaN(value) ? "" : `${sign && value >= 0 ? "+" : ""}${value.toFixed(digits)}`;
const lines: string[] = [];
lines.push(`## Gateway overhead: ${rounds} rounds × ${durationMs / 1000} s per variant, ${os.availableParallelism()} CPUs, Node ${process.version}`, "");
lines.push("| mode | conns | variant | req/s | p50 ms | p99 ms | +p50 ms | +p99 ms | ÷ bare proxy | ÷ Portkey | CPU µs/req | CPU ÷ bare proxy | errors |");
lines.push("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
for (const row of rows) {
  if (row.unavailable !== undefined) {
    lines.push(`| ${row.mode} | ${row.connections} | ${row.variant} | unavailable |  |  |  |  |  |  |  |  |  |`);
    continue;
  }
  const self = (id: VariantId) => row.variant === id;
  lines.push(
    `| ${row.mode} | ${row.connections} | ${row.variant} | ${format(row.requestsPerSecond, 0)} | ${format(row.p50Ms, 2)} | ${format(row.p99Ms, 2)} | ` +
      `${self("direct") ? "" : format(row.addedP50Ms, 2, true)} | ${self("direct") ? "" : format(row.addedP99Ms, 2, true)} | ` +
      `${self("bare-proxy") ? "" : format(row.vsBareProxy, 2)} | ${self("portkey") ? "" : format(row.vsPortkey, 2)} | ${format(row.cpuUsPerRequest, 0)} | ${self("bare-proxy") ? "" : format(row.cpuVsBareProxy, 2)} | ${row.errors} |`,
  );
}

// Max req/s per variant and mode (over the connection counts), and the issue's goals.
lines.push("", "| mode | variant | max req/s | at conns | ÷ bare proxy | ÷ Portkey |", "| --- | --- | ---: | ---: | ---: | ---: |");
const summary: Array<{ mode: Mode; variant: VariantId; unavailable?: string; maxRequestsPerSecond?: number; atConnections?: number; vsBareProxy?: number; vsPortkey?: number }> = [];
for (const mode of modes) {
  for (const id of selected) {
    const mine = rows.filter((row) => row.mode === mode && row.variant === id);
    const unavailable = mine.find((row) => row.unavailable !== undefined)?.unavailable;
    if (unavailable !== undefined || mine.length === 0) {
      summary.push({ mode, variant: id, unavailable });
      lines.push(`| ${mode} | ${id} | unavailable: ${(unavailable ?? "not run").replace(/\|/g, "\\|").slice(0, 300)} |  |  |  |`);
      continue;
    }
    const best = mine.reduce((top, row) => ((row.requestsPerSecond ?? 0) > (top.requestsPerSecond ?? 0) ? row : top));
    const max = (base: VariantId) => rows.filter((row) => row.mode === mode && row.variant === base && row.requestsPerSecond !== undefined).reduce((top, row) => Math.max(top, row.requestsPerSecond!), 0);
    const bare = max("bare-proxy");
    const portkey = max("portkey");
    const entry = {
      mode,
      variant: id,
      maxRequestsPerSecond: best.requestsPerSecond,
      atConnections: best.connections,
      vsBareProxy: bare > 0 ? best.requestsPerSecond! / bare : undefined,
      vsPortkey: portkey > 0 ? best.requestsPerSecond! / portkey : undefined,
    };
    summary.push(entry);
    lines.push(
      `| ${mode} | ${id} | ${format(entry.maxRequestsPerSecond, 0)} | ${entry.atConnections} | ${id === "bare-proxy" ? "" : format(entry.vsBareProxy, 2)} | ${id === "portkey" ? "" : format(entry.vsPortkey, 2)} |`,
    );
  }
}

const goals: string[] = [];
const lowest = Math.min(...connectionCounts);
for (const mode of modes.filter((candidate) => MODE_SPECS[candidate].dialect === "chat")) {
  for (const id of ["turnpike-metered", "turnpike-operator"] as const) {
    const row = rows.find((candidate) => candidate.mode === mode && candidate.variant === id && candidate.connections === lowest);
    const best = summary.find((entry) => entry.mode === mode && entry.variant === id);
    if (row === undefined || best === undefined || row.unavailable !== undefined) continue;
    const verdict = (ok: boolean | undefined) => (ok === undefined ? "n/a" : ok ? "met" : "NOT met");
    goals.push(
      `- ${mode}, ${id}: +p50 ${format(row.addedP50Ms, 2, true)} ms at ${lowest} conn (goal ≤ 1 ms: ${verdict(row.addedP50Ms === undefined ? undefined : row.addedP50Ms <= 1)}); ` +
        `max req/s ${format(best.vsBareProxy, 2)} × bare proxy (goal ≥ 0.70: ${verdict(best.vsBareProxy === undefined ? undefined : best.vsBareProxy >= 0.7)}); ` +
        `${format(best.vsPortkey, 2)} × Portkey (goal > 1: ${verdict(best.vsPortkey === undefined ? undefined : best.vsPortkey > 1)})`,
    );
  }
}
if (goals.length > 0) lines.push("", "Goals (issue): Turnpike adds ≤ 1 ms p50, keeps ≥ 70% of the bare proxy's req/s, ahead of Portkey.", ...goals);
// Issue 26: every Turnpike cell's CPU per request ≤ 2× the bare proxy's, read pooled and as the rounds' median.
const cpuCells = rows.filter((row) => row.variant.startsWith("turnpike") && row.cpuUsPerRequest !== undefined && row.cpuVsBareProxy !== undefined);
const bareCpu = (row: Row) => rows.find((other) => other.mode === row.mode && other.connections === row.connections && other.variant === "bare-proxy")?.cpuUsPerRequest;
if (cpuCells.length > 0) {
  const pooled = (row: Row) => row.cpuUsPerRequest! / (bareCpu(row) ?? Number.NaN);
  const over = (ratio: (row: Row) => number) => cpuCells.filter((row) => !(ratio(row) <= 2));
  const name = (row: Row, ratio: number) => `${row.variant} ${row.mode} ${row.connections} conn ${format(ratio, 2)}×`;
  const overPooled = over(pooled);
  const overRounds = over((row) => row.cpuVsBareProxy!);
  lines.push(
    "",
    "Goal (issue 26): every Turnpike cell's CPU per request ≤ 2× the bare proxy's in the same run.",
    `- pooled over the rounds: ${cpuCells.length - overPooled.length} of ${cpuCells.length} cells within${overPooled.length === 0 ? "" : `; over: ${overPooled.map((row) => name(row, pooled(row))).join(", ")}`}`,
    `- the median of the rounds' own ratios: ${cpuCells.length - overRounds.length} of ${cpuCells.length} cells within${overRounds.length === 0 ? "" : `; over: ${overRounds.map((row) => name(row, row.cpuVsBareProxy!)).join(", ")}`}`,
  );
}
// What metering adds: one key's variant over another's, same server, same rounds. The full path
// (metered − operator) is the goal's; its two parts are metering alone (unlimited − operator) and
// the metered key's rate limits (metered − unlimited).
type Difference = { of: VariantId; over: VariantId; what: string };
const differences: Difference[] = [
  { of: "turnpike-metered", over: "turnpike-operator", what: "the full metered path" },
  { of: "turnpike-unlimited", over: "turnpike-operator", what: "metering alone" },
  { of: "turnpike-metered", over: "turnpike-unlimited", what: "the metered key's rate limits" },
];
const meteringCost: Array<{
  of: VariantId;
  over: VariantId;
  mode: Mode;
  connections: number;
  addedP50Ms: number;
  addedP99Ms: number;
  roundMedianP50Ms: number | undefined;
  addedCpuUsPerRequest: number | undefined;
}> = [];
for (const { of, over } of differences) {
  for (const mode of modes) {
    for (const connections of connectionCounts) {
      const pick = (id: VariantId) => rows.find((row) => row.mode === mode && row.connections === connections && row.variant === id && row.unavailable === undefined);
      const mine = pick(of);
      const theirs = pick(over);
      if (mine?.p50Ms === undefined || theirs?.p50Ms === undefined || mine.p99Ms === undefined || theirs.p99Ms === undefined) continue;
      // Also the median of the rounds' own differences: each round's runs are seconds apart, so a drift in the machine's speed cancels.
      const perRound: number[] = [];
      for (let round = 0; round < rounds; round++) {
        const cell = (id: VariantId) => cells.find((candidate) => candidate.round === round && candidate.mode === mode && candidate.connections === connections && candidate.variant === id);
        const on = cell(of)?.p50Ms;
        const off = cell(over)?.p50Ms;
        if (on !== undefined && off !== undefined) perRound.push(on - off);
      }
      perRound.sort((a, b) => a - b);
      const roundMedianP50Ms = perRound.length === 0 ? undefined : perRound[Math.floor((perRound.length - 1) / 2)];
      const addedCpuUsPerRequest = mine.cpuUsPerRequest === undefined || theirs.cpuUsPerRequest === undefined ? undefined : mine.cpuUsPerRequest - theirs.cpuUsPerRequest;
      meteringCost.push({ of, over, mode, connections, addedP50Ms: mine.p50Ms - theirs.p50Ms, addedP99Ms: mine.p99Ms - theirs.p99Ms, roundMedianP50Ms, addedCpuUsPerRequest });
    }
  }
}
if (meteringCost.length > 0) {
  lines.push("", `What metering adds (database: ${flags.database === "sqlite" ? "SQLite" : "PostgreSQL"}; the goal, for the full path: ≤ 0.3 ms p50, ≤ 1 ms p99):`);
  for (const { of, over, what } of differences) {
    const costs = meteringCost.filter((cost) => cost.of === of && cost.over === over);
    if (costs.length === 0) continue;
    lines.push(`${what} (${of} − ${over}):`);
    for (const cost of costs) {
      const verdict = of === "turnpike-metered" && over === "turnpike-operator" ? ` (${cost.addedP50Ms <= 0.3 && cost.addedP99Ms <= 1 ? "met" : "NOT met"})` : "";
      lines.push(
        `- ${cost.mode}, ${cost.connections} conn: p50 ${format(cost.addedP50Ms, 2, true)} ms, p99 ${format(cost.addedP99Ms, 2, true)} ms${verdict}; ` +
          `median of the rounds' p50 differences ${format(cost.roundMedianP50Ms, 2, true)} ms; CPU ${format(cost.addedCpuUsPerRequest, 0, true)} µs a request`,
      );
    }
  }
}
// CPU per request of one (variant, mode) over another's, same connections, same run: pooled, and
// as the median of the rounds' own ratios (each round runs both seconds apart, so a drift in the
// machine's speed cancels). Used for /v1/responses and /v1/messages over /v1/chat/completions
// (the issues' goal ≤ 1.15×), a stored response over an unstored one, and this checkout over --baseline.
type CpuComparison = {
  variant: VariantId;
  mode: Mode;
  overVariant: VariantId;
  over: Mode;
  connections: number;
  cpuUsPerRequest: number;
  overCpuUsPerRequest: number;
  ratio: number;
  roundMedianRatio: number | undefined;
  /** The rounds' ratios, in round order. */
  roundRatios: number[];
  addedP50Ms: number | undefined;
};
function compareCpu(variant: VariantId, mode: Mode, overVariant: VariantId, over: Mode, connections: number): CpuComparison | undefined {
  const pick = (id: VariantId, of: Mode) => rows.find((row) => row.mode === of && row.connections === connections && row.variant === id && row.unavailable === undefined);
  const mine = pick(variant, mode);
  const theirs = pick(overVariant, over);
  if (mine?.cpuUsPerRequest === undefined || theirs?.cpuUsPerRequest === undefined) return undefined;
  const roundRatios = roundCpuRatios(connections, variant, mode, overVariant, over);
  return {
    variant,
    mode,
    overVariant,
    over,
    connections,
    cpuUsPerRequest: mine.cpuUsPerRequest,
    overCpuUsPerRequest: theirs.cpuUsPerRequest,
    ratio: mine.cpuUsPerRequest / theirs.cpuUsPerRequest,
    roundMedianRatio: medianOrUndefined(roundRatios),
    roundRatios,
    addedP50Ms: mine.p50Ms === undefined || theirs.p50Ms === undefined ? undefined : mine.p50Ms - theirs.p50Ms,
  };
}
const describe = (cost: CpuComparison, goal: string) =>
  `${format(cost.cpuUsPerRequest, 0)} / ${format(cost.overCpuUsPerRequest, 0)} µs = ${format(cost.ratio, 3)}×${goal}; ` +
  `median of the rounds' ratios ${format(cost.roundMedianRatio, 3)}× (${cost.roundRatios.map((ratio) => ratio.toFixed(2)).join(", ")}); ` +
  `CPU ${format(cost.cpuUsPerRequest - cost.overCpuUsPerRequest, 0, true)} µs, p50 ${format(cost.addedP50Ms, 2, true)} ms a request`;

const responsesCost: CpuComparison[] = [];
for (const id of selected.filter((candidate) => candidate.startsWith("turnpike"))) {
  for (const mode of modes) {
    const spec = MODE_SPECS[mode];
    // A responses mode against its chat mode, and a stored one against its unstored twin.
    const bases: Mode[] = spec.dialect === "responses" ? [spec.chat, ...(spec.store === true ? [`${mode}-unstored` as Mode] : [])] : [];
    for (const over of bases.filter((base) => modes.includes(base))) {
      for (const connections of connectionCounts) {
        const cost = compareCpu(id, mode, id, over, connections);
        if (cost !== undefined) responsesCost.push(cost);
      }
    }
  }
}
if (responsesCost.length > 0) {
  lines.push("", "Turnpike's CPU per request, /v1/responses over /v1/chat/completions (goal ≤ 1.15×), and a stored response over an unstored one:");
  for (const cost of responsesCost) {
    const goal = MODE_SPECS[cost.over].dialect === "chat" ? ` (goal ≤ 1.15×: ${cost.ratio <= 1.15 ? "met" : "NOT met"})` : "";
    lines.push(`- ${cost.variant}, ${cost.mode} ÷ ${cost.over}, ${cost.connections} conn: ${describe(cost, goal)}`);
  }
}

const messagesCost: CpuComparison[] = [];
for (const id of selected.filter((candidate) => candidate.startsWith("turnpike"))) {
  for (const mode of modes.filter((candidate) => MODE_SPECS[candidate].dialect === "messages")) {
    const over = MODE_SPECS[mode].chat;
    if (!modes.includes(over)) continue;
    for (const connections of connectionCounts) {
      const cost = compareCpu(id, mode, id, over, connections);
      if (cost !== undefined) messagesCost.push(cost);
    }
  }
}
if (messagesCost.length > 0) {
  lines.push("", "Turnpike's CPU per request, /v1/messages over /v1/chat/completions (goal ≤ 1.15×):");
  for (const cost of messagesCost) lines.push(`- ${cost.variant}, ${cost.mode} ÷ ${cost.over}, ${cost.connections} conn: ${describe(cost, ` (goal ≤ 1.15×: ${cost.ratio <= 1.15 ? "met" : "NOT met"})`)}`);
}

const baselineCost: CpuComparison[] = [];
for (const [id, base] of [["turnpike-metered", "baseline-metered"], ["turnpike-operator", "baseline-operator"]] as const) {
  if (!selected.includes(id) || !selected.includes(base)) continue;
  for (const mode of modes) {
    for (const connections of connectionCounts) {
      const cost = compareCpu(id, mode, base, mode, connections);
      if (cost !== undefined) baselineCost.push(cost);
    }
  }
}
if (baselineCost.length > 0) {
  lines.push("", `This checkout's Turnpike CPU per request over the baseline's (${baselineRoot}):`);
  for (const cost of baselineCost) lines.push(`- ${cost.variant} ÷ ${cost.overVariant}, ${cost.mode}, ${cost.connections} conn: ${describe(cost, "")}`);
}
if (metering !== undefined) {
  lines.push(
    "",
    `Metered account: ${metering.charged} credits charged for ${metering.measuredRequests} measured requests (plus warm-up and smoke tests); balance ${metering.balanceBefore} → ${metering.balanceAfter}.`,
  );
}
// Each reason once, with the variants and modes it stopped.
const reasons = new Map<string, Set<string>>();
for (const variant of variants.values()) {
  for (const [mode, reason] of Object.entries(variant.unavailable)) {
    const stopped = reasons.get(reason) ?? new Set<string>();
    stopped.add(`${variant.id} ${mode}`);
    reasons.set(reason, stopped);
  }
}
if (reasons.size > 0) lines.push("", ...[...reasons].map(([reason, stopped]) => `- unavailable (${[...stopped].join(", ")}): ${reason}`));
console.log(`\n${lines.join("\n")}`);

const report = {
  when: new Date().toISOString(),
  seconds: (Date.now() - started) / 1000,
  cpus: os.availableParallelism(),
  node: process.version,
  settings: { durationMs, warmupMs, rounds, connections: connectionCounts, modes, variants: selected, maxRequests },
  metering,
  meteringCost,
  responsesCost,
  messagesCost,
  baselineCost,
  baseline: baselineRoot,
  nodeArgs: turnpikeExtra.nodeArgs,
  baselineNodeArgs: baselineExtra.nodeArgs,
  database: flags.database === "sqlite" ? "sqlite" : "postgres",
  unavailable: Object.fromEntries([...variants.values()].map((variant) => [variant.id, variant.unavailable])),
  rows,
  summary,
  cells,
};
fs.mkdirSync(path.dirname(flags.out), { recursive: true });
fs.writeFileSync(flags.out, `${JSON.stringify(report, null, 2)}\n`);
console.log(`\nwrote ${flags.out}`);
