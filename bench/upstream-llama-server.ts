/**
 * What Turnpike costs in front of a real llama-server: the benchmark model (`benchModelPath()`)
 * on llama-server (1 thread, one slot), called directly and through Turnpike (its own process,
 * `bin/turnpike.js serve`, an operator key, the model entry `{ upstream: { kind: "llama-server" } }`),
 * the two variants taking turns request by request in one run (direct first in even rounds). Both
 * variants of a round send the same streamed chat completion of `--max-tokens` tokens at
 * temperature 0, the end-of-text token banned with `logit_bias` so that every reply runs to the
 * limit, and the slot's prompt cache is erased before each request (`/slots/0?action=erase`), so
 * both evaluate the whole prompt. Per request, on the client side:
 *
 *   TTFT     from sending the request to the first chunk with content
 *   decode   tokens after the first ÷ time from the first to the last content chunk
 *
 * and llama-server's own view of the same request (its `print_timing` log lines: prompt and
 * decode time), as a cross-check that the server did the same work in both variants. Prints the
 * medians per variant and the ratios (through Turnpike ÷ direct; the goals: decode ≥ 0.98×,
 * TTFT ≤ 1.05×), and writes JSON to bench/results/upstream-llama-server.json.
 *
 *   node bench/upstream-llama-server.ts [--rounds 20] [--warmup 2] [--max-tokens 128]
 *     [--context-size 1024] [--model file.gguf] [--out bench/results/upstream-llama-server.json]
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Agent } from "undici";
import { benchModelPath, startLlamaServer, type RunningLlamaServer } from "../test/helpers/llama-server.ts";
import { startTurnpikeChild, type TurnpikeChild } from "./turnpike-child.ts";
import { endOfTextToken, median, streamCompletion, type StreamTarget, type StreamedCompletion } from "./streamed-completion.ts";

const benchDir = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(benchDir, "..");
const { values: flags } = parseArgs({
  options: {
    rounds: { type: "string", default: "20" },
    warmup: { type: "string", default: "2" },
    "max-tokens": { type: "string", default: "128" },
    "context-size": { type: "string", default: "1024" },
    model: { type: "string" },
    out: { type: "string", default: path.join(benchDir, "results", "upstream-llama-server.json") },
  },
});

function positiveInteger(name: string, value: string, minimum = 1): number {
  const number = Number(value);
  if (!Number.isInteger(number) || number < minimum) throw new Error(`--${name} must be an integer ≥ ${minimum}, got '${value}'`);
  return number;
}
const rounds = positiveInteger("rounds", flags.rounds);
const warmupRounds = positiveInteger("warmup", flags.warmup, 0);
const maxTokens = positiveInteger("max-tokens", flags["max-tokens"], 2);
const contextSize = positiveInteger("context-size", flags["context-size"], 64);
const THREADS = 1;
const MODEL_ID = "bench";

const VARIANTS = ["direct", "turnpike"] as const;
type VariantId = (typeof VARIANTS)[number];

/** llama-server's own timings of one request, from its log. */
type ServerTimings = { promptTokens: number; promptMs: number; decodedTokens: number; decodeMs: number; decodeTokensPerSecond: number };

/** One request as the client saw it, and what llama-server and Turnpike's process say of it. */
type Sample = StreamedCompletion & {
  round: number;
  variant: VariantId;
  server: ServerTimings | undefined;
  /** CPU time Turnpike's process spent during the request (/proc, 10 ms ticks); during a direct request, its background work. */
  turnpikeCpuMs: number | undefined;
};

/** Different for every round (the two variants of a round send the same, after the slot's cache is erased). */
function messagesFor(round: number): Array<{ role: string; content: string }> {
  return [{ role: "user", content: `Story ${round}: tell me a long story about a little cat, a big red ball and the garden behind the old house.` }];
}

/** Empties the (only) slot's prompt cache, so the next request evaluates its whole prompt. */
async function eraseSlotCache(server: RunningLlamaServer): Promise<void> {
  const response = await fetch(`${server.url}/slots/0?action=erase`, { method: "POST" });
  if (response.status !== 200) throw new Error(`erasing llama-server's slot failed: ${response.status} ${await response.text()}`);
  await response.arrayBuffer().catch(() => undefined);
}

