/**
 * Turnpike's memory under bursts of concurrent streams, and whether it comes back: Turnpike in its
 * own process (`bin/turnpike.js serve`, SQLite or PostgreSQL, one upstream model with
 * `max_in_flight` 1024) in front of the scripted fake upstream (test/helpers/fault-upstream.ts,
 * in this process: each stream is `--chunks` content chunks `--chunk-delay` ms apart), called
 * with a metered key (credit leases, rate limits, usage records) or an operator key.
 *
 *   node_modules/.bin/node bench/memory.ts [--bursts 200,500,1000] [--idle 5] [--soak 0]
 *     [--soak-streams 500] [--soak-gc] [--chunks 32] [--chunk-delay 30] [--key metered|operator]
 *     [--database sqlite|postgres://…] [--env MALLOC_ARENA_MAX=2] [--node-arg --trace-gc] [--snapshots]
 *     [--out bench/results/memory.json]
 *
 * For each burst of N streams sent at once it reads Turnpike's memory before, at the peak (the
 * most seen while the burst ran: sampled every 200 ms), right after the last stream ended, after
 * `--idle` seconds, and after a full garbage collection. RSS comes from `/proc/<pid>/status`;
 * the V8 heap, `external` and `arrayBuffers` from `process.memoryUsage()` in Turnpike's main
 * thread, read through the V8 inspector it was started with (`--inspect=127.0.0.1:PORT`), which
 * also forces the garbage collection; Turnpike itself has no endpoint for any of it.
 * `--soak S` then sends bursts of `--soak-streams` for S seconds, one after the other, and reads
 * the memory 2 s after each (after a forced GC too with `--soak-gc`): whether it keeps growing or levels off. `--snapshots`
 * takes a heap snapshot after the warm-up and at the end, and prints what grew between them
 * (objects by constructor). `--env` passes environment to Turnpike's process only, `--node-arg` a Node or V8 option
 * (both repeatable; with a `--trace…` option the end of Turnpike's output is printed).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Agent, request } from "undici";
import { FaultUpstream } from "../test/helpers/fault-upstream.ts";
import { freePort } from "./gateway/processes.ts";
import { SQLITE, postgresSchema, startTurnpike, type TurnpikeUnderTest } from "./gateway/turnpike.ts";
import { Inspector, growth, readKernelMemory, summarizeSnapshot, type HeapSummary, type KernelMemory, type NodeMemory } from "./memory/inspector.ts";

const benchDir = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(benchDir, "..");
const { values: flags } = parseArgs({
  options: {
    bursts: { type: "string", default: "200,500,1000" },
    idle: { type: "string", default: "5" },
    soak: { type: "string", default: "0" },
    "soak-streams": { type: "string", default: "500" },
    chunks: { type: "string", default: "32" },
    "chunk-delay": { type: "string", default: "30" },
    key: { type: "string", default: "metered" },
    database: { type: "string", default: "sqlite" },
    env: { type: "string", multiple: true, default: [] },
    "node-arg": { type: "string", multiple: true, default: [] },
    snapshots: { type: "boolean", default: false },
    live: { type: "boolean", default: false },
    "soak-gc": { type: "boolean", default: false },
    out: { type: "string", default: path.join(benchDir, "results", "memory.json") },
  },
});
const bursts = flags.bursts.split(",").filter((part) => part !== "").map(Number);
const idleMs = Number(flags.idle) * 1000;
const soakMs = Number(flags.soak) * 1000;
const soakStreams = Number(flags["soak-streams"]);
const childEnv = Object.fromEntries(flags.env.map((pair) => [pair.slice(0, pair.indexOf("=")), pair.slice(pair.indexOf("=") + 1)]));
const STREAM_TIMEOUT_MS = 180_000;

/** One reading of Turnpike's memory (bytes). */
type Reading = KernelMemory & Omit<NodeMemory, "rss"> & { at: number };

const MiB = 1024 * 1024;
const mib = (bytes: number) => (Number.isFinite(bytes) ? (bytes / MiB).toFixed(1) : "?");

