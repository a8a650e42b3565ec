/**
 * What storing a response costs the process that answers it: the CPU of `ResponseStore.save`
 * and its commits per stored response, for responses finishing one after another as a
 * one-connection client makes them (one every `--gap-ms`), in one process, three ways in turn:
 *
 * - `awaited`: each save written in a commit of its own and waited for (`commitWindowMs: 0`,
 *   the reply held until the row is durable): the path before the commit window;
 * - `deferred`: the save joins the commit window (`commitWindowMs`, 10 ms by default) and nobody
 *   waits for it: what `POST /v1/responses` does now;
 * - `serialise only`: the row's JSON and size alone, no database: the floor of any store.
 *
 * CPU is `process.cpuUsage()` over the run (user + system), divided by the responses saved; the
 * rows are the ~2 KB a short answer weighs. Rounds alternate the ways so drift hits each alike.
 *
 *   node_modules/.bin/node bench/response-store.ts [--responses 2000] [--rounds 5] [--gap-ms 1]
 *     [--window-ms 10] [--database sqlite|postgres] (postgres: a fresh schema on TURNPIKE_TEST_POSTGRES_URL or the local server)
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { setTimeout as delay } from "node:timers/promises";
import { openStore } from "../src/store/open.ts";
import { ResponseStore, type ResponseRecord } from "../src/responses/store.ts";
import { newId } from "../src/store/ids.ts";
import { freshPostgresSchema } from "../test/helpers/databases.ts";

const { values } = parseArgs({
  options: {
    responses: { type: "string", default: "2000" },
    rounds: { type: "string", default: "5" },
    "gap-ms": { type: "string", default: "1" },
    "window-ms": { type: "string", default: "10" },
    database: { type: "string", default: "sqlite" },
  },
});
const responses = Number(values.responses);
const rounds = Number(values.rounds);
const gapMs = Number(values["gap-ms"]);
const windowMs = Number(values["window-ms"]);

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-response-store-bench-"));
let dropSchema: (() => Promise<void>) | undefined;
let databaseUrl: string | undefined;
if (values.database !== "sqlite") ({ url: databaseUrl, drop: dropSchema } = await freshPostgresSchema());
const database = await openStore({ dataDir, databaseUrl });

/** A short answer's row, as the Responses route saves it: ~2 KB of resource JSON, one input message. */
function record(): ResponseRecord {
  const id = newId("resp");
  const text = "The quick brown fox jumps over the lazy dog. ".repeat(30);
  return {
    id,
    accountId: "acct_bench",
    keyId: "key_bench",
    model: "bench",
    status: "completed",
    createdAt: Date.now(),
    previousResponseId: null,
    background: false,
    inputItems: [{ id: newId("msg"), type: "message", role: "user", content: [{ type: "input_text", text: "Say something about foxes." }] }],
    response: {
      id,
      object: "response",
      created_at: Math.floor(Date.now() / 1000),
      status: "completed",
      model: "bench",
      output: [{ type: "message", id: newId("msg"), status: "completed", role: "assistant", content: [{ type: "output_text", text, annotations: [], logprobs: [] }] }],
      usage: { input_tokens: 12, input_tokens_details: { cached_tokens: 0 }, output_tokens: 16, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 28 },
    },
  };
}

type Way = "awaited" | "deferred" | "serialise only";
const stores: Record<Exclude<Way, "serialise only">, ResponseStore> = {
  awaited: new ResponseStore(database, { commitWindowMs: 0 }),
  deferred: new ResponseStore(database, { commitWindowMs: windowMs }),
};

/** CPU µs per response and commits made, for `responses` responses one `gapMs` apart. */
async function measure(way: Way): Promise<{ cpuUs: number; commits: number }> {
  const records = Array.from({ length: responses }, record);
  const store = way === "serialise only" ? undefined : stores[way];
  const commitsBefore = store?.commits ?? 0;
  const started = process.cpuUsage();
  for (const saved of records) {
    if (store === undefined) {
      const inputItems = JSON.stringify(saved.inputItems);
      const response = JSON.stringify(saved.response);
      if (Buffer.byteLength(inputItems) + Buffer.byteLength(response) < 0) throw new Error("unreachable");
    } else if (way === "awaited") await store.save(saved);
    else store.save(saved, { deferred: true }).catch((error: unknown) => console.error(error));
    await delay(gapMs);
  }
  await store?.drain();
  const used = process.cpuUsage(started);
  // The gap's timers cost CPU too: measured alone and taken off below.
  return { cpuUs: (used.user + used.system) / responses, commits: (store?.commits ?? 0) - commitsBefore };
}

/** The loop's own CPU (timers, no saving) per response. */
async function idleLoop(): Promise<number> {
  const started = process.cpuUsage();
  for (let index = 0; index < responses; index++) await delay(gapMs);
  const used = process.cpuUsage(started);
  return (used.user + used.system) / responses;
}

const ways: Way[] = ["awaited", "deferred", "serialise only"];
const results = new Map<Way, number[]>(ways.map((way) => [way, []]));
const commits = new Map<Way, number>(ways.map((way) => [way, 0]));
const idle: number[] = [];
console.log(`${values.database === "sqlite" ? "SQLite" : "PostgreSQL"}: ${rounds} rounds × ${responses} responses, one every ${gapMs} ms, commit window ${windowMs} ms`);
for (let round = 0; round < rounds; round++) {
  idle.push(await idleLoop());
  // The order rotates each round.
  for (const way of [...ways.slice(round % ways.length), ...ways.slice(0, round % ways.length)]) {
    const { cpuUs, commits: made } = await measure(way);
    results.get(way)!.push(cpuUs);
    commits.set(way, commits.get(way)! + made);
  }
}
const median = (numbers: number[]) => numbers.toSorted((a, b) => a - b)[Math.floor(numbers.length / 2)]!;
const idleUs = median(idle);
console.log(`\n| way | CPU µs a response (median of rounds, less the loop's ${idleUs.toFixed(1)} µs) | rows a commit |`);
console.log("| --- | ---: | ---: |");
const net = new Map<Way, number>();
for (const way of ways) {
  net.set(way, median(results.get(way)!) - idleUs);
  const made = commits.get(way)!;
  console.log(`| ${way} | ${net.get(way)!.toFixed(1)} | ${made === 0 ? "–" : ((rounds * responses) / made).toFixed(1)} |`);
}
console.log(`\ndeferred ÷ awaited: ${(net.get("deferred")! / net.get("awaited")!).toFixed(3)}× (${(net.get("awaited")! - net.get("deferred")!).toFixed(1)} µs a response saved)`);
await database.destroy();
await dropSchema?.();
fs.rmSync(dataDir, { recursive: true, force: true });
