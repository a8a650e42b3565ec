/**
 * Embeddings throughput, Turnpike against llama-server on the same GGUF: the benchmark model
 * (`benchModelPath()`, ~125M parameters, random weights) made an embedding model by
 * `llama.pooling_type = 1` (mean; `derivedModel`, into the temp folder), the same threads, context
 * per input and batch size, in one run, one client calling both in turn (llama-server first in even
 * rounds, so drift in the machine's load falls on both).
 *
 * Turnpike serves the model embedded (`turnpike serve --model bench=…`, its own process, an operator
 * key) and is called over HTTP at `POST /v1/embeddings`; `--via engine` (or `auto` when that route
 * answers 404) calls the embedded engine in this process instead (`LlamaCppEngine.prepareEmbeddings`),
 * without HTTP. llama-server runs with `--embeddings --pooling mean --kv-unified` (without the last,
 * inputs sharing a batch get wrong vectors), `--parallel` the largest concurrency (a slot per request
 * in flight) and the same threads, built from the llama.cpp source
 * node-llama-cpp ships and run with node-llama-cpp's own prebuilt CPU backends (the same kernels).
 *
 * For each concurrency C (default 1, 16, 64), each round sends `--requests` requests (default
 * max(16, 2C)) from C clients, each a request at a time, every request `--inputs` texts of about
 * `--words` words, different for every request and round. Per side and round: inputs/s and
 * tokens/s (usage.prompt_tokens summed ÷ the round's wall time) and the load average at its end.
 * Each side's round starts once the machine is quiet (`untilQuiet`: llama-server's threads spin for
 * a few hundred milliseconds after its last request). Medians over rounds, the ratios Turnpike ÷ llama-server (and the median of per-round ratios), and
 * the least cosine between the two sides' vectors of the same input (they should agree). `--threads`
 * takes a list (e.g. 1,2): both sides are restarted with each, the same on both. Turnpike gets
 * `--parallel` the largest concurrency too (its embedding lanes are min(threads, parallel, 8)).
 * JSON to bench/results/embeddings.json.
 *
 *   node bench/embeddings.ts [--concurrency 1,16,64] [--rounds 3] [--warmup 1] [--requests N]
 *     [--inputs 1] [--words 24] [--threads 1[,2…]] [--context-size 512] [--batch-size 512]
 *     [--via auto|http|engine] [--model file.gguf] [--out bench/results/embeddings.json]
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Agent, fetch } from "undici";
import { benchModelPath, buildScript, loadedCpuBackend, startLlamaServer, withNodeLlamaCppCpuBackends, type RunningLlamaServer } from "../test/helpers/llama-server.ts";
import { derivedModel } from "../test/helpers/gguf-derive.ts";
import { cosine } from "../test/helpers/vectors.ts";
import { LlamaCppEngine } from "../src/engines/llamacpp/llamacpp-engine.ts";
import { createRuntimeLoader } from "../src/engines/llamacpp/runtime.ts";
import { startTurnpikeChild, type TurnpikeChild } from "./turnpike-child.ts";
import { median } from "./streamed-completion.ts";

const benchDir = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(benchDir, "..");
const { values: flags } = parseArgs({
  options: {
    concurrency: { type: "string", default: "1,16,64" },
    rounds: { type: "string", default: "3" },
    warmup: { type: "string", default: "1" },
    requests: { type: "string" },
    inputs: { type: "string", default: "1" },
    words: { type: "string", default: "24" },
    threads: { type: "string", default: "1" },
    "context-size": { type: "string", default: "512" },
    "batch-size": { type: "string", default: "512" },
    via: { type: "string", default: "auto" },
    model: { type: "string" },
    out: { type: "string", default: path.join(benchDir, "results", "embeddings.json") },
  },
});

function positiveInteger(name: string, value: string, minimum = 1): number {
  const number = Number(value);
  if (!Number.isInteger(number) || number < minimum) throw new Error(`--${name} must be an integer ≥ ${minimum}, got '${value}'`);
  return number;
}
const concurrencies = flags.concurrency.split(",").map((value) => positiveInteger("concurrency", value.trim()));
const rounds = positiveInteger("rounds", flags.rounds);
const warmupRounds = positiveInteger("warmup", flags.warmup, 0);
const inputsPerRequest = positiveInteger("inputs", flags.inputs);
const words = positiveInteger("words", flags.words);
const threadCounts = flags.threads.split(",").map((value) => positiveInteger("threads", value.trim()));
const contextSize = positiveInteger("context-size", flags["context-size"], 64);
const batchSize = positiveInteger("batch-size", flags["batch-size"], 32);
if (!["auto", "http", "engine"].includes(flags.via)) throw new Error(`--via must be auto, http or engine, got '${flags.via}'`);
const requestsFor = (concurrency: number) => (flags.requests === undefined ? Math.max(16, 2 * concurrency) : positiveInteger("requests", flags.requests));
const slots = Math.max(...concurrencies);
const MODEL_ID = "bench";
const SIDES = ["llama-server", "turnpike"] as const;
type Side = (typeof SIDES)[number];

/** One side's way to embed a request's texts: the vectors and the tokens counted. */
type Embed = (texts: string[]) => Promise<{ vectors: ArrayLike<number>[]; promptTokens: number }>;
type RoundResult = { threads: number; load: number; round: number; side: Side; concurrency: number; requests: number; wallMs: number; inputsPerSecond: number; tokensPerSecond: number; tokens: number };

