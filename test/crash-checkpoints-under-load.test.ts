/**
 * Issue 20, rows 1 and 3: `kill -9` of a node while a hot key (every request metered from credit
 * leases) has streams in flight and short requests finishing, at a moment when the node's usage
 * writer has fallen behind. Falling behind is made deterministic here, not left to CPU load: the
 * test holds a lock on `usage_checkpoints` (as contention would), so no group commit can finish.
 * Then, after a restart and its sweep, on the embedded engine and through an upstream pool
 * (a scripted upstream streaming at its own pace):
 * - every cut stream is billed at least what its client received less one checkpoint (64 tokens);
 * - every request whose client got `[DONE]` has its usage record, but those that ended in the
 *   moment the writer got stuck (within a flush interval and the 250 ms lateness bound);
 * - while the writer is behind, new requests are refused with 503 `metering_behind` and `retry-after`;
 * - the books balance, and no hold, lease or checkpoint is left open.
 * Before the fix, tokens went on flowing to clients while nothing was recorded, and `[DONE]` went
 * out before the record was written.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import pg from "pg";
import { openStore } from "../src/store/open.ts";
import { checkLedger } from "../src/billing/ledger.ts";
import type { FaultUpstream } from "./helpers/fault-upstream.ts";
import { pacedUpstream, send, type Seen } from "./helpers/crash-streams.ts";
import { freshPostgresSchema } from "./helpers/databases.ts";
import { modelsDir, temporaryDirectory } from "./helpers/server.ts";
import { runCli, startServeProcess, type ServeProcess } from "./helpers/process.ts";

/** One checkpoint: what a cut stream may be billed less than its client received. */
const CHECKPOINT_TOKENS = 64;
const pricing = { prompt: 1_000_000, cached_prompt: 1_000_000, completion: 1_000_000 };
const CREDIT = 100_000_000;
const LONG_STREAMS = 6;
const LONG_MAX_TOKENS = 3000;
const SHORT_MAX_TOKENS = 12;

type Case = { name: string; model: () => Record<string, unknown>; serveArgs: string[] };

