/**
 * A quiet key's request (a hold of its own) on both stores: its hold is written before it
 * generates, its settlement rides the group commit after its answer (issue 26), and nothing exact
 * is traded for it: the hold keeps the whole reservation until then, the next request is refused
 * only where it would have been had the settlement landed before the answer, a cost past the
 * reservation still settles before the answer, a kill before the commit leaves the hold to the
 * sweeper (billed up to its last checkpoint), and `drain` writes what waits.
 * No timer writes anything here: the test flushes when it means to.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { fundedKey as fundedKeyIn } from "../../test/helpers/funded-key.ts";
import type { ApiKeyRecord } from "../auth/api-keys.ts";
import type { CatalogModel } from "../catalog/catalog.ts";
import type { GenerationUsage } from "../engines/engine.ts";
import { InsufficientQuotaError } from "../protocol/errors.ts";
import { costOf } from "../protocol/price.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../test/helpers/databases.ts";
import type { LeaseSettings } from "./credit-leases.ts";
import { checkLedger } from "./ledger.ts";
import { closeStaleHolds } from "./lease-store.ts";
import { Metering } from "./metering.ts";

/** 1 credit a prompt token, 2 a completion token: 10 prompt tokens and at most 100 completion tokens hold 210. */
const model = { id: "quiet", pricing: { prompt: 1_000_000, cachedPrompt: 1_000_000, completion: 2_000_000 } } as unknown as CatalogModel;
const HELD = 210;
/** Every key quiet; no group commit unless asked for (or waited for); a checkpoint at every commit that finds progress. */
const QUIET: Partial<LeaseSettings> = { hotRequestsPerSecond: 1e9, flushIntervalMs: 600_000, checkpointIntervalMs: 0, checkpointTokens: 1 };
const usage = (completionTokens: number): GenerationUsage => ({ promptTokens: 10, cachedPromptTokens: 0, completionTokens, reasoningTokens: 0, source: "counted" });
const done = (completionTokens: number) => ({ usage: usage(completionTokens), status: 200, finishReason: "stop", latencyMs: 1 });
const costFor = (completionTokens: number) => costOf(model.pricing, usage(completionTokens));