const WORDS = ["cat", "dog", "ball", "garden", "tree", "happy", "little", "big", "red", "sun", "went", "saw", "play", "house", "girl", "boy", "friend", "bird", "sky", "day"];
/** About `words` words, different for every concurrency, round, request and input. */
function textFor(concurrency: number, round: number, request: number, input: number): string {
  let seed = (concurrency * 7_919 + round * 104_729 + request * 1_299_709 + input * 15_485_863) >>> 0;
  const picked: string[] = [`Story ${concurrency}-${round}-${request}-${input}:`];
  for (let index = 0; index < words; index++) {
    seed = (Math.imul(seed, 1_664_525) + 1_013_904_223) >>> 0;
    picked.push(WORDS[seed % WORDS.length]!);
  }
  return picked.join(" ");
}

/** The benchmark model with mean pooling (an embedding model to both sides), made once into the temp folder. */
function embeddingBenchModel(): string {
  if (flags.model !== undefined) return path.resolve(flags.model);
  return derivedModel(benchModelPath(), "bench-embedding", { set: { "llama.pooling_type": { type: "u32", value: 1 } } });
}

/** llama-server, built if missing, copied beside node-llama-cpp's prebuilt CPU backends (see vs-llama-server.ts). */
function llamaServerBinary(): { server: string; remove: () => void } {
  process.stderr.write(`llama-server: ${buildScript} (builds once when missing, 20–40 minutes)\n`);
  const output = execFileSync("bash", [buildScript], { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  const built = output.trim().split("\n").at(-1)!;
  if (!fs.existsSync(built)) throw new Error(`the build script printed ${built}, which is not there`);
  const copy = withNodeLlamaCppCpuBackends();
  return { server: copy.server, remove: copy.remove };
}

/** POST /v1/embeddings, float vectors; throws on any status but 200. */
function httpEmbed(agent: Agent, origin: string, headers: Record<string, string>): Embed {
  return async (texts) => {
    const response = await fetch(`${origin}/v1/embeddings`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify({ model: MODEL_ID, input: texts, encoding_format: "float" }),
      dispatcher: agent,
    });
    const text = await response.text();
    if (response.status !== 200) throw new Error(`${origin} answered ${response.status}: ${text.slice(0, 300)}`);
    const body = JSON.parse(text) as { data: Array<{ index: number; embedding: number[] }>; usage: { prompt_tokens: number } };
    const vectors = [...body.data].sort((a, b) => a.index - b.index).map((item) => item.embedding);
    return { vectors, promptTokens: body.usage.prompt_tokens };
  };
}

/** Does Turnpike serve POST /v1/embeddings (a 404 `unknown_url` when the route is not there)? */
async function turnpikeHasRoute(child: TurnpikeChild, agent: Agent): Promise<boolean> {
  const response = await fetch(`${child.origin}/v1/embeddings`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${child.key}` },
    body: JSON.stringify({ model: MODEL_ID, input: ["probe"] }),
    dispatcher: agent,
  });
  await response.arrayBuffer();
  return response.status !== 404;
}

function engineEmbed(engine: LlamaCppEngine): Embed {
  return async (texts) => {
    const prepared = await engine.prepareEmbeddings!({ inputs: texts.map((text) => ({ text })), truncate: false });
    const result = await prepared.run(new AbortController().signal);
    return { vectors: result.vectors, promptTokens: result.usage.promptTokens };
  };
}


/** `requests` requests from `concurrency` clients, a request at a time each; the first request's vectors kept. */
async function runRound(embed: Embed, concurrency: number, round: number, requests: number): Promise<{ wallMs: number; tokens: number; first: ArrayLike<number>[] }> {
  let next = 0;
  let tokens = 0;
  let first: ArrayLike<number>[] = [];
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < requests) {
        const request = next++;
        const texts = Array.from({ length: inputsPerRequest }, (_, input) => textFor(concurrency, round, request, input));
        const result = await embed(texts);
        if (result.vectors.length !== texts.length) throw new Error(`${result.vectors.length} vectors for ${texts.length} inputs`);
        tokens += result.promptTokens;
        if (request === 0) first = result.vectors;
      }
    }),
  );
  return { wallMs: performance.now() - started, tokens, first };
}

let llama: RunningLlamaServer | undefined;
let turnpike: TurnpikeChild | undefined;
let engine: LlamaCppEngine | undefined;
const agents: Agent[] = [];
async function stopAll(): Promise<void> {
  await Promise.all(agents.splice(0).map((agent) => agent.close().catch(() => undefined)));
  await turnpike?.cleanup().catch(() => undefined);
  await engine?.close().catch(() => undefined);
  await llama?.close().catch(() => undefined);
  turnpike = undefined;
  engine = undefined;
  llama = undefined;
}

const started = Date.now();
const loadBefore = os.loadavg();
const modelPath = embeddingBenchModel();
const binary = llamaServerBinary();
process.once("SIGINT", () => void stopAll().then(() => {
  binary.remove();
  process.exit(130);
}));
const roundResults: RoundResult[] = [];
let via: "http" | "engine" = flags.via === "engine" ? "engine" : "http";
const leastCosine = new Map<number, number>();

/** The machine's busy CPU time so far, in clock ticks (every core: /proc/stat's first line less idle and iowait). */
function busyTicks(): number {
  const fields = fs.readFileSync("/proc/stat", "utf8").split("\n", 1)[0]!.trim().split(/\s+/).slice(1).map(Number);
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = fields;
  return user + nice + system + irq + softirq + steal;
}

/**
 * Waits until the machine has been quiet for 100 ms (at most 2 ticks, 20 ms of CPU, over all its
 * cores), or 3 s at most on a machine that other jobs keep busy.
 */
async function untilQuiet(): Promise<void> {
  const deadline = performance.now() + 3000;
  let before = busyTicks();
  while (performance.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    const now = busyTicks();
    if (now - before <= 2) return;
    before = now;
  }
}

/** Both sides with `threads` threads, every concurrency's rounds, then both stopped. */
async function runThreads(threads: number): Promise<void> {
  let least = Number.POSITIVE_INFINITY;
  try {
    process.stderr.write(`model ${modelPath}\nstarting llama-server (${threads} thread(s), ${slots} slots × ${contextSize} tokens, batch ${batchSize})…\n`);
    llama = await startLlamaServer({
      binary: binary.server,
      model: modelPath,
      threads,
      parallel: slots,
      contextSize: contextSize * slots,
      // `--kv-unified`: with a KV cache stream per slot, llama-server pools the inputs sharing a batch wrongly (test/embeddings-llama-server.test.ts).
      extraArgs: ["--embeddings", "--pooling", "mean", "--kv-unified", "--batch-size", String(batchSize), "--ubatch-size", String(batchSize)],
      startTimeoutMs: 120_000,
    });
    process.stderr.write(`llama-server runs node-llama-cpp's CPU backend ${path.basename(loadedCpuBackend(llama.process.pid!) ?? "(none mapped?)")}\n`);
    const agentFor = () => {
      const agent = new Agent({ keepAliveTimeout: 60_000, connections: slots });
      agents.push(agent);
      return agent;
    };
    const embedders: Partial<Record<Side, Embed>> = { "llama-server": httpEmbed(agentFor(), llama.url, {}) };
    if (via === "http") {
      turnpike = await startTurnpikeChild({
        tempPrefix: "turnpike-bench-embeddings-",
        readyTimeoutMs: 120_000,
        serveArgs: (dataDir, port) => [
          "--host", "127.0.0.1", "--port", String(port), "--data-dir", dataDir, "--log-level", "warn",
          "--model", `${MODEL_ID}=${modelPath}`, "--threads", String(threads), "--context-size", String(contextSize),
          "--parallel", String(Math.min(64, slots)), "--gpu", "cpu", "--queue-size", String(Math.max(64, slots * 2)),
        ],
      });
      const agent = agentFor();
      if (await turnpikeHasRoute(turnpike, agent)) {
        embedders.turnpike = httpEmbed(agent, turnpike.origin, { authorization: `Bearer ${turnpike.key}` });
      } else if (flags.via === "auto") {
        process.stderr.write("Turnpike has no POST /v1/embeddings route in this checkout: benchmarking the embedded engine directly (no HTTP)\n");
        await turnpike.cleanup();
        turnpike = undefined;
        via = "engine";
      } else {
        throw new Error("Turnpike answered 404 at POST /v1/embeddings (--via http)");
      }
    }
    if (via === "engine") {
      engine = new LlamaCppEngine({
        modelId: MODEL_ID,
        source: { path: modelPath },
        dataDir: os.tmpdir(),
        llama: createRuntimeLoader({ threads, gpu: "cpu" }),
        contextSize,
        parallel: Math.min(64, slots),
        queueSize: Math.max(64, slots * 2),
        threads,
      });
      await engine.open();
      if (engine.status().state !== "ready") throw new Error(`the engine did not load: ${JSON.stringify(engine.status())}`);
      embedders.turnpike = engineEmbed(engine);
    }

    for (const concurrency of concurrencies) {
      const requests = requestsFor(concurrency);
      const total = warmupRounds + rounds;
      process.stderr.write(`${threads} thread(s), ${concurrency} concurrent: ${total} rounds (${warmupRounds} warm-up) × 2 sides × ${requests} requests × ${inputsPerRequest} input(s)\n`);
      for (let round = 0; round < total; round++) {
        const order: Side[] = round % 2 === 0 ? ["llama-server", "turnpike"] : ["turnpike", "llama-server"];
        const line: string[] = [];
        const firsts: Partial<Record<Side, ArrayLike<number>[]>> = {};
        for (const side of order) {
          // Each side starts on a quiet machine: llama-server's threads spin on for a few hundred
          // milliseconds after its last request, which slowed whatever ran next by up to 20%.
          await untilQuiet();
          const { wallMs, tokens, first } = await runRound(embedders[side]!, concurrency, round, requests);
          firsts[side] = first;
          const inputs = requests * inputsPerRequest;
          const load = os.loadavg()[0]!;
          const result: RoundResult = { threads, load, round: round - warmupRounds, side, concurrency, requests, wallMs, tokens, inputsPerSecond: inputs / (wallMs / 1000), tokensPerSecond: tokens / (wallMs / 1000) };
          if (round >= warmupRounds) roundResults.push(result);
          line.push(`${side} ${result.inputsPerSecond.toFixed(1)} inputs/s, ${result.tokensPerSecond.toFixed(0)} tok/s`);
        }
        firsts.turnpike!.forEach((vector, index) => {
          least = Math.min(least, cosine(vector, firsts["llama-server"]![index]!));
        });
        process.stderr.write(`  ${round < warmupRounds ? "warm-up" : `round ${round - warmupRounds}`}: ${line.join("; ")} (load ${os.loadavg()[0]!.toFixed(2)})\n`);
      }
    }
  } finally {
    leastCosine.set(threads, least);
    await stopAll();
  }
}

try {
  for (const threads of threadCounts) await runThreads(threads);
} finally {
  await stopAll();
  binary.remove();
}
const loadAfter = os.loadavg();

type Row = { threads: number; concurrency: number; side: Side; inputsPerSecond: number; tokensPerSecond: number; load: number };
const rows: Row[] = [];
const resultsOf = (threads: number, concurrency: number, side?: Side) =>
  roundResults.filter((result) => result.threads === threads && result.concurrency === concurrency && (side === undefined || result.side === side));
for (const threads of threadCounts) {
  for (const concurrency of concurrencies) {
    for (const side of SIDES) {
      const mine = resultsOf(threads, concurrency, side);
      rows.push({
        threads,
        concurrency,
        side,
        inputsPerSecond: median(mine.map((result) => result.inputsPerSecond)),
        tokensPerSecond: median(mine.map((result) => result.tokensPerSecond)),
        load: median(mine.map((result) => result.load)),
      });
    }
  }
}
const rowOf = (threads: number, concurrency: number, side: Side) => rows.find((row) => row.threads === threads && row.concurrency === concurrency && row.side === side)!;
/** The median over rounds of Turnpike ÷ llama-server within the same round. */
function pairedRatio(threads: number, concurrency: number): number {
  const ratios: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const mine = resultsOf(threads, concurrency).filter((result) => result.round === round);
    const a = mine.find((result) => result.side === "llama-server");
    const b = mine.find((result) => result.side === "turnpike");
    if (a !== undefined && b !== undefined) ratios.push(b.inputsPerSecond / a.inputsPerSecond);
  }
  return median(ratios);
}
const ratios = threadCounts.flatMap((threads) =>
  concurrencies.map((concurrency) => {
    const loads = resultsOf(threads, concurrency).map((result) => result.load);
    return {
      threads,
      concurrency,
      inputs: rowOf(threads, concurrency, "turnpike").inputsPerSecond / rowOf(threads, concurrency, "llama-server").inputsPerSecond,
      paired: pairedRatio(threads, concurrency),
      load: [Math.min(...loads), Math.max(...loads)],
    };
  }),
);