async function read(inspector: Inspector, pid: number): Promise<Reading> {
  const node = await inspector.memoryUsage();
  const kernel = readKernelMemory(pid) ?? { rss: node.rss, hwm: NaN, anonymous: NaN };
  return { at: Date.now(), ...kernel, heapTotal: node.heapTotal, heapUsed: node.heapUsed, external: node.external, arrayBuffers: node.arrayBuffers };
}

/** The most of each figure seen while `work` runs: RSS every 200 ms, the Node figures as often as the inspector answers. */
async function peakDuring<T>(inspector: Inspector, pid: number, work: Promise<T>): Promise<{ result: T; peak: Reading }> {
  const peak: Reading = { at: Date.now(), rss: 0, hwm: 0, anonymous: 0, heapTotal: 0, heapUsed: 0, external: 0, arrayBuffers: 0 };
  const keep = (reading: Partial<Reading>) => {
    for (const [name, value] of Object.entries(reading) as Array<[keyof Reading, number]>) if (Number.isFinite(value) && value > peak[name]) peak[name] = value;
  };
  let done = false;
  const kernelTimer = setInterval(() => keep(readKernelMemory(pid) ?? {}), 200);
  const nodeLoop = (async () => {
    while (!done) {
      const { rss: _rss, ...node } = await inspector.memoryUsage();
      keep(node);
      await sleep(300);
    }
  })();
  try {
    const result = await work;
    return { result, peak };
  } finally {
    done = true;
    clearInterval(kernelTimer);
    await nodeLoop;
  }
}

type BurstOutcome = { ok: number; failed: number; failures: string[]; seconds: number };

