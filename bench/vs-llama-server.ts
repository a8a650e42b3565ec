/**
 * The embedded engine against its real peer: Turnpike serving the benchmark model in-process
 * (node-llama-cpp) and llama-server built from the very llama.cpp source node-llama-cpp ships,
 * the same GGUF, the same threads, slots and context per slot, in one run, one client calling both
 * in turn. Makes what is missing first: the benchmark model (`benchModelPath()`, the script of
 * ../shared/models/README.md section 4) and llama-server + llama-bench (scripts/build-llama-server.sh
 * --with-llama-bench, cached outside the checkout; 10–15 minutes once on 2 cores).
 *
 * For each stream count (default 1, 4, 8) and each round, both sides get the same requests:
 * `streams` streamed chat completions at once, temperature 0, `--max-tokens` tokens each with the
 * end-of-text token banned (`logit_bias`), every prompt different near its start so no cache
 * helps either side. The sides alternate round by round (llama-server first in even rounds), so
 * drift in the machine's load falls on both. Per round and side:
 *
 *   aggregate tok/s  all streams' completion tokens ÷ the round's wall time
 *   decode tok/s     per stream, (tokens − 1) ÷ (last content chunk − first), median over streams
 *   TTFT             per stream, request sent → first content chunk, median over streams
 *
 * Prints medians over rounds and the ratios (Turnpike ÷ llama-server), the goals of issue 11
 * beside them, and `llama-bench` (tg and pp on the same model and threads) as the ceiling; writes
 * JSON to bench/results/vs-llama-server.json.
 *
 *   node bench/vs-llama-server.ts [--streams 1,4,8] [--rounds 5] [--warmup 1] [--max-tokens 128]
 *     [--slots 8] [--context-size 2048] [--threads 1] [--model file.gguf] [--no-llama-bench]
 *     [--out bench/results/vs-llama-server.json]
 */