/** The `print_timing` lines llama-server logged so far (one pair per finished request). */
function serverTimings(log: string): ServerTimings[] {
  const found: ServerTimings[] = [];
  const pattern = /prompt eval time =\s*([\d.]+) ms \/\s*(\d+) tokens[^\n]*\n[^\n]*?\beval time =\s*([\d.]+) ms \/\s*(\d+) tokens \([^,]*,\s*([\d.]+) tokens per second\)/g;
  for (const match of log.matchAll(pattern)) {
    found.push({
      promptMs: Number(match[1]),
      promptTokens: Number(match[2]),
      decodeMs: Number(match[3]),
      decodedTokens: Number(match[4]),
      decodeTokensPerSecond: Number(match[5]),
    });
  }
  return found;
}

/** Turnpike in its own process serving the model from llama-server (a config file with the upstream entry). */
function startTurnpike(llamaUrl: string): Promise<TurnpikeChild> {
  return startTurnpikeChild({
    tempPrefix: "turnpike-upstream-bench-",
    serveArgs: (dataDir, port) => {
      const configFile = path.join(dataDir, "config.json");
      const config = {
        host: "127.0.0.1",
        port,
        data_dir: dataDir,
        log_level: "warn",
        models: [{ id: MODEL_ID, upstream: { kind: "llama-server", urls: [llamaUrl] } }],
      };
      fs.writeFileSync(configFile, JSON.stringify(config, null, 2));
      return ["--config", configFile];
    },
  });
}

type Target = StreamTarget;

/** One streamed completion, timed on the client side from the raw SSE (the same parser for both variants). */
async function stream(agent: Agent, target: Target, body: Record<string, unknown>): Promise<Omit<Sample, "round" | "variant" | "server" | "turnpikeCpuMs">> {
  return streamCompletion(agent, target, body);
}

let llama: RunningLlamaServer | undefined;
let slotDir: string | undefined;
let turnpike: TurnpikeChild | undefined;
const agents: Agent[] = [];
async function stopAll(): Promise<void> {
  await Promise.all(agents.map((agent) => agent.close().catch(() => undefined)));
  await turnpike?.cleanup().catch(() => undefined);
  await llama?.close().catch(() => undefined);
  if (slotDir !== undefined) fs.rmSync(slotDir, { recursive: true, force: true });
}
process.once("SIGINT", () => void stopAll().then(() => process.exit(130)));

const started = Date.now();
const loadBefore = os.loadavg();
const samples: Sample[] = [];
let eosToken: number | undefined;
const modelPath = path.resolve(flags.model ?? benchModelPath());
try {
  process.stderr.write(`model ${modelPath}\nstarting llama-server (1 thread, 1 slot, ${contextSize} tokens)…\n`);
  // --slot-save-path only enables the slot actions: the cache is erased before every request, never saved.
  slotDir = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-upstream-bench-slots-"));
  llama = await startLlamaServer({ model: modelPath, threads: THREADS, parallel: 1, contextSize, extraArgs: ["--slot-save-path", slotDir] });
  eosToken = await endOfTextToken(llama.url);
  process.stderr.write("starting Turnpike…\n");
  turnpike = await startTurnpike(llama.url);

  const targets: Record<VariantId, Target> = {
    direct: { origin: llama.url, headers: {} },
    turnpike: { origin: turnpike.origin, headers: { authorization: `Bearer ${turnpike.key}` } },
  };
  const agentOf = Object.fromEntries(
    VARIANTS.map((variant) => {
      const agent = new Agent({ keepAliveTimeout: 60_000, connections: 1 });
      agents.push(agent);
      return [variant, agent];
    }),
  ) as Record<VariantId, Agent>;

  const total = warmupRounds + rounds;
  process.stderr.write(`measuring: ${total} rounds (${warmupRounds} warm-up) × 2 variants × ${maxTokens} tokens\n`);
  for (let round = 0; round < total; round++) {
    // Direct first in even rounds, Turnpike first in odd ones: drift in the machine's load falls on both.
    const order: VariantId[] = round % 2 === 0 ? ["direct", "turnpike"] : ["turnpike", "direct"];
    for (const variant of order) {
      const body = {
        model: MODEL_ID,
        messages: messagesFor(round),
        stream: true,
        stream_options: { include_usage: true },
        temperature: 0,
        max_tokens: maxTokens,
        logit_bias: { [String(eosToken)]: -100 },
      };
      // Both variants evaluate the whole prompt: nothing is left in the slot's cache from the last request.
      await eraseSlotCache(llama);
      const logged = serverTimings(llama.logs()).length;
      const cpuBefore = turnpike.child.cpuMs();
      const result = await stream(agentOf[variant], targets[variant], body);
      const cpuAfter = turnpike.child.cpuMs();
      const turnpikeCpuMs = cpuBefore !== undefined && cpuAfter !== undefined ? cpuAfter - cpuBefore : undefined;
      // llama-server logs its timings as the request ends; give the line a moment to arrive.
      let server: ServerTimings | undefined;
      for (let wait = 0; wait < 50 && server === undefined; wait++) {
        server = serverTimings(llama.logs())[logged];
        if (server === undefined) await new Promise((resolve) => setTimeout(resolve, 10));
      }
      if (round >= warmupRounds) samples.push({ round: round - warmupRounds, variant, ...result, server, turnpikeCpuMs });
    }
    const last = samples.filter((sample) => sample.round === round - warmupRounds);
    if (last.length > 0) {
      process.stderr.write(
        `round ${round - warmupRounds}: ${last.map((sample) => `${sample.variant} ttft ${sample.ttftMs.toFixed(1)} ms, ${sample.decodeTokensPerSecond.toFixed(1)} tok/s`).join("; ")}\n`,
      );
    }
  }
} finally {
  await stopAll();
}
const loadAfter = os.loadavg();

