/**
 * A busy key's standing (its account's plan and balance) kept in memory, on real SQLite and
 * PostgreSQL, with a change feed the test controls: kept past the second while the feed proves
 * itself live (read again in the background), dropped on a heard change, and never the reason a
 * request is refused for want of credit.
 */
import assert from "node:assert/strict";
import { afterEach, beforeEach, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { sql } from "kysely";
import { fundedKey } from "../../test/helpers/funded-key.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../test/helpers/databases.ts";
import type { CatalogModel } from "../catalog/catalog.ts";
import type { GenerationUsage } from "../engines/engine.ts";
import { admitInOrder } from "../http/generation/admit.ts";
import { MemoryRateLimiter } from "../limits/memory.ts";
import { RequestLimits } from "../limits/request-limits.ts";
import { withChangeFeed } from "../store/changes.ts";
import { placeHold, settleHold } from "./ledger.ts";
import { Metering } from "./metering.ts";

/** One credit a token either way: a request of 10 prompt tokens and at most 10 more costs at least 20. */
const model = { id: "priced", pricing: { prompt: 1_000_000, cachedPrompt: 1_000_000, completion: 1_000_000 } } as unknown as CatalogModel;
const usage: GenerationUsage = { promptTokens: 10, cachedPromptTokens: 0, completionTokens: 5, source: "counted" };
/** Past the one second a standing is always kept. */
const PAST_THE_SECOND_MS = 1_100;

for (const backend of backends) {
  describe(`a busy key's standing kept in memory (${backend})`, { timeout: 60_000 }, () => {
    let store: TestDatabase;
    let feed: { received: number; live: boolean; watched(boundMs: number): boolean };
    let metering: Metering;
    beforeEach(async () => {
      store = await openTestDatabase(backend);
      feed = { received: 0, live: true, watched: () => feed.live };
      withChangeFeed(store.database, feed);
      // Every key is busy from its first request (its standing is kept from then on).
      metering = new Metering({ database: store.database, nodeId: () => "standing-node", holdTtlMs: 60_000, leases: { hotRequestsPerSecond: 0, flushIntervalMs: 600_000 } });
    });
    afterEach(async () => {
      await metering.drain();
      await store.close();
    });

    /** Makes the key busy: one request admitted and settled. */
    const busy = async (key: Parameters<Metering["admit"]>[0]["key"]) => {
      const admission = await metering.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 10, choices: 1, requestId: `busy-${Math.random()}`, stream: false });
      await admission.settle({ usage, status: 200, finishReason: "stop", latencyMs: 1 });
    };
    /** Adds credit behind every cache's back (as another node's grant would, unheard). */
    const addUnheard = (accountId: string, credit: number) => sql`update accounts set balance = balance + ${credit} where id = ${accountId}`.execute(store.database);

    it("keeps it past the second while the feed is live, reads it again in the background, and drops it on a heard change or a feed gone quiet", async () => {
      const { accountId, key } = await fundedKey(store.database, 10_000);
      await busy(key);
      const read = await metering.standingOf(key);
      assert.equal(read.kept, undefined, "read from the database");
      await addUnheard(accountId, 5_000);
      await delay(PAST_THE_SECOND_MS);
      const kept = await metering.standingOf(key);
      assert.equal(kept.kept, true);
      assert.equal(kept.balance, read.balance, "the kept balance, past the second");
      await delay(200);
      const refreshed = await metering.standingOf(key);
      assert.equal(refreshed.balance, read.balance! + 5_000, "read again in the background meanwhile");
      await delay(PAST_THE_SECOND_MS);
      feed.received++;
      assert.equal((await metering.standingOf(key)).kept, undefined, "a heard change: read again before it is used past the second");
      await delay(PAST_THE_SECOND_MS);
      feed.live = false;
      assert.equal((await metering.standingOf(key)).kept, undefined, "a feed that does not prove itself: one second, as without it");
    });

    it("never refuses a request for want of credit on a kept balance: reads it again first", async () => {
      const { accountId, key } = await fundedKey(store.database, 10_000);
      await busy(key);
      const { balance } = await metering.standingOf(key, { fresh: true });
      // Almost all the credit held by another request, then given back unheard (its hold released).
      const holdId = await placeHold(store.database, { accountId, keyId: null, amount: balance! - 5, nodeId: "elsewhere", ttlMs: 60_000 });
      assert.equal((await metering.standingOf(key, { fresh: true })).balance, 5, "kept: 5 credits, short of the 20 a request needs at least");
      await settleHold(store.database, holdId, 0);
      const limits = new RequestLimits(new MemoryRateLimiter());
      const admitted = await admitInOrder({ metering, limits }, { body: {}, key, requestId: "after-release" }, {
        model,
        least: () => ({ tokens: 20, promptTokens: 10, completionTokens: 10 }),
        prepare: async () => "work",
        charge: () => ({ tokens: 20, promptTokens: 10, maxTokens: 10, choices: 1, stream: false }),
      });
      assert.equal(admitted.work, "work", "admitted on the balance read again");
      await admitted.admission.settle({ usage, status: 200, finishReason: "stop", latencyMs: 1 });
      await admitted.limited.finish(15);
    });
  });
}