const format = (value: number | undefined, digits: number) => (value !== undefined && Number.isFinite(value) ? value.toFixed(digits) : "");
const loads = (load: number[]) => load.map((value) => value.toFixed(2)).join(" ");
const lines: string[] = [
  `## Embeddings: Turnpike (${via === "http" ? "HTTP POST /v1/embeddings" : "the embedded engine called directly, no HTTP"}) vs llama-server: ${rounds} rounds (+${warmupRounds} warm-up) per concurrency`,
  "",
  `model ${path.basename(modelPath)}; threads ${threadCounts.join(", ")} (the same on both sides), ${contextSize} tokens per input, batch ${batchSize}, llama-server ${slots} slots, Turnpike --parallel ${Math.min(64, slots)}; ` +
    `${inputsPerRequest} input(s) of ~${words} words a request; ${os.availableParallelism()} CPUs, Node ${process.version}; load average before ${loads(loadBefore)}, after ${loads(loadAfter)}`,
  "",
  "| threads | concurrency | side | inputs/s | tokens/s | load (median of rounds) |",
  "| ---: | ---: | --- | ---: | ---: | ---: |",
  ...rows.map((row) => `| ${row.threads} | ${row.concurrency} | ${row.side} | ${format(row.inputsPerSecond, 1)} | ${format(row.tokensPerSecond, 0)} | ${format(row.load, 2)} |`),
  "",
  "Turnpike ÷ llama-server, inputs/s (medians; the median of per-round ratios in brackets; goal ≥ 0.95), and the 1-minute load average over its rounds:",
  "",
  "| threads | concurrency | ratio | load |",
  "| ---: | ---: | ---: | ---: |",
  ...ratios.map((ratio) => `| ${ratio.threads} | ${ratio.concurrency} | ${format(ratio.inputs, 3)} [${format(ratio.paired, 3)}] | ${format(ratio.load[0], 2)}–${format(ratio.load[1], 2)} |`),
  "",
  `Least cosine between the two sides' vectors of the same input: ${threadCounts.map((threads) => `${format(leastCosine.get(threads), 6)} (${threads} thread(s))`).join(", ")}.`,
];
console.log(`\n${lines.join("\n")}`);

const report = {
  when: new Date().toISOString(),
  seconds: (Date.now() - started) / 1000,
  cpus: os.availableParallelism(),
  node: process.version,
  loadAverage: { before: loadBefore, after: loadAfter },
  settings: { model: modelPath, via, concurrencies, rounds, warmupRounds, inputsPerRequest, words, threads: threadCounts, contextSize, batchSize, slots },
  rows,
  ratios,
  leastCosine: Object.fromEntries(leastCosine),
  perRound: roundResults,
};
fs.mkdirSync(path.dirname(flags.out), { recursive: true });
fs.writeFileSync(flags.out, `${JSON.stringify(report, null, 2)}\n`);
process.stderr.write(`wrote ${flags.out}\n`);