/** Sends `count` streamed chat completions at once; each is read to its end and checked for `[DONE]`. */
async function burst(turnpike: TurnpikeUnderTest, key: string, count: number, round: number): Promise<BurstOutcome> {
  const started = performance.now();
  // A connection per stream, closed when the burst ends: what stays afterwards is not idle keep-alive connections.
  const agent = new Agent({ connections: null, pipelining: 1 });
  const failures: string[] = [];
  let ok = 0;
  await Promise.all(
    Array.from({ length: count }, async (_, index) => {
      try {
        const response = await request(`${turnpike.origin}/v1/chat/completions`, {
          method: "POST",
          dispatcher: agent,
          headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
          body: JSON.stringify({
            model: "bench",
            // A different prompt for every stream, as real traffic has (affinity, prompt caches).
            messages: [{ role: "user", content: `Round ${round}, stream ${index}: tell me a story about the number ${index * 7919 + round}.` }],
            stream: true,
            stream_options: { include_usage: true },
            max_tokens: 64,
          }),
          bodyTimeout: STREAM_TIMEOUT_MS,
          headersTimeout: STREAM_TIMEOUT_MS,
        });
        let tail = "";
        for await (const chunk of response.body) tail = (tail + (chunk as Buffer).toString("utf8")).slice(-256);
        if (response.statusCode === 200 && tail.trimEnd().endsWith("data: [DONE]")) ok++;
        else failures.push(`status ${response.statusCode}: ${tail.slice(-160)}`);
      } catch (error) {
        failures.push((error as Error).message);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  await agent.close();
  return { ok, failed: count - ok, failures: [...new Set(failures)].slice(0, 3), seconds };
}

function loadAverage(): string {
  return os
    .loadavg()
    .map((value) => value.toFixed(2))
    .join(" ");
}

async function main(): Promise<void> {
  const text = Array.from({ length: Number(flags.chunks) }, (_, index) => `word${index} `);
  const upstream = await FaultUpstream.start({ model: "bench", text });
  upstream.mode = { kind: "complete", text, chunkDelayMs: Number(flags["chunk-delay"]) };
  const database = flags.database === "sqlite" ? SQLITE : await postgresSchema(flags.database);
  const inspectPort = await freePort();
  const turnpike = await startTurnpike(root, upstream.origin, 120_000, database, true, { nodeArgs: [`--inspect=127.0.0.1:${inspectPort}`, ...flags["node-arg"]], env: childEnv });
  const pid = turnpike.child.process.pid!;
  const key = flags.key === "operator" ? turnpike.operatorKey : turnpike.meteredKey;
  const inspector = await Inspector.connect(inspectPort);
  const backend = flags.database.startsWith("postgres") ? "postgres" : "sqlite";
  const results: Record<string, unknown> = {
    settings: { bursts, idleSeconds: idleMs / 1000, soakSeconds: soakMs / 1000, soakStreams, chunks: text.length, chunkDelayMs: Number(flags["chunk-delay"]), key: flags.key, database: backend, env: childEnv, nodeArgs: flags["node-arg"], node: process.version, cpus: os.cpus().length },
    loadBefore: loadAverage(),
  };
  const liveDuring = async (count: number) => {
    await upstream.waitForRequests(count, STREAM_TIMEOUT_MS);
    await inspector.collectGarbage();
    const reading = await read(inspector, pid);
    const summary = before !== undefined ? summarizeSnapshot(await inspector.heapSnapshot()) : undefined;
    const inFlight = upstream.requests.filter((request) => !request.closedByClient).length;
    console.log(`  live, ${count} streams in flight, after a GC: heap used ${mib(reading.heapUsed)} MiB (${((reading.heapUsed - baselineHeapUsed) / count / 1024).toFixed(1)} kB a stream over the baseline), external ${mib(reading.external)}, arrayBuffers ${mib(reading.arrayBuffers)}, RSS ${mib(reading.rss)}; upstream saw ${inFlight}`);
    if (summary !== undefined && before !== undefined)
      for (const row of growth(before, summary, 25)) console.log(`    ${(row.size / 1024).toFixed(1).padStart(9)} kB  ${String(row.count).padStart(7)} objects  ${row.name}`);
    return reading;
  };
  let before: HeapSummary | undefined;
  let baselineHeapUsed = 0;
  const afterGc = async () => {
    await inspector.collectGarbage();
    await sleep(1000);
    return read(inspector, pid);
  };
  let round = 0;
  try {
    console.log(`Turnpike pid ${pid}, key ${flags.key}, ${backend}, node options ${JSON.stringify(flags["node-arg"])}, env ${JSON.stringify(childEnv)}, load ${loadAverage()}`);
    const started = await read(inspector, pid);
    // Warm-up: connections, JIT, the lease and the statement caches.
    const warm = await burst(turnpike, key, 20, round++);
    if (warm.ok !== 20) throw new Error(`warm-up failed: ${warm.failures.join("; ")}`);
    const baseline = await afterGc();
    results.started = started;
    results.baseline = baseline;
    baselineHeapUsed = baseline.heapUsed;
    if (flags.snapshots) before = summarizeSnapshot(await inspector.heapSnapshot());
    console.log(`started: RSS ${mib(started.rss)} MiB; after warm-up and GC: RSS ${mib(baseline.rss)}, heap used ${mib(baseline.heapUsed)}, external ${mib(baseline.external)}, arrayBuffers ${mib(baseline.arrayBuffers)} MiB`);

    const rows: Array<Record<string, unknown>> = [];
    console.log("\n| streams | ok | s | RSS before | peak | end | idle | after GC | heap used before / peak / after GC | external peak / after GC | arrayBuffers peak / after GC |");
    console.log("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |");
    for (const count of bursts) {
      upstream.requests.splice(0);
      const beforeBurst = await read(inspector, pid);
      const running = burst(turnpike, key, count, round++);
      // --live: once every stream has reached the upstream, a GC (and with --snapshots a snapshot): what the streams hold.
      const live = flags.live ? liveDuring(count) : undefined;
      const { result: outcome, peak } = await peakDuring(inspector, pid, running);
      const liveReading = await live;
      const end = await read(inspector, pid);
      // While idle: RSS and heap every 5 s (whether V8 gives the garbage back on its own).
      const idleCurve: Reading[] = [];
      for (let waited = 0; waited < idleMs; waited += 5000) {
        await sleep(Math.min(5000, idleMs - waited));
        idleCurve.push(await read(inspector, pid));
      }
      const idle = idleCurve.at(-1) ?? end;
      const collected = await afterGc();
      rows.push({ streams: count, outcome, before: beforeBurst, peak, live: liveReading, end, idleCurve, afterGc: collected });
      console.log(
        `| ${count} | ${outcome.ok} | ${outcome.seconds.toFixed(1)} | ${mib(beforeBurst.rss)} | ${mib(peak.rss)} | ${mib(end.rss)} | ${mib(idle.rss)} | ${mib(collected.rss)} | ${mib(beforeBurst.heapUsed)} / ${mib(peak.heapUsed)} / ${mib(collected.heapUsed)} | ${mib(peak.external)} / ${mib(collected.external)} | ${mib(peak.arrayBuffers)} / ${mib(collected.arrayBuffers)} |`,
      );
      if (outcome.failed > 0) console.log(`  ${outcome.failed} failed: ${outcome.failures.join("; ")}`);
      if (idleCurve.length > 1) console.log(`  idle, every 5 s: RSS ${idleCurve.map((reading) => mib(reading.rss)).join(", ")}; heap used ${idleCurve.map((reading) => mib(reading.heapUsed)).join(", ")} MiB`);
    }
    results.bursts = rows;

    if (soakMs > 0) {
      const soak: Array<Record<string, unknown>> = [];
      const soakStart = Date.now();
      console.log(`\nsoak: bursts of ${soakStreams} for ${soakMs / 1000} s (MiB)`);
      while (Date.now() - soakStart < soakMs) {
        upstream.requests.splice(0);
        const { result: outcome, peak } = await peakDuring(inspector, pid, burst(turnpike, key, soakStreams, round++));
        // Two seconds after the burst (the upstream's keep-alive connections close in four), with a GC only under --soak-gc.
        await sleep(2000);
        const after = flags["soak-gc"] ? await afterGc() : await read(inspector, pid);
        soak.push({ seconds: (Date.now() - soakStart) / 1000, outcome, peak, after });
        if (outcome.failed > 0) console.log(`  ${outcome.failed} failed: ${outcome.failures.join("; ")}`);
        console.log(
          `  ${((Date.now() - soakStart) / 1000).toFixed(0).padStart(4)} s: ok ${outcome.ok}/${soakStreams} in ${outcome.seconds.toFixed(1)} s, peak RSS ${mib(peak.rss)}, heap used ${mib(peak.heapUsed)}; after${flags["soak-gc"] ? " a GC" : ""}: RSS ${mib(after.rss)}, heap used ${mib(after.heapUsed)} (total ${mib(after.heapTotal)}), external ${mib(after.external)}, arrayBuffers ${mib(after.arrayBuffers)}`,
        );
      }
      results.soak = soak;
    }

    const final = await afterGc();
    results.final = final;
    console.log(`\nend: RSS ${mib(final.rss)} MiB (high-water ${mib(final.hwm)}), heap used ${mib(final.heapUsed)}, heap total ${mib(final.heapTotal)}, external ${mib(final.external)}, arrayBuffers ${mib(final.arrayBuffers)}; load ${loadAverage()}`);
    console.log(`RSS not accounted for by the V8 heap and external memory, after GC: ${mib(baseline.rss - baseline.heapTotal - baseline.external)} MiB after the warm-up, ${mib(final.rss - final.heapTotal - final.external)} MiB at the end`);
    if (before !== undefined) {
      const grown = growth(before, summarizeSnapshot(await inspector.heapSnapshot()));
      results.heapGrowth = grown;
      console.log("\nheap snapshot, warm-up → end, what grew most (self size):");
      for (const row of grown) console.log(`  ${(row.size / 1024).toFixed(1).padStart(9)} kB  ${String(row.count).padStart(7)} objects  ${row.name}`);
    }
    results.loadAfter = loadAverage();
    if (flags["node-arg"].some((arg) => arg.startsWith("--trace"))) console.log(`\nTurnpike's output, the end:\n${turnpike.child.output()}`);
  } finally {
    inspector.close();
    await turnpike.cleanup();
    await upstream.close();
  }
  fs.mkdirSync(path.dirname(flags.out), { recursive: true });
  fs.writeFileSync(flags.out, JSON.stringify(results, null, 2));
  console.log(`\nwrote ${path.relative(process.cwd(), flags.out)}`);
}

await main();