for (const backend of backends) {
  describe(`a quiet key's settlement in the group commit (${backend})`, () => {
    let store: TestDatabase;
    before(async () => {
      store = await openTestDatabase(backend);
    });
    after(async () => {
      await store?.close();
    });

    const fundedKey = (credit: number) => fundedKeyIn(store.database, credit, "quiet");

    async function books(accountId: string) {
      const check = await checkLedger(store.database, accountId);
      const records = await store.database.selectFrom("usage_records").select(["request_id", "cost", "finish_reason"]).where("account_id", "=", accountId).orderBy("request_id").execute();
      return { ...check, records: records.map((record) => `${record.request_id}:${Number(record.cost)}:${record.finish_reason}`) };
    }

    const node = (nodeId: string) => new Metering({ database: store.database, nodeId: () => nodeId, holdTtlMs: 60_000, leases: QUIET });
    const admitInput = (key: ApiKeyRecord, requestId: string) => ({ key, plan: null, model, promptTokens: 10, maxTokens: 100, choices: 1, requestId, stream: true });

    it("answers before the settlement commits, the whole reservation held until the group commit settles the hold with its record", async () => {
      const { accountId, key } = await fundedKey(10_000);
      const metering = node("quiet-node");
      const admission = await metering.admit(admitInput(key, "q1"));
      assert.equal(admission.reserved, HELD);
      assert.deepEqual(await admission.settle(done(25)), { cost: costFor(25) });
      const waiting = await books(accountId);
      assert.equal(waiting.activeHolds, 1, "not settled yet");
      assert.equal(waiting.balance, 10_000 - HELD, "the whole reservation still held: no credit the settlement takes is free");
      assert.deepEqual(waiting.records, []);
      assert.equal((await metering.standingOf(key)).balance, 10_000 - costFor(25), "the pre-checks count what the settlement gives back");
      await metering.leases.flush();
      const settled = await books(accountId);
      assert.equal(settled.activeHolds, 0);
      assert.deepEqual(settled.records, [`q1:${costFor(25)}:stop`]);
      assert.equal(settled.balance, 10_000 - costFor(25));
      assert.equal(settled.balance, settled.sumOfEntries);
      assert.equal(settled.lotsRemaining, settled.balance);
      assert.equal((await metering.standingOf(key)).balance, settled.balance, "counted once");
      await metering.drain();
    });

    it("admits the next request that only the previous one's pending settlement stood in the way of, and never more than the credit", async () => {
      // 300 credits: one hold of 210 fits; after it settles at 60, a second (240 left) fits; a third does not.
      const { accountId, key } = await fundedKey(300);
      const metering = node("quiet-node-sequential");
      const first = await metering.admit(admitInput(key, "s1"));
      await first.settle(done(25));
      assert.equal((await books(accountId)).balance, 300 - HELD, "the first settlement still waits");
      const second = await metering.admit(admitInput(key, "s2"));
      assert.equal(second.reserved, HELD);
      await assert.rejects(metering.admit(admitInput(key, "s3")), InsufficientQuotaError, "30 left with the second's hold: refused after the first's settlement landed");
      await second.settle(done(25));
      await metering.drain();
      const after = await books(accountId);
      assert.deepEqual(after.records, [`s1:${costFor(25)}:stop`, `s2:${costFor(25)}:stop`]);
      assert.equal(after.balance, 300 - 2 * costFor(25));
      assert.equal(after.balance, after.sumOfEntries);
      assert.equal(after.activeHolds, 0);
    });

    it("settles a request whose usage cost more than its hold before answering, so that no later request finds that credit", async () => {
      const { accountId, key } = await fundedKey(10_000);
      const metering = node("quiet-node-overage");
      const admission = await metering.admit(admitInput(key, "o1"));
      // 150 completion tokens (an upstream counting past the bound): 310 against 210 held.
      assert.deepEqual(await admission.settle(done(150)), { cost: costFor(150) });
      const after = await books(accountId);
      assert.equal(after.activeHolds, 0, "settled before the answer");
      assert.deepEqual(after.records, [`o1:${costFor(150)}:stop`]);
      assert.equal(after.balance, 10_000 - costFor(150));
      assert.equal(after.balance, after.sumOfEntries);
      await metering.drain();
    });

    it("leaves a node killed after answering, before the group commit, to the sweeper: billed up to the last checkpoint, a hold without one released", async () => {
      const { accountId, key } = await fundedKey(10_000);
      const metering = node("quiet-node-killed");
      let generated = 0;
      const streamed = await metering.admit(admitInput(key, "k1"));
      streamed.track(() => usage(generated));
      generated = 40;
      await metering.leases.flush();
      generated = 60;
      await streamed.settle(done(60));
      const short = await metering.admit(admitInput(key, "k2"));
      await short.settle(done(3));
      metering.stop(); // killed: what waits for the group commit is lost
      assert.deepEqual(await closeStaleHolds(store.database, { deadNodes: ["quiet-node-killed"] }), { charged: 1, released: 1 });
      const after = await books(accountId);
      assert.deepEqual(after.records, [`k1:${costFor(40)}:interrupted`], "its last checkpoint, never more than it used");
      assert.equal(after.balance, 10_000 - costFor(40));
      assert.equal(after.balance, after.sumOfEntries);
      assert.equal(after.activeHolds, 0);
    });

    it("writes the waiting settlements at drain", async () => {
      const { accountId, key } = await fundedKey(10_000);
      const metering = node("quiet-node-drained");
      for (const [index, tokens] of [7, 0, 90].entries()) {
        const admission = await metering.admit(admitInput(key, `d${index}`));
        await admission.settle(index === 1 ? { usage: null, status: 500, finishReason: null, latencyMs: 1 } : done(tokens));
      }
      assert.equal((await books(accountId)).activeHolds, 3);
      assert.equal(await metering.drain(), 0);
      const after = await books(accountId);
      assert.equal(after.activeHolds, 0);
      assert.deepEqual(after.records, [`d0:${costFor(7)}:stop`, "d1:0:null", `d2:${costFor(90)}:stop`]);
      assert.equal(after.balance, 10_000 - costFor(7) - costFor(90));
      assert.equal(after.balance, after.sumOfEntries);
      assert.equal(after.lotsRemaining, after.balance);
    });
  });
}