type Summary = {
  variant: VariantId;
  requests: number;
  ttftMs: number;
  decodeTokensPerSecond: number;
  totalMs: number;
  completionTokens: number;
  /** Requests that did not run to `--max-tokens`. */
  shortReplies: number;
  serverPromptMs: number;
  serverPromptTokens: number;
  serverDecodeTokensPerSecond: number;
  /** Median of TTFT − llama-server's prompt time per request: the path to and from the model, without its prompt work. */
  ttftBesidesPromptMs: number;
};
const summaries = VARIANTS.map((variant): Summary => {
  const mine = samples.filter((sample) => sample.variant === variant);
  const withServer = mine.filter((sample) => sample.server !== undefined);
  return {
    variant,
    requests: mine.length,
    ttftMs: median(mine.map((sample) => sample.ttftMs)),
    decodeTokensPerSecond: median(mine.map((sample) => sample.decodeTokensPerSecond)),
    totalMs: median(mine.map((sample) => sample.totalMs)),
    completionTokens: median(mine.map((sample) => sample.completionTokens)),
    shortReplies: mine.filter((sample) => sample.completionTokens < maxTokens).length,
    serverPromptMs: median(withServer.map((sample) => sample.server!.promptMs)),
    serverPromptTokens: median(withServer.map((sample) => sample.server!.promptTokens)),
    serverDecodeTokensPerSecond: median(withServer.map((sample) => sample.server!.decodeTokensPerSecond)),
    ttftBesidesPromptMs: median(withServer.map((sample) => sample.ttftMs - sample.server!.promptMs)),
  };
});
const [direct, through] = summaries as [Summary, Summary];
/** Per round, Turnpike's figure over direct's in the same round; the median of those. */
function pairedRatio(pick: (sample: Sample) => number): number {
  const ratios: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const a = samples.find((sample) => sample.round === round && sample.variant === "direct");
    const b = samples.find((sample) => sample.round === round && sample.variant === "turnpike");
    if (a !== undefined && b !== undefined) ratios.push(pick(b) / pick(a));
  }
  return median(ratios);
}
const ratios = {
  decode: through.decodeTokensPerSecond / direct.decodeTokensPerSecond,
  ttft: through.ttftMs / direct.ttftMs,
  decodePaired: pairedRatio((sample) => sample.decodeTokensPerSecond),
  ttftPaired: pairedRatio((sample) => sample.ttftMs),
  serverDecode: through.serverDecodeTokensPerSecond / direct.serverDecodeTokensPerSecond,
  serverPromptMs: through.serverPromptMs / direct.serverPromptMs,
};
/** Turnpike's CPU per request of a variant, all its measured requests together (the ticks are too coarse for one). */
function turnpikeCpuMsPer(variant: VariantId): number {
  const measured = samples.filter((sample) => sample.variant === variant && sample.turnpikeCpuMs !== undefined);
  return measured.length === 0 ? NaN : measured.reduce((sum, sample) => sum + sample.turnpikeCpuMs!, 0) / measured.length;
}
const turnpikeCpuMs = { perRequest: turnpikeCpuMsPer("turnpike"), duringDirect: turnpikeCpuMsPer("direct") };
let sameText = 0;
for (let round = 0; round < rounds; round++) {
  const texts = samples.filter((sample) => sample.round === round).map((sample) => sample.text);
  if (texts.length === 2 && texts[0] === texts[1]) sameText++;
}

