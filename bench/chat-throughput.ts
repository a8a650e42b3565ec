/**
 * Chat throughput: tokens/s and time to first token for 1 and 4 concurrent streaming chat
 * completions, through the Turnpike server over real HTTP and through node-llama-cpp called
 * directly in-process (same model, context size per sequence, sequences, 1 thread, temperature 0,
 * max tokens and rendered prompt). Prints a table with the server/direct ratios and writes JSON
 * to bench/results/chat-throughput.json.
 *
 *   node_modules/.bin/node bench/chat-throughput.ts [--model file.gguf] [--rounds 20] [--warmup 2]
 *     [--max-tokens 128] [--context-size 2048] [--out bench/results/chat-throughput.json]
 *
 * The two sides take turns round by round in this process (direct first in even rounds, the server
 * first in odd ones), never at the same time, so drift in the machine's load falls on both alike.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Worker } from "node:worker_threads";
import { getLlama, LlamaLogLevel, resolveChatWrapper, type Token } from "node-llama-cpp";
import { loadSettings } from "../src/config/load.ts";
import { startServer, createLogger } from "../src/main.ts";
import { openStore } from "../src/store/open.ts";
import { createApiKey } from "../src/auth/api-keys.ts";
import { renderChatPrompt } from "../src/engines/llamacpp/chat-prompt.ts";
import type { EngineMessage } from "../src/engines/engine.ts";
import { streamClient, type StreamResult } from "./stream-client.ts";

const benchDir = path.dirname(fileURLToPath(import.meta.url));
const { values: flags } = parseArgs({
  options: {
    model: { type: "string", default: path.resolve(benchDir, "../../shared/models/stories260K.gguf") },
    rounds: { type: "string", default: "20" },
    warmup: { type: "string", default: "2" },
    "max-tokens": { type: "string", default: "128" },
    "context-size": { type: "string", default: "2048" },
    /** Where the HTTP client runs: `same` (this thread) or `thread` (a worker thread of its own). */
    client: { type: "string", default: "same" },
    out: { type: "string", default: path.join(benchDir, "results", "chat-throughput.json") },
  },
});

const modelPath = path.resolve(flags.model);
const rounds = Number(flags.rounds);
const warmupRounds = Number(flags.warmup);
const maxTokens = Number(flags["max-tokens"]);
const contextSize = Number(flags["context-size"]);
/** Sequences in the context on both sides (the server's `parallel`). */
const SEQUENCES = 4;
const CONCURRENCIES = [1, 4] as const;
const THREADS = 1;

/** One stream's measurements (`ttftMs`: from sending the request to the first generated text). */
/** One round: `concurrency` streams started together; `wallMs` until the last one ended. */
type RoundResult = { wallMs: number; streams: StreamResult[] };
/** Runs one stream for the given messages. */
type RunStream = (messages: EngineMessage[]) => Promise<StreamResult>;

/** Different per round and stream, early in the prompt, so neither side reuses a cached prefix. */
function messagesFor(round: number, stream: number): EngineMessage[] {
  return [{ role: "user", content: `Story ${round}-${stream}: tell me a story about a little cat and a big red ball.` }];
}

/** A side of the comparison: runs streams until closed. */
type Side = { runStream: RunStream; close(): Promise<void> };

/** One round: `concurrency` streams started together, timed until the last one ends. */
async function runRound(side: Side, concurrency: number, round: number): Promise<RoundResult> {
  const started = performance.now();
  const streams = await Promise.all(Array.from({ length: concurrency }, (_, stream) => side.runStream(messagesFor(round, stream))));
  return { wallMs: performance.now() - started, streams };
}