import { execFile, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { parseArgs, promisify } from "node:util";
import { Agent } from "undici";
import { benchModelPath, buildScript, loadedCpuBackend, startLlamaServer, withNodeLlamaCppCpuBackends, type RunningLlamaServer } from "../test/helpers/llama-server.ts";
import { startTurnpikeChild, type TurnpikeChild } from "./turnpike-child.ts";
import { endOfTextToken, median, streamCompletion, type StreamTarget } from "./streamed-completion.ts";

const benchDir = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(benchDir, "..");
const { values: flags } = parseArgs({
  options: {
    streams: { type: "string", default: "1,4,8" },
    rounds: { type: "string", default: "5" },
    warmup: { type: "string", default: "1" },
    "max-tokens": { type: "string", default: "128" },
    slots: { type: "string" },
    "context-size": { type: "string", default: "2048" },
    threads: { type: "string", default: "1" },
    model: { type: "string" },
    "no-llama-bench": { type: "boolean", default: false },
    out: { type: "string", default: path.join(benchDir, "results", "vs-llama-server.json") },
  },
});

function positiveInteger(name: string, value: string, minimum = 1): number {
  const number = Number(value);
  if (!Number.isInteger(number) || number < minimum) throw new Error(`--${name} must be an integer ≥ ${minimum}, got '${value}'`);
  return number;
}
const streamCounts = flags.streams.split(",").map((value) => positiveInteger("streams", value.trim()));
const rounds = positiveInteger("rounds", flags.rounds);
const warmupRounds = positiveInteger("warmup", flags.warmup, 0);
const maxTokens = positiveInteger("max-tokens", flags["max-tokens"], 2);
const slots = flags.slots === undefined ? Math.max(...streamCounts) : positiveInteger("slots", flags.slots);
const contextSize = positiveInteger("context-size", flags["context-size"], 256);
const threads = positiveInteger("threads", flags.threads);
const MODEL_ID = "bench";
const SIDES = ["llama-server", "turnpike"] as const;
type Side = (typeof SIDES)[number];

/** One stream as the client saw it. */
type StreamResult = { ttftMs: number; decodeTokensPerSecond: number; completionTokens: number; text: string };
/** One round of one side. */
type RoundResult = { round: number; side: Side; streams: number; wallMs: number; aggregateTokensPerSecond: number; results: StreamResult[] };

/** Different for every round, stream and stream count, near the start (no prefix cache helps). */
function messagesFor(streams: number, round: number, stream: number): Array<{ role: string; content: string }> {
  return [{ role: "user", content: `Story ${streams}-${round}-${stream}: tell me a long story about a little cat, a big red ball and the garden behind the old house.` }];
}

const run = promisify(execFile);

/**
 * llama-server and llama-bench, built if missing (the build script prints the server's path last),
 * then copied beside node-llama-cpp's own prebuilt CPU backends: both sides run the same kernels
 * on any CPU (the build's own backends are left out of the copy).
 */
function llamaBinaries(): { server: string; bench: string | undefined; remove: () => void } {
  const wantBench = !flags["no-llama-bench"];
  const args = wantBench ? ["--with-llama-bench"] : [];
  process.stderr.write(`llama.cpp binaries: ${buildScript} ${args.join(" ")} (builds once when missing, 20–40 minutes)\n`);
  const output = execFileSync("bash", [buildScript, ...args], { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  const built = output.trim().split("\n").at(-1)!;
  if (!fs.existsSync(built)) throw new Error(`the build script printed ${built}, which is not there`);
  const copy = withNodeLlamaCppCpuBackends();
  process.stderr.write(`llama.cpp binaries with node-llama-cpp's CPU backends (${copy.backendsDir})\n`);
  return { server: copy.server, bench: wantBench ? copy.bench : undefined, remove: copy.remove };
}

/** Turnpike in its own process serving the model embedded, with the same slots, threads and context as llama-server. */
function startTurnpike(modelPath: string): Promise<TurnpikeChild> {
  return startTurnpikeChild({
    tempPrefix: "turnpike-vs-llama-server-",
    readyTimeoutMs: 120_000,
    serveArgs: (dataDir, port) => [
      "--host", "127.0.0.1", "--port", String(port), "--data-dir", dataDir, "--log-level", "warn",
      "--model", `${MODEL_ID}=${modelPath}`, "--parallel", String(slots), "--threads", String(threads),
      "--context-size", String(contextSize), "--gpu", "cpu", "--queue-size", String(Math.max(64, slots * 2)),
    ],
  });
}

type Target = StreamTarget & { agent: Agent };

/** One streamed completion, timed from the raw SSE (the same parser for both sides), a connection per request. */
async function stream(target: Target, body: Record<string, unknown>): Promise<StreamResult> {
  const { ttftMs, decodeTokensPerSecond, completionTokens, text } = await streamCompletion(target.agent, target, body, { reset: true, timeoutMs: 300_000 });
  return { ttftMs, decodeTokensPerSecond, completionTokens, text };
}

/** `llama-bench` on the same model and threads: tg (one sequence) and pp, tokens per second. */
async function llamaBench(binary: string, modelPath: string): Promise<{ tg: number; pp: number } | undefined> {
  try {
    const { stdout } = await run(binary, ["-m", modelPath, "-t", String(threads), "-p", "128", "-n", String(maxTokens), "-r", "3", "-o", "json"], { timeout: 600_000, maxBuffer: 16 << 20 });
    const tests = JSON.parse(stdout) as Array<{ n_prompt: number; n_gen: number; avg_ts: number }>;
    const tg = tests.find((test) => test.n_gen > 0 && test.n_prompt === 0)?.avg_ts;
    const pp = tests.find((test) => test.n_prompt > 0 && test.n_gen === 0)?.avg_ts;
    return tg !== undefined && pp !== undefined ? { tg, pp } : undefined;
  } catch (error) {
    process.stderr.write(`llama-bench failed: ${error instanceof Error ? error.message : String(error)}\n`);
    return undefined;
  }
}

let llama: RunningLlamaServer | undefined;
let turnpike: TurnpikeChild | undefined;
const agents: Agent[] = [];
async function stopAll(): Promise<void> {
  await Promise.all(agents.map((agent) => agent.close().catch(() => undefined)));
  await turnpike?.cleanup().catch(() => undefined);
  await llama?.close().catch(() => undefined);
}
process.once("SIGINT", () => void stopAll().then(() => {
  binaries.remove();
  process.exit(130);
}));

const started = Date.now();
const loadBefore = os.loadavg();
const modelPath = path.resolve(flags.model ?? benchModelPath());
const binaries = llamaBinaries();
const roundResults: RoundResult[] = [];
let eosToken: number | undefined;
let ceiling: { tg: number; pp: number } | undefined;
try {
  process.stderr.write(`model ${modelPath}\nstarting llama-server and Turnpike (${threads} thread(s), ${slots} slots × ${contextSize} tokens)…\n`);
  llama = await startLlamaServer({ binary: binaries.server, model: modelPath, threads, parallel: slots, contextSize: contextSize * slots });
  process.stderr.write(`llama-server runs node-llama-cpp's CPU backend ${path.basename(loadedCpuBackend(llama.process.pid!) ?? "(none mapped?)")}\n`);
  eosToken = await endOfTextToken(llama.url);
  turnpike = await startTurnpike(modelPath);
  const agentFor = () => {
    const agent = new Agent({ keepAliveTimeout: 60_000, connections: Math.max(...streamCounts) });
    agents.push(agent);
    return agent;
  };
  const targets: Record<Side, Target> = {
    "llama-server": { origin: llama.url, headers: {}, agent: agentFor() },
    turnpike: { origin: turnpike.origin, headers: { authorization: `Bearer ${turnpike.key}` }, agent: agentFor() },
  };

  for (const streams of streamCounts) {
    const total = warmupRounds + rounds;
    process.stderr.write(`${streams} stream(s): ${total} rounds (${warmupRounds} warm-up) × 2 sides × ${maxTokens} tokens\n`);
    for (let round = 0; round < total; round++) {
      const order: Side[] = round % 2 === 0 ? ["llama-server", "turnpike"] : ["turnpike", "llama-server"];
      const line: string[] = [];
      for (const side of order) {
        const bodies = Array.from({ length: streams }, (_, index) => ({
          model: MODEL_ID,
          messages: messagesFor(streams, round, index),
          stream: true,
          stream_options: { include_usage: true },
          temperature: 0,
          max_tokens: maxTokens,
          logit_bias: { [String(eosToken)]: -100 },
        }));
        const roundStarted = performance.now();
        const results = await Promise.all(bodies.map((body) => stream(targets[side], body)));
        const wallMs = performance.now() - roundStarted;
        const tokens = results.reduce((sum, result) => sum + result.completionTokens, 0);
        const result: RoundResult = { round: round - warmupRounds, side, streams, wallMs, aggregateTokensPerSecond: tokens / (wallMs / 1000), results };
        if (round >= warmupRounds) roundResults.push(result);
        line.push(`${side} ${result.aggregateTokensPerSecond.toFixed(1)} tok/s, TTFT ${median(results.map((r) => r.ttftMs)).toFixed(0)} ms`);
      }
      process.stderr.write(`  ${round < warmupRounds ? "warm-up" : `round ${round - warmupRounds}`}: ${line.join("; ")}\n`);
    }
  }
} finally {
  await stopAll();
}
if (binaries.bench !== undefined) {
  process.stderr.write("llama-bench (the ceiling)…\n");
  ceiling = await llamaBench(binaries.bench, modelPath);
}
binaries.remove();
const loadAfter = os.loadavg();

type Row = {
  streams: number;
  side: Side;
  aggregateTokensPerSecond: number;
  decodeTokensPerSecond: number;
  ttftMs: number;
  completionTokens: number;
};
const rows: Row[] = [];
for (const streams of streamCounts) {
  for (const side of SIDES) {
    const mine = roundResults.filter((result) => result.streams === streams && result.side === side);
    rows.push({
      streams,
      side,
      aggregateTokensPerSecond: median(mine.map((result) => result.aggregateTokensPerSecond)),
      decodeTokensPerSecond: median(mine.map((result) => median(result.results.map((stream) => stream.decodeTokensPerSecond)))),
      ttftMs: median(mine.map((result) => median(result.results.map((stream) => stream.ttftMs)))),
      completionTokens: median(mine.flatMap((result) => result.results.map((stream) => stream.completionTokens))),
    });
  }
}
const rowOf = (streams: number, side: Side) => rows.find((row) => row.streams === streams && row.side === side)!;
/** The median over rounds of Turnpike ÷ llama-server within the same round. */
function pairedRatio(streams: number, pick: (result: RoundResult) => number): number {
  const ratios: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const a = roundResults.find((result) => result.streams === streams && result.round === round && result.side === "llama-server");
    const b = roundResults.find((result) => result.streams === streams && result.round === round && result.side === "turnpike");
    if (a !== undefined && b !== undefined) ratios.push(pick(b) / pick(a));
  }
  return median(ratios);
}
const ratios = streamCounts.map((streams) => ({
  streams,
  aggregate: rowOf(streams, "turnpike").aggregateTokensPerSecond / rowOf(streams, "llama-server").aggregateTokensPerSecond,
  aggregatePaired: pairedRatio(streams, (result) => result.aggregateTokensPerSecond),
  decode: rowOf(streams, "turnpike").decodeTokensPerSecond / rowOf(streams, "llama-server").decodeTokensPerSecond,
  ttft: rowOf(streams, "turnpike").ttftMs / rowOf(streams, "llama-server").ttftMs,
  ttftPaired: pairedRatio(streams, (result) => median(result.results.map((stream) => stream.ttftMs))),
}));

const format = (value: number | undefined, digits: number) => (value !== undefined && Number.isFinite(value) ? value.toFixed(digits) : "");
const loads = (load: number[]) => load.map((value) => value.toFixed(2)).join(" ");
const lines: string[] = [
  `## Turnpike (embedded node-llama-cpp) vs llama-server: ${rounds} rounds (+${warmupRounds} warm-up) per stream count, ${maxTokens}-token streams at temperature 0`,
  "",
  `model ${path.basename(modelPath)}; ${threads} thread(s), ${slots} slots × ${contextSize} tokens on both sides; ${os.availableParallelism()} CPUs, Node ${process.version}; ` +
    `load average before ${loads(loadBefore)}, after ${loads(loadAfter)}`,
  "",
  "| streams | side | aggregate tok/s | decode tok/s per stream | TTFT ms | tokens per stream |",
  "| ---: | --- | ---: | ---: | ---: | ---: |",
  ...rows.map(
    (row) =>
      `| ${row.streams} | ${row.side} | ${format(row.aggregateTokensPerSecond, 1)} | ${format(row.decodeTokensPerSecond, 1)} | ${format(row.ttftMs, 0)} | ${format(row.completionTokens, 0)} |`,
  ),
  "",
  "Turnpike ÷ llama-server (medians; the median of per-round ratios in brackets):",
  "",
  "| streams | aggregate tok/s | decode tok/s | TTFT |",
  "| ---: | ---: | ---: | ---: |",
  ...ratios.map(
    (ratio) =>
      `| ${ratio.streams} | ${format(ratio.aggregate, 3)} [${format(ratio.aggregatePaired, 3)}] | ${format(ratio.decode, 3)} | ${format(ratio.ttft, 3)} [${format(ratio.ttftPaired, 3)}] |`,
  ),
  "",
  "Goals (issue 11): 1 stream decode ≥ 0.95, aggregate at 4 and 8 streams ≥ 1.0, TTFT ≤ 1.1.",
];
if (ceiling !== undefined) lines.push("", `llama-bench, ${threads} thread(s): tg${maxTokens} ${ceiling.tg.toFixed(1)} tok/s, pp128 ${ceiling.pp.toFixed(1)} tok/s (one sequence: the ceiling for 1 stream).`);
console.log(`\n${lines.join("\n")}`);

const report = {
  when: new Date().toISOString(),
  seconds: (Date.now() - started) / 1000,
  cpus: os.availableParallelism(),
  node: process.version,
  loadAverage: { before: loadBefore, after: loadAfter },
  settings: { model: modelPath, streams: streamCounts, rounds, warmupRounds, maxTokens, slots, contextSize, threads, eosToken },
  rows,
  ratios,
  llamaBench: ceiling,
  perRound: roundResults.map(({ results, ...rest }) => ({ ...rest, perStream: results.map(({ text: _text, ...stream }) => stream) })),
};
fs.mkdirSync(path.dirname(flags.out), { recursive: true });
fs.writeFileSync(flags.out, `${JSON.stringify(report, null, 2)}\n`);
process.stderr.write(`wrote ${flags.out}\n`);