const format = (value: number, digits: number) => (Number.isFinite(value) ? value.toFixed(digits) : "");
const loads = (load: number[]) => load.map((value) => value.toFixed(2)).join(" ");
const lines: string[] = [];
lines.push(
  `## Turnpike in front of llama-server: ${rounds} rounds (+${warmupRounds} warm-up), ${maxTokens}-token streams at temperature 0, ` +
    `1 thread, 1 slot, ${os.availableParallelism()} CPUs, Node ${process.version}`,
  "",
  `model ${path.basename(modelPath)}; end-of-text token ${eosToken} banned (logit_bias -100); load average before ${loads(loadBefore)}, after ${loads(loadAfter)}`,
  "",
  "| variant | requests | TTFT ms | decode tok/s | total ms | tokens | short replies | llama-server: prompt ms (tokens) | llama-server: decode tok/s | TTFT − prompt ms |",
  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
);
for (const summary of summaries) {
  lines.push(
    `| ${summary.variant} | ${summary.requests} | ${format(summary.ttftMs, 1)} | ${format(summary.decodeTokensPerSecond, 1)} | ${format(summary.totalMs, 0)} | ` +
      `${format(summary.completionTokens, 0)} | ${summary.shortReplies} | ${format(summary.serverPromptMs, 1)} (${format(summary.serverPromptTokens, 0)}) | ` +
      `${format(summary.serverDecodeTokensPerSecond, 1)} | ${format(summary.ttftBesidesPromptMs, 1)} |`,
  );
}
const verdict = (ok: boolean) => (ok ? "met" : "NOT met");
lines.push(
  "",
  `Through Turnpike ÷ direct (medians; per-round pairs in brackets): decode ${format(ratios.decode, 3)}× [${format(ratios.decodePaired, 3)}×] ` +
    `(goal ≥ 0.98: ${verdict(ratios.decode >= 0.98)}), TTFT ${format(ratios.ttft, 3)}× [${format(ratios.ttftPaired, 3)}×] (goal ≤ 1.05: ${verdict(ratios.ttft <= 1.05)}).`,
  `llama-server's own timings, Turnpike ÷ direct: decode ${format(ratios.serverDecode, 3)}×, prompt time ${format(ratios.serverPromptMs, 3)}×. ` +
    `TTFT besides llama-server's prompt work: +${format(through.ttftBesidesPromptMs - direct.ttftBesidesPromptMs, 1)} ms through Turnpike. ` +
    `Same text in ${sameText} of ${rounds} rounds. Turnpike's process: ${format(turnpikeCpuMs.perRequest, 1)} ms of CPU per request through it ` +
    `(${format(turnpikeCpuMs.duringDirect, 1)} ms while a direct request ran: its background work).`,
);
console.log(`\n${lines.join("\n")}`);

const report = {
  when: new Date().toISOString(),
  seconds: (Date.now() - started) / 1000,
  cpus: os.availableParallelism(),
  node: process.version,
  loadAverage: { before: loadBefore, after: loadAfter },
  settings: { model: modelPath, rounds, warmupRounds, maxTokens, contextSize, threads: THREADS, parallel: 1, eosToken },
  summaries,
  ratios,
  turnpikeCpuMs,
  sameText,
  samples: samples.map(({ text: _text, ...sample }) => sample),
};
fs.mkdirSync(path.dirname(flags.out), { recursive: true });
fs.writeFileSync(flags.out, `${JSON.stringify(report, null, 2)}\n`);
console.log(`\nwrote ${flags.out}`);