async function openDirect(): Promise<Side> {
  const llama = await getLlama({
    gpu: false,
    build: "never",
    skipDownload: true,
    progressLogs: false,
    maxThreads: THREADS,
    logLevel: LlamaLogLevel.error,
    logger: () => {},
  });
  const model = await llama.loadModel({ modelPath });
  const context = await model.createContext({
    contextSize: Math.min(contextSize, model.trainContextSize || contextSize),
    sequences: SEQUENCES,
    threads: THREADS,
  });
  const wrapper = resolveChatWrapper(model);
  const free = Array.from({ length: SEQUENCES }, () => context.getSequence());
  const runStream: RunStream = async (messages) => {
    const sequence = free.pop()!;
    try {
      await sequence.clearHistory();
      const started = performance.now();
      const prompt = renderChatPrompt(model, wrapper, messages);
      const generated: Token[] = [];
      let firstAt: number | undefined;
      for await (const token of sequence.evaluate(prompt.tokens, { temperature: 0, yieldEogToken: true })) {
        firstAt ??= performance.now();
        // Counted like the server's usage: the end-of-generation token is a completion token too.
        generated.push(token);
        if (model.isEogToken(token) || prompt.stopTokens.has(token) || generated.length >= maxTokens) break;
      }
      const endedAt = performance.now();
      const text = model.detokenize(generated.filter((token) => !model.isEogToken(token) && !prompt.stopTokens.has(token)));
      return { ttftMs: (firstAt ?? endedAt) - started, totalMs: endedAt - started, completionTokens: generated.length, text };
    } finally {
      free.push(sequence);
    }
  };
  return {
    runStream,
    close: async () => {
      await context.dispose();
      await model.dispose();
    },
  };
}