describe("kill -9 at a hot key while its usage writer is behind (issue 20, rows 1 and 3; postgres)", () => {
  let upstream: FaultUpstream;
  before(async () => {
    upstream = await pacedUpstream(8);
  });
  after(async () => {
    await upstream?.close();
  });

  const cases: Case[] = [
    {
      name: "the embedded engine",
      model: () => ({ id: "random", path: path.join(modelsDir, "llama-2-tiny-random.gguf"), pricing }),
      serveArgs: ["--parallel", String(LONG_STREAMS + 4), "--context-size", "8192"],
    },
    {
      name: "an upstream pool",
      model: () => ({ id: "paced", context_length: 16384, pricing, upstream: { kind: "openai", urls: [upstream.baseUrl], health_interval: 60 } }),
      serveArgs: [],
    },
  ];

  for (const testCase of cases) {
    it(`through ${testCase.name}: cut streams billed within one checkpoint of what they delivered, every [DONE] recorded, new requests shed while behind`, async (t) => {
      const dataDir = temporaryDirectory();
      const postgres = await freshPostgresSchema();
      const store = ["--database-url", postgres.url];
      let first: ServeProcess | undefined;
      const locker = new pg.Client({ connectionString: postgres.url });
      try {
        const model = testCase.model();
        const modelId = String(model.id);
        const configFile = path.join(dataDir, "turnpike.json");
        fs.writeFileSync(configFile, JSON.stringify({ models: [model], plans: [{ id: "big", name: "Big", price: { amount: 100, currency: "usd" }, credit: CREDIT }] }));
        // `--lease-above 0`: the key is hot from its first request, every request metered from a lease.
        const serve = ["--config", configFile, "--data-dir", dataDir, "--lease-above", "0", ...testCase.serveArgs, ...store];
        first = await startServeProcess(serve);
        const cli = async (args: string[]) => {
          const result = await runCli([...args, "--data-dir", dataDir, ...store]);
          assert.equal(result.code, 0, result.stderr);
          return result.stdout;
        };
        const email = `checkpoints-${modelId}@example.com`;
        const account = JSON.parse(await cli(["accounts", "create", "--email", email, "--json"])) as { id: string };
        await cli(["plans", "grant", "--account", email, "--plan", "big", "--config", configFile]);
        const key = (JSON.parse(await cli(["keys", "create", "--account", email, "--json"])) as { key: string }).key;
        for (let attempt = 0; attempt < 400 && (await fetch(`${first.url}/ready`)).status !== 200; attempt++) await delay(50);
        const url = first.url;

        // Long streams, and two loops of short requests finishing one after another.
        const long = await Promise.all(Array.from({ length: LONG_STREAMS }, (_, index) => send(url, key, modelId, LONG_MAX_TOKENS, index)));
        for (const seen of long) assert.equal(seen.status, 200, `a long stream started: ${seen.code}`);
        const short: Seen[] = [];
        let stopShort = false;
        const shortLoop = async (loop: number) => {
          for (let index = 0; !stopShort; index++) {
            const seen = await send(url, key, modelId, SHORT_MAX_TOKENS, 1000 * (loop + 1) + index).catch(() => undefined);
            if (seen === undefined) return; // the server died
            if (seen.status !== 200) {
              await delay(50);
              continue;
            }
            short.push(seen);
            await seen.ended;
          }
        };
        const loops = [shortLoop(0), shortLoop(1)];
        // Every long stream past its first checkpoints, and some short requests done.
        for (let waited = 0; waited < 2000 && (long.some((seen) => seen.delivered < 2 * CHECKPOINT_TOKENS) || short.filter((seen) => seen.done).length < 2); waited++) await delay(10);
        assert.ok(long.every((seen) => seen.delivered >= 2 * CHECKPOINT_TOKENS), `the long streams got going: ${long.map((seen) => seen.delivered)}`);

        // The writer falls behind: no group commit can finish while this lock is held.
        await locker.connect();
        await locker.query("BEGIN");
        await locker.query("LOCK TABLE usage_checkpoints IN SHARE MODE");
        const lockedAt = performance.now();
        const deliveredAtLock = long.map((seen) => seen.delivered);
        // New requests are refused once someone has waited past 2 s for a commit (polled for up to 8 s).
        let shed: Seen | undefined;
        for (let probe = 0; shed === undefined && performance.now() - lockedAt < 8_000; probe++) {
          await delay(250);
          const seen = await send(url, key, modelId, SHORT_MAX_TOKENS, 5000 + probe);
          if (seen.status === 503) shed = seen;
          else if (seen.status === 200) short.push(seen);
        }
        await delay(500);
        const lockedSeconds = (performance.now() - lockedAt) / 1000;
        stopShort = true;
        assert.equal(await first.stop("SIGKILL"), null);
        await locker.query("ROLLBACK");
        await Promise.all(long.map((seen) => seen.ended));
        await Promise.all(loops);
        await Promise.all(short.map((seen) => seen.ended));
        t.diagnostic(
          `writer held back ${lockedSeconds.toFixed(1)} s; long streams delivered ${deliveredAtLock} before, ${long.map((seen) => seen.delivered)} in all; ` +
            `${short.filter((seen) => seen.done).length} of ${short.length} short requests got [DONE]`,
        );

        // The next node's start-up sweep finds the dead one and closes its holds.
        const second = await startServeProcess(serve);
        try {
          const database = await openStore({ dataDir, databaseUrl: postgres.url });
          try {
            const records = await database.selectFrom("usage_records").selectAll().where("account_id", "=", account.id).execute();
            const byRequest = new Map(records.map((record) => [record.request_id, record]));
            const lag = long.map((seen) => seen.delivered - Number(byRequest.get(seen.requestId)?.completion_tokens ?? 0));
            t.diagnostic(`cut streams billed ${long.map((seen) => byRequest.get(seen.requestId)?.completion_tokens ?? "nothing")} for ${long.map((seen) => seen.delivered)} delivered`);
            // A stream that could go on only past its next checkpoint waited for it: the kill cut it.
            assert.ok(long.some((seen) => !seen.done), "the kill cut long streams");
            for (const [index, seen] of long.entries()) {
              if (seen.done) continue; // finished: checked with the others that got [DONE]
              const record = byRequest.get(seen.requestId);
              assert.ok(record !== undefined, `cut stream ${index} (${seen.delivered} tokens delivered) has a usage record`);
              assert.ok(lag[index]! <= CHECKPOINT_TOKENS, `cut stream ${index}: billed ${record.completion_tokens} completion tokens, delivered ${seen.delivered} (at most ${CHECKPOINT_TOKENS} behind)`);
              assert.ok(Number(record.completion_tokens) <= LONG_MAX_TOKENS);
            }
            // A finished request's record joins the next group commit (the client is not kept
            // waiting for it) unless the commit is late (250 ms in flight), when the client hears
            // [DONE] only once it is written. So the only records a kill may take are of requests
            // that ended just as the writer got stuck: within a flush interval plus the lateness
            // bound of the lock (a second's margin each way for a loaded machine).
            const finished = [...long, ...short].filter((seen) => seen.done);
            const unrecorded = finished.filter((seen) => !byRequest.has(seen.requestId));
            const aroundTheLock = (seen: Seen) => seen.doneAt !== undefined && seen.doneAt > lockedAt - 1_000 && seen.doneAt < lockedAt + 1_500;
            t.diagnostic(`${unrecorded.length} of ${finished.length} requests whose client got [DONE] have no record, ended ${unrecorded.map((seen) => (seen.doneAt! - lockedAt).toFixed(0))} ms from the lock`);
            assert.deepEqual(
              unrecorded.filter((seen) => !aroundTheLock(seen)).map((seen) => (seen.doneAt! - lockedAt).toFixed(0)),
              [],
              "every request whose client got [DONE] away from the moment the writer got stuck is recorded",
            );
            for (const seen of finished) if (byRequest.has(seen.requestId)) assert.equal(byRequest.get(seen.requestId)!.status, 200);

            assert.ok(shed !== undefined, "a new request was refused while the usage writer was behind");
            assert.equal(shed.code, "metering_behind");
            assert.equal(shed.retryAfter, "1");

            const books = await checkLedger(database, account.id);
            assert.equal(books.activeHolds, 0, "the dead node's holds and leases are closed");
            assert.equal(books.balance, books.sumOfEntries);
            assert.equal(books.lotsRemaining, books.balance);
            const charged = records.reduce((sum, record) => sum + Number(record.cost), 0);
            assert.equal(books.balance, CREDIT - charged, "charged exactly what the records say");
            const checkpoints = await database.selectFrom("usage_checkpoints").select("id").where("account_id", "=", account.id).execute();
            assert.equal(checkpoints.length, 0, "no checkpoint left after the sweep");
          } finally {
            await database.destroy();
          }
        } finally {
          await second.stop();
        }
      } finally {
        await locker.end().catch(() => undefined);
        if (first !== undefined && first.child.exitCode === null) await first.stop("SIGKILL");
        await postgres.drop();
        fs.rmSync(dataDir, { recursive: true, force: true });
      }
    });
  }
});
