/**
 * `kill -9` of a node with 20 metered streams generating, on SQLite and on PostgreSQL: after a
 * restart the books balance, no hold is left open, and what the clients received is billed up to
 * one checkpoint per stream (64 completion tokens, or the tokens of one second, plus one group
 * commit), never more than `max_tokens`, each stream once. Before checkpoints, every one of them
 * was released uncharged.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { openStore } from "../src/store/open.ts";
import { checkLedger } from "../src/billing/ledger.ts";
import { costOf } from "../src/protocol/price.ts";
import { freshPostgresSchema } from "./helpers/databases.ts";
import { temporaryDirectory } from "./helpers/server.ts";
import { startServeProcess } from "./helpers/process.ts";
import { carriesContent, forEachSseEvent, startFundedNode } from "./helpers/crash-streams.ts";

/** One credit a token, prompt or completion. */
const pricing = { prompt: 1_000_000, cached_prompt: 1_000_000, completion: 1_000_000 };
const STREAMS = 20;
const MAX_TOKENS = 3000;
const CREDIT = 10_000_000;

/** Reads a stream's SSE chunks, counting those that carry content, until the connection ends. */
function follow(response: Response, delivered: number[], index: number): Promise<void> {
  return forEachSseEvent(response, (event) => {
    if (event.startsWith("data: {") && carriesContent(event)) delivered[index]!++;
  });
}

for (const backend of ["sqlite", "postgres"] as const) {
  describe(`kill -9 with ${STREAMS} streams generating (${backend})`, () => {
    it("bills what the clients received, up to one checkpoint per stream, and balances the books", async (t) => {
      const dataDir = temporaryDirectory();
      const postgres = backend === "postgres" ? await freshPostgresSchema() : undefined;
      const store = postgres === undefined ? [] : ["--database-url", postgres.url];
      // On PostgreSQL every stream is metered from a credit lease; on SQLite each from its own hold (20 streams are not a busy key).
      const metering = postgres === undefined ? ["--lease-above", "1000"] : ["--lease-above", "0"];
      try {
        const { first, accountId, key: funded, serve } = await startFundedNode({
          dataDir,
          store,
          pricing,
          credit: CREDIT,
          email: `crash-${backend}@example.com`,
          serveArgs: ["--parallel", String(STREAMS), ...metering],
        });
        const account = { id: accountId };
        const key = { key: funded };

        const delivered = Array.from({ length: STREAMS }, () => 0);
        const started = performance.now();
        const responses = await Promise.all(
          delivered.map((_, index) =>
            fetch(`${first.url}/v1/chat/completions`, {
              method: "POST",
              headers: { "content-type": "application/json", authorization: `Bearer ${key.key}` },
              body: JSON.stringify({ model: "random", messages: [{ role: "user", content: `Go ${index}` }], max_tokens: MAX_TOKENS, stream: true }),
            }),
          ),
        );
        for (const response of responses) assert.equal(response.status, 200);
        const followed = Promise.all(responses.map((response, index) => follow(response, delivered, index)));
        // Well into the streams (every one past a checkpoint or two), then the process dies.
        for (let waited = 0; waited < 200 && delivered.some((count) => count < 200); waited++) await delay(25);
        assert.equal(await first.stop("SIGKILL"), null);
        const seconds = (performance.now() - started) / 1000;
        await followed;
        assert.ok(delivered.every((count) => count > 0 && count < MAX_TOKENS), `every stream was cut mid-way: ${delivered}`);

        // The next node's start-up sweep finds the dead one (its process is gone) and closes its holds.
        const second = await startServeProcess(serve);
        try {
          const database = await openStore({ dataDir, databaseUrl: postgres?.url ?? "" });
          try {
            const books = await checkLedger(database, account.id);
            assert.equal(books.activeHolds, 0, "the dead node's holds are closed");
            assert.equal(books.balance, books.sumOfEntries);
            assert.equal(books.lotsRemaining, books.balance);
            const records = await database.selectFrom("usage_records").selectAll().where("account_id", "=", account.id).execute();
            assert.equal(records.length, STREAMS, "one record a stream, none twice");
            const charged = records.reduce((sum, record) => sum + Number(record.cost), 0);
            assert.equal(books.balance, CREDIT - charged, "charged exactly what the records say");
            const billed = new Map(records.map((record) => [record.request_id, record]));
            assert.equal(billed.size, STREAMS);
            const received = delivered.reduce((sum, count) => sum + count, 0);
            const completion = records.reduce((sum, record) => sum + Number(record.completion_tokens), 0);
            for (const record of records) {
              const tokens = Number(record.completion_tokens);
              assert.equal(record.finish_reason, "interrupted");
              assert.ok(tokens > 0 && tokens <= MAX_TOKENS, `billed ${tokens} tokens`);
              assert.equal(Number(record.cost), costOf({ prompt: pricing.prompt, cachedPrompt: pricing.cached_prompt, completion: pricing.completion }, {
                promptTokens: Number(record.prompt_tokens),
                cachedPromptTokens: Number(record.cached_prompt_tokens),
                completionTokens: tokens,
              }));
            }
            // A stream's checkpoint trails what it generated by at most 64 tokens or one second,
            // plus one group commit; the clients received no more than was generated.
            const perStreamRate = received / STREAMS / seconds;
            const allowance = STREAMS * (64 + Math.ceil(perStreamRate * 1.2));
            t.diagnostic(`${received} content chunks received by the clients in ${seconds.toFixed(1)} s, ${completion} completion tokens billed after the crash`);
            assert.ok(completion >= received - allowance, `billed ${completion} completion tokens of ${received} received (allowance ${allowance})`);
            assert.ok(completion > received / 4, `billed ${completion} of ${received}: most of what was received`);
          } finally {
            await database.destroy();
          }
        } finally {
          await second.stop();
        }
      } finally {
        await postgres?.drop();
      }
    });
  });
}