async function openServer(): Promise<Side & { modelId: string }> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-bench-"));
  const settings = loadSettings({
    flags: {
      models: [modelPath],
      port: "0",
      threads: String(THREADS),
      gpu: "cpu",
      parallel: String(SEQUENCES),
      data_dir: dataDir,
      context_size: String(contextSize),
      log_level: "silent",
    },
    env: {},
  });
  const database = await openStore({ dataDir });
  const { key } = await createApiKey(database, { name: "bench" });
  await database.destroy();
  const server = await startServer(settings, createLogger("silent"));
  const modelId = settings.models[0]!.id;
  await server.modelsSettled;
  const request = (messages: EngineMessage[]) => ({ model: modelId, messages, maxTokens });
  let runStream: RunStream;
  let worker: Worker | undefined;
  if (flags.client === "thread") {
    const thread = new Worker(new URL("./stream-client.ts", import.meta.url), { workerData: { streamClient: true, baseURL: `${server.url}/v1`, apiKey: key } });
    worker = thread;
    const waiting = new Map<number, { resolve: (result: StreamResult) => void; reject: (error: Error) => void }>();
    thread.on("message", ({ id, result, error }: { id: number; result?: StreamResult; error?: string }) => {
      const entry = waiting.get(id)!;
      waiting.delete(id);
      if (error !== undefined) entry.reject(new Error(error));
      else entry.resolve(result!);
    });
    let next = 0;
    runStream = (messages) =>
      new Promise((resolve, reject) => {
        const id = next++;
        waiting.set(id, { resolve, reject });
        thread.postMessage({ id, request: request(messages) });
      });
  } else {
    const run = streamClient(`${server.url}/v1`, key);
    runStream = (messages) => run(request(messages));
  }
  return {
    modelId,
    runStream,
    close: async () => {
      await worker?.terminate();
      await server.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** Medians over the rounds: aggregate tokens/s (all streams' tokens / round wall time), per-stream tokens/s and TTFT. */
function summarize(roundResults: RoundResult[]) {
  const streams = roundResults.flatMap((round) => round.streams);
  return {
    tokensPerSecond: median(roundResults.map((round) => round.streams.reduce((sum, stream) => sum + stream.completionTokens, 0) / (round.wallMs / 1000))),
    perStreamTokensPerSecond: median(streams.map((stream) => stream.completionTokens / (stream.totalMs / 1000))),
    ttftMs: median(streams.map((stream) => stream.ttftMs)),
    completionTokens: median(streams.map((stream) => stream.completionTokens)),
  };
}

const benchStarted = performance.now();
const directSide = await openDirect();
const serverSide = await openServer();
const modelId = serverSide.modelId;
const direct = new Map<number, RoundResult[]>();
const served = new Map<number, RoundResult[]>();
try {
  for (const concurrency of CONCURRENCIES) {
    direct.set(concurrency, []);
    served.set(concurrency, []);
    for (let round = 0; round < warmupRounds + rounds; round++) {
      const id = concurrency * 1000 + round;
      const order = round % 2 === 0 ? (["direct", "server"] as const) : (["server", "direct"] as const);
      for (const name of order) {
        const result = await runRound(name === "direct" ? directSide : serverSide, concurrency, id);
        if (round >= warmupRounds) (name === "direct" ? direct : served).get(concurrency)!.push(result);
      }
    }
  }
} finally {
  await serverSide.close();
  await directSide.close();
}

const rows = CONCURRENCIES.map((concurrency) => {
  const directRounds = direct.get(concurrency)!;
  const serverRounds = served.get(concurrency)!;
  const directSummary = summarize(directRounds);
  const serverSummary = summarize(serverRounds);
  // Same prompts on both sides and temperature 0: the texts should match stream for stream.
  const pairs = directRounds.flatMap((round, index) => round.streams.map((stream, slot) => [stream, serverRounds[index]!.streams[slot]!] as const));
  const sameOutput = pairs.filter(([left, right]) => left.text === right.text && left.completionTokens === right.completionTokens).length;
  return {
    concurrency,
    direct: directSummary,
    server: serverSummary,
    ratio: {
      tokensPerSecond: serverSummary.tokensPerSecond / directSummary.tokensPerSecond,
      ttft: serverSummary.ttftMs / directSummary.ttftMs,
    },
    sameOutput: `${sameOutput}/${pairs.length}`,
    rounds: { direct: directRounds, server: serverRounds },
  };
});

const fixed = (value: number, digits: number) => value.toFixed(digits);
const table = [
  ["streams", "direct tok/s", "server tok/s", "tok/s ratio", "direct TTFT ms", "server TTFT ms", "TTFT ratio", "tokens (median)", "same output"],
  ...rows.map((row) => [
    String(row.concurrency),
    fixed(row.direct.tokensPerSecond, 0),
    fixed(row.server.tokensPerSecond, 0),
    fixed(row.ratio.tokensPerSecond, 2),
    fixed(row.direct.ttftMs, 2),
    fixed(row.server.ttftMs, 2),
    fixed(row.ratio.ttft, 2),
    `${row.direct.completionTokens}/${row.server.completionTokens}`,
    row.sameOutput,
  ]),
];
const widths = table[0]!.map((_, column) => Math.max(...table.map((line) => line[column]!.length)));
console.log(`model ${modelId} (${modelPath}), ${THREADS} thread, ${SEQUENCES} sequences x ${contextSize} tokens, max_tokens ${maxTokens}, temperature 0, HTTP client in ${flags.client === "thread" ? "a worker thread" : "the server's thread"}`);
console.log(`${rounds} rounds after ${warmupRounds} warm-up; medians; tok/s = all streams' completion tokens / round wall time\n`);
for (const line of table) console.log(line.map((cell, column) => (column === 0 ? cell.padEnd(widths[column]!) : cell.padStart(widths[column]!))).join("  "));
const totalSeconds = (performance.now() - benchStarted) / 1000;
console.log(`\nratios are server/direct; took ${fixed(totalSeconds, 1)} s`);

fs.mkdirSync(path.dirname(flags.out), { recursive: true });
fs.writeFileSync(
  flags.out,
  JSON.stringify(
    {
      benchmark: "chat-throughput",
      date: new Date().toISOString(),
      node: process.version,
      cpus: os.availableParallelism(),
      settings: { model: modelPath, modelId, threads: THREADS, sequences: SEQUENCES, contextSize, maxTokens, temperature: 0, rounds, warmupRounds, client: flags.client },
      results: rows,
      totalSeconds,
    },
    null,
    2,
  ) + "\n",
);
console.log(`wrote ${path.relative(process.cwd(), flags.out)}`);
