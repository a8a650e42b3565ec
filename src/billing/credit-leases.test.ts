/**
 * Metering from credit leases on both stores (real SQLite, this machine's real PostgreSQL):
 * a busy key is served from a lease with records in group commits, the books are exact once it
 * closes, a crashed node is charged what it recorded and checkpointed, and — the property — no
 * interleaving of requests, settlements, crashes and sweeps on two nodes overspends or bills a
 * request twice.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import fc from "fast-check";
import { fundedKey as fundedKeyIn } from "../../test/helpers/funded-key.ts";
import type { CatalogModel } from "../catalog/catalog.ts";
import type { GenerationUsage } from "../engines/engine.ts";
import { InsufficientQuotaError } from "../protocol/errors.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../test/helpers/databases.ts";
import { checkLedger, grantCredit, sweepHolds } from "./ledger.ts";
import { chargeStaleHolds, closeStaleHolds } from "./lease-store.ts";
import { forgetNodes, orphanedNodes, registerNode } from "./nodes.ts";
import { Metering } from "./metering.ts";
import { costOf } from "../protocol/price.ts";
import type { LeaseSettings } from "./credit-leases.ts";

/** 1 credit a prompt token, 2 a completion token. */
const model = { id: "leased", pricing: { prompt: 1_000_000, cachedPrompt: 1_000_000, completion: 2_000_000 } } as unknown as CatalogModel;
const FAST: Partial<LeaseSettings> = { flushIntervalMs: 20, leaseIdleMs: 60, leaseMaxAgeMs: 400, standingIdleMs: 200, standingMaxAgeMs: 400, checkpointIntervalMs: 40, checkpointTokens: 8 };

const usage = (completionTokens: number): GenerationUsage => ({ promptTokens: 10, cachedPromptTokens: 0, completionTokens, reasoningTokens: 0, source: "counted" });


/** Runs `work`, or fails once `ms` have passed, printing `what` first (a hang leaves no counterexample otherwise). */
async function withinDeadline<T>(ms: number, what: string, work: () => Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      console.error(`property run still running after ${ms} ms: ${what}`);
      reject(new Error(`a property run hung for ${ms} ms: ${what}`));
    }, ms);
  });
  try {
    return await Promise.race([work(), deadline]);
  } finally {
    clearTimeout(timer);
  }
}
for (const backend of backends) {
  describe(`credit leases (${backend})`, () => {
    let store: TestDatabase;
    before(async () => {
      store = await openTestDatabase(backend);
    });
    after(async () => {
      await store?.close();
    });

    const fundedKey = (credit: number) => fundedKeyIn(store.database, credit, "lease");

    async function books(accountId: string) {
      const check = await checkLedger(store.database, accountId);
      const records = await store.database.selectFrom("usage_records").select(["request_id", "cost", "completion_tokens", "finish_reason"]).where("account_id", "=", accountId).execute();
      return { ...check, records: records.map((record) => ({ ...record, cost: Number(record.cost), completion_tokens: Number(record.completion_tokens) })) };
    }

    function metering(nodeId: string, leases: Partial<LeaseSettings>, holdTtlMs = 60_000) {
      return new Metering({ database: store.database, nodeId: () => nodeId, holdTtlMs, leases: { ...FAST, leaseSeconds: 0, ...leases } });
    }

    it("serves a busy key from a few leases, writes every record in group commits, and the books are exact once they close", async () => {
      const { accountId, key } = await fundedKey(1_000_000);
      const node = metering("lease-node", { hotRequestsPerSecond: 0, leaseSeconds: 1 });
      let next = 0;
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          while (next < 200) {
            const index = next++;
            const admission = await node.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 20, choices: 1, requestId: `busy_${index}`, stream: false });
            const { cost } = await admission.settle({ usage: usage(index % 20), status: 200, finishReason: "stop", latencyMs: 1 });
            assert.equal(cost, costOf(model.pricing, usage(index % 20)));
          }
        }),
      );
      const holds = await store.database.selectFrom("holds").select((expression) => expression.fn.countAll<number>().as("count")).where("account_id", "=", accountId).executeTakeFirstOrThrow();
      assert.ok(Number(holds.count) <= 20, `200 requests took ${holds.count} holds`);
      assert.equal(await node.drain(), 0);
      const after = await books(accountId);
      const expected = Array.from({ length: 200 }, (_, index) => costOf(model.pricing, usage(index % 20))).reduce((sum, cost) => sum + cost, 0);
      assert.equal(after.records.length, 200);
      assert.equal(new Set(after.records.map((record) => record.request_id)).size, 200, "one record a request");
      assert.equal(after.records.reduce((sum, record) => sum + record.cost, 0), expected);
      assert.equal(after.balance, 1_000_000 - expected, "charged exactly what the records say");
      assert.equal(after.balance, after.sumOfEntries);
      assert.equal(after.activeHolds, 0);
      assert.equal(after.lotsRemaining, after.balance);
    });

    it("serves a quiet key that came back from a standing lease taken in the background, closes it when idle, and the books are exact", async () => {
      const { accountId, key } = await fundedKey(1_000_000);
      const node = metering("standing-node", { hotRequestsPerSecond: 1e9, standingIdleMs: 2_000, standingMaxAgeMs: 5_000 });
      /** Holds of one request's worst case (own holds, 10 + 2 × 20) and of four (leases). */
      const holdCount = async (amount: number) =>
        Number(
          (await store.database.selectFrom("holds").select((expression) => expression.fn.countAll<number>().as("count")).where("account_id", "=", accountId).where("amount", "=", amount).executeTakeFirstOrThrow())
            .count,
        );
      let expected = 0;
      const request = async (index: number) => {
        const admission = await node.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 20, choices: 1, requestId: `standing_${index}`, stream: false, balance: 1_000_000 });
        const { cost } = await admission.settle({ usage: usage(index % 20), status: 200, finishReason: "stop", latencyMs: 1 });
        assert.equal(cost, costOf(model.pricing, usage(index % 20)));
        expected += cost;
      };
      await request(0);
      assert.equal(node.leases.leased(key.id), false, "a key's first request takes its own hold only");
      await request(1);
      // The second within the idle time came back: a standing lease is taken after it, off its path.
      for (let wait = 0; wait < 200 && !node.leases.leased(key.id); wait++) await delay(10);
      assert.equal(node.leases.leased(key.id), true, "a quiet key that came back has a standing lease");
      assert.equal(await holdCount(50), 2, "two own holds");
      assert.equal(await holdCount(200), 1, "and the standing lease");
      for (let index = 2; index < 12; index++) {
        await request(index);
        await delay(15);
      }
      // Each lease serves a few requests (it is sized to four worst cases), renewed in the background.
      assert.equal(await holdCount(50), 2, "ten more quiet requests placed no hold of their own: standing leases served them");
      assert.ok((await holdCount(200)) <= 5, "renewed in the background as they used it up");
      // Idle past standingIdleMs, it closes by itself: charged what its records say, the rest given back.
      for (let wait = 0; wait < 600 && node.leases.leased(key.id); wait++) await delay(10);
      for (let wait = 0; wait < 300 && (await books(accountId)).activeHolds > 0; wait++) await delay(10);
      const after = await books(accountId);
      assert.equal(after.activeHolds, 0, "the idle standing lease closed");
      assert.equal(after.records.length, 12);
      assert.equal(after.balance, 1_000_000 - expected, "charged exactly what the records say");
      assert.equal(after.balance, after.sumOfEntries);
      assert.equal(after.lotsRemaining, after.balance);
      assert.equal(await node.drain(), 0);
    });

    it("takes no standing lease for an account whose balance (or a key whose cap) is not many times the lease, nor when standing leases are off", async () => {
      for (const [label, credit, settings, balance] of [
        ["low balance", 1_000_000, {}, 50 * 4 * 20 - 1],
        ["unknown balance", 1_000_000, {}, undefined],
        ["off", 1_000_000, { standingIdleMs: 0 }, 1_000_000],
      ] as const) {
        const { accountId, key } = await fundedKey(credit);
        const node = metering(`no-standing-${label}`, { hotRequestsPerSecond: 1e9, standingIdleMs: 2_000, standingMaxAgeMs: 5_000, ...settings });
        for (let index = 0; index < 4; index++) {
          const admission = await node.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 20, choices: 1, requestId: `nostanding_${label}_${index}`, stream: false, balance });
          await admission.settle({ usage: usage(5), status: 200, finishReason: "stop", latencyMs: 1 });
          await delay(20);
        }
        assert.equal(node.leases.leased(key.id), false, label);
        const holds = await store.database.selectFrom("holds").select((expression) => expression.fn.countAll<number>().as("count")).where("account_id", "=", accountId).executeTakeFirstOrThrow();
        assert.equal(Number(holds.count), 4, `${label}: a hold of its own for each request`);
        assert.equal(await node.drain(), 0);
      }
      const capped = await fundedKey(1_000_000);
      const node = metering("no-standing-cap", { hotRequestsPerSecond: 1e9, standingIdleMs: 2_000, standingMaxAgeMs: 5_000 });
      const key = { ...capped.key, spendCap: 3_000, spent: 0 };
      for (let index = 0; index < 3; index++) {
        const admission = await node.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 20, choices: 1, requestId: `nostanding_cap_${index}`, stream: false, balance: 1_000_000 });
        await admission.settle({ usage: usage(5), status: 200, finishReason: "stop", latencyMs: 1 });
        await delay(20);
      }
      assert.equal(node.leases.leased(key.id), false, "a cap of less than twenty leases takes none");
      assert.equal(await node.drain(), 0);
    });

    it("refuses a busy key what its account cannot cover, and gives back what a lease did not use", async () => {
      const { accountId, key } = await fundedKey(500);
      const node = metering("lease-node-low", { hotRequestsPerSecond: 0 });
      // Worst case 10 + 2 × 20 = 50: at most 10 fit.
      const outcomes = await Promise.allSettled(
        Array.from({ length: 30 }, async (_, index) => {
          const admission = await node.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 20, choices: 1, requestId: `low_${index}`, stream: false });
          await delay(5);
          return admission.settle({ usage: usage(20), status: 200, finishReason: "stop", latencyMs: 1 });
        }),
      );
      const admitted = outcomes.filter((outcome) => outcome.status === "fulfilled").length;
      for (const outcome of outcomes) if (outcome.status === "rejected") assert.ok(outcome.reason instanceof InsufficientQuotaError, String(outcome.reason));
      assert.ok(admitted >= 1 && admitted <= 10, `${admitted} admitted`);
      await node.drain();
      const after = await books(accountId);
      assert.equal(after.balance, 500 - 50 * admitted);
      assert.equal(after.balance, after.sumOfEntries);
      assert.equal(after.activeHolds, 0);
    });

    it("bills a killed node's running requests for their last checkpoint, and its finished ones as recorded", async () => {
      const { accountId, key } = await fundedKey(1_000_000);
      const node = metering("doomed-node", { hotRequestsPerSecond: 0 });
      const generated = [0, 0, 0];
      const running = await Promise.all(
        generated.map(async (_, index) => {
          const admission = await node.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 1000, choices: 1, requestId: `stream_${index}`, stream: true });
          admission.track(() => usage(generated[index]!));
          return admission;
        }),
      );
      const finished = await node.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 1000, choices: 1, requestId: "finished", stream: false });
      await finished.settle({ usage: usage(7), status: 200, finishReason: "stop", latencyMs: 1 });
      for (let step = 0; step < 10; step++) {
        for (let index = 0; index < generated.length; index++) generated[index]! += 10 * (index + 1);
        await delay(30);
      }
      await node.leases.flush();
      const checkpointed = [...generated];
      generated.fill(999); // generated after the last checkpoint: lost with the process
      node.stop(); // kill -9: nothing more is written
      assert.equal(running.length, 3);

      assert.equal(await chargeStaleHolds(store.database, { deadNodes: ["doomed-node"] }), 1);
      assert.equal(await sweepHolds(store.database, { deadNodes: ["doomed-node"] }), 0, "nothing left to release uncharged");
      const after = await books(accountId);
      const byRequest = new Map(after.records.map((record) => [record.request_id, record]));
      for (let index = 0; index < 3; index++) {
        const record = byRequest.get(`stream_${index}`);
        assert.equal(record?.completion_tokens, checkpointed[index], `stream ${index} billed for its checkpoint`);
        assert.equal(record?.finish_reason, "interrupted");
        assert.equal(record?.cost, costOf(model.pricing, usage(checkpointed[index]!)));
      }
      assert.equal(byRequest.get("finished")?.completion_tokens, 7);
      const charged = after.records.reduce((sum, record) => sum + record.cost, 0);
      assert.equal(after.balance, 1_000_000 - charged);
      assert.equal(after.balance, after.sumOfEntries);
      assert.equal(after.activeHolds, 0);
      assert.equal(after.lotsRemaining, after.balance);
      const left = await store.database.selectFrom("usage_checkpoints").select("id").where("account_id", "=", accountId).execute();
      assert.equal(left.length, 0, "checkpoints became records");
    });

    for (const [served, hotRequestsPerSecond] of [["a lease", 0], ["its own hold", 1e9]] as const) {
      it(`deletes the checkpoint of a request (on ${served}) that finishes while the commit writing it is in flight, and a request that never checkpointed leaves none`, async () => {
        const { accountId, key } = await fundedKey(1_000_000);
        // No timed commits: this test starts each one.
        const node = metering(`racing-node-${hotRequestsPerSecond}`, { hotRequestsPerSecond, flushIntervalMs: 60_000 });
        const checkpointsOf = async (requestId: string) => (await store.database.selectFrom("usage_checkpoints").select("id").where("request_id", "=", requestId).execute()).length;
        const racing = await node.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 1000, choices: 1, requestId: `racing_${hotRequestsPerSecond}`, stream: true, balance: 1_000_000 });
        let generated = 0;
        racing.track(() => usage(generated));
        const never = await node.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 1000, choices: 1, requestId: `never_${hotRequestsPerSecond}`, stream: true, balance: 1_000_000 });
        never.track(() => usage(0));
        await node.leases.flush();
        generated = 30; // past `checkpointTokens`: due in the next commit
        let landed = false;
        const inflight = node.leases.flush().then(() => (landed = true));
        await null; // the commit has taken the checkpoint and is writing it
        const settled = racing.settle({ usage: usage(30), status: 200, finishReason: "stop", latencyMs: 1 });
        assert.equal(landed, false, "the request finished while the commit writing its checkpoint was in flight");
        await inflight;
        assert.equal(await checkpointsOf(`racing_${hotRequestsPerSecond}`), 1, "that commit wrote the checkpoint");
        await settled;
        await never.settle({ usage: usage(5), status: 200, finishReason: "stop", latencyMs: 1 });
        assert.equal(await node.drain(), 0);
        assert.equal(await checkpointsOf(`racing_${hotRequestsPerSecond}`), 0, "the record replaced the checkpoint sent before it finished");
        assert.equal(await checkpointsOf(`never_${hotRequestsPerSecond}`), 0);
        const after = await books(accountId);
        assert.deepEqual(after.records.map((record) => [record.request_id, record.completion_tokens]).sort(), [
          [`never_${hotRequestsPerSecond}`, 5],
          [`racing_${hotRequestsPerSecond}`, 30],
        ]);
        assert.equal(after.balance, 1_000_000 - costOf(model.pricing, usage(30)) - costOf(model.pricing, usage(5)));
        assert.equal(after.balance, after.sumOfEntries);
        assert.equal(after.activeHolds, 0);
      });
    }

    it("charges a live node's request in full, with its own record, when it ends after its hold expired and was swept", async () => {
      const { accountId, key } = await fundedKey(10_000);
      const node = metering("slow-node", { hotRequestsPerSecond: 1e9 }, 50);
      let generated = 0;
      const admission = await node.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 1000, choices: 1, requestId: "outlived", stream: true });
      admission.track(() => usage(generated));
      generated = 40;
      await delay(60);
      await node.leases.flush();
      assert.equal((await store.database.selectFrom("usage_checkpoints").select("id").where("request_id", "=", "outlived").execute()).length, 1, "checkpointed");
      // Past its expiry, its node alive: the sweeper releases the hold, leaving its cost open.
      assert.deepEqual(await closeStaleHolds(store.database, { deadNodes: [] }), { charged: 0, released: 1 });
      generated = 100;
      const { cost } = await admission.settle({ usage: usage(100), status: 200, finishReason: "length", latencyMs: 1 });
      assert.equal(cost, costOf(model.pricing, usage(100)));
      // A quiet request's hold is settled in the group commit after its answer.
      await node.leases.flush();
      node.stop();
      const after = await books(accountId);
      assert.deepEqual(
        after.records.map((record) => [record.request_id, record.completion_tokens, record.finish_reason]),
        [["outlived", 100, "length"]],
        "one record, the request's own",
      );
      assert.equal(after.balance, 10_000 - costOf(model.pricing, usage(100)));
      assert.equal(after.balance, after.sumOfEntries);
      assert.equal(after.activeHolds, 0);
    });

    it("sweeps the holds of a node that is no longer registered, charging what was recorded against them", async () => {
      const { accountId, key } = await fundedKey(1_000);
      const node = metering("forgotten-node", { hotRequestsPerSecond: 0, leaseSeconds: 1 });
      const admission = await node.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 20, choices: 1, requestId: "orphan_1", stream: false });
      await admission.settle({ usage: usage(5), status: 200, finishReason: "stop", latencyMs: 1 });
      await node.leases.flush();
      node.stop(); // gone without closing its lease, and never registered (or forgotten)
      const live = await registerNode(store.database);
      try {
        assert.ok((await orphanedNodes(store.database)).includes("forgotten-node"));
        assert.ok(!(await orphanedNodes(store.database)).includes(live), "a registered node is not an orphan");
        assert.equal(await chargeStaleHolds(store.database, { deadNodes: await orphanedNodes(store.database) }), 1);
        const after = await books(accountId);
        assert.equal(after.activeHolds, 0);
        assert.equal(after.balance, 1_000 - costOf(model.pricing, usage(5)));
        assert.equal(after.balance, after.sumOfEntries);
      } finally {
        await forgetNodes(store.database, [live]);
      }
    });

    it("closes at drain a lease whose background renewal was still being taken", async () => {
      const { accountId, key } = await fundedKey(10_000);
      // Holds placed while `slow` is on answer late (a database contended by other nodes): the
      // renewal a request starts in the background is still in flight when the node drains.
      let slow = false;
      const delayed = new Set<unknown>();
      const database = store.database.withPlugin({
        transformQuery({ node, queryId }) {
          const text = JSON.stringify(node);
          if (slow && (node.kind === "InsertQueryNode" || node.kind === "RawNode") && /insert into holds|"name":"holds"/.test(text)) delayed.add(queryId);
          return node;
        },
        async transformResult({ result, queryId }) {
          if (delayed.delete(queryId)) await delay(150);
          return result;
        },
      });
      const node = new Metering({ database, nodeId: () => "renewing-node", holdTtlMs: 60_000, leases: { ...FAST, leaseSeconds: 0, hotRequestsPerSecond: 0 } });
      // Worst case 1 + 2 × 20 = 41; the lease holds four of them, and the third leaves less than half.
      const admit = (index: number) => node.admit({ key, plan: null, model, promptTokens: 1, maxTokens: 20, choices: 1, requestId: `renew_${index}`, stream: false });
      const first = await admit(0);
      const second = await admit(1);
      slow = true;
      const third = await admit(2);
      for (const admission of [first, second, third]) await admission.settle({ usage: { ...usage(0), promptTokens: 1 }, status: 200, finishReason: "stop", latencyMs: 1 });
      assert.equal(await node.drain(), 0);
      await delay(300); // a renewal that drain did not wait for lands here
      const after = await books(accountId);
      assert.equal(after.records.length, 3);
      assert.equal(after.activeHolds, 0, "no lease left open after drain");
      assert.equal(after.balance, 10_000 - 3, "charged exactly what the records say");
      assert.equal(after.balance, after.sumOfEntries);
      assert.equal(after.lotsRemaining, after.balance);
    });

    type Step =
      | { kind: "requests"; node: 0 | 1; worst: number[]; used: number[] }
      | { kind: "crash"; node: 0 | 1 }
      | { kind: "sweep" }
      | { kind: "flush"; node: 0 | 1 }
      | { kind: "grant"; amount: number };
    let run = 0;
    /** One run of the property below: `steps` on two nodes, then both drain and the dead are swept; the books must be exact. */
    async function twoNodes(credit: number, steps: readonly Step[], busy: boolean): Promise<void> {
      const { accountId, key } = await fundedKey(credit);
      let granted = credit;
      // Node 0 serves from leases (busy) or own holds and standing leases; node 1 the other way round.
      const hotness = (node: number) => ((node === 0) === busy ? 0 : 1e9);
      // Leases of four requests' worth (no rate to size them by): they run out often, which is what is tested.
      let generation = 0;
      const nodeIds = [`p${run}-0-0`, `p${run}-1-0`];
      const nodes = [metering(nodeIds[0]!, { hotRequestsPerSecond: hotness(0) }), metering(nodeIds[1]!, { hotRequestsPerSecond: hotness(1) })];
      const dead: string[] = [];
      /** Requests settled on a node that then drained or stayed alive: their charge is known. */
      const settled = new Map<string, number>();
      /** Requests settled on a node that crashed before draining: billed at most once, at most their cost. */
      const atRisk = new Map<string, Set<string>>([[nodeIds[0]!, new Set()], [nodeIds[1]!, new Set()]]);
      const costs = new Map<string, number>();
      let requestIndex = 0;
      for (const action of steps) {
        if (action.kind === "requests") {
          const node = nodes[action.node]!;
          const nodeId = nodeIds[action.node]!;
          await Promise.all(
            action.worst.map(async (worst, index) => {
              const requestId = `r${run}_${requestIndex++}`;
              const maxTokens = worst;
              let admission;
              try {
                // The balance as a standing read would say it, and larger: the quiet node takes standing leases whenever a key comes back (the hold's write decides).
                admission = await node.admit({ key, plan: null, model, promptTokens: 1, maxTokens, choices: 1, requestId, stream: false, balance: 1e12 });
              } catch (error) {
                assert.ok(error instanceof InsufficientQuotaError, String(error));
                return;
              }
              const used = usage(Math.floor((action.used[index] ?? 0) * maxTokens));
              const cost = costOf(model.pricing, { ...used, promptTokens: 1 });
              costs.set(requestId, cost);
              await admission.settle({ usage: { ...used, promptTokens: 1 }, status: 200, finishReason: "stop", latencyMs: 1 });
              atRisk.get(nodeId)!.add(requestId);
            }),
          );
        } else if (action.kind === "crash") {
          const nodeId = nodeIds[action.node]!;
          nodes[action.node]!.stop();
          dead.push(nodeId);
          generation++;
          nodeIds[action.node] = `p${run}-${action.node}-${generation}`;
          atRisk.set(nodeIds[action.node]!, new Set());
          nodes[action.node] = metering(nodeIds[action.node]!, { hotRequestsPerSecond: hotness(action.node) });
        } else if (action.kind === "sweep") {
          await closeStaleHolds(store.database, { deadNodes: dead });
        } else if (action.kind === "flush") {
          await nodes[action.node]!.leases.flush();
        } else {
          await grantCredit(store.database, { accountId, amount: action.amount, source: `grant:${accountId}:${Math.random()}` });
          granted += action.amount;
        }
        const check = await checkLedger(store.database, accountId);
        assert.ok(check.balance >= 0, "the balance never goes below zero");
        assert.equal(check.balance, check.sumOfEntries);
      }
      // The living nodes shut down cleanly; the dead ones are swept.
      for (let index = 0; index < 2; index++) {
        assert.equal(await nodes[index]!.drain(), 0);
        for (const requestId of atRisk.get(nodeIds[index]!)!) settled.set(requestId, costs.get(requestId)!);
      }
      await closeStaleHolds(store.database, { deadNodes: dead });
      const after = await books(accountId);
      const recorded = new Map<string, number>();
      for (const record of after.records) {
        assert.ok(!recorded.has(record.request_id), `${record.request_id} billed twice`);
        recorded.set(record.request_id, record.cost);
      }
      for (const [requestId, cost] of settled) assert.equal(recorded.get(requestId), cost, `${requestId}, settled on a node that did not crash, is billed exactly`);
      for (const [requestId, cost] of recorded) assert.ok(cost <= (costs.get(requestId) ?? -1), `${requestId} billed ${cost}, more than it used`);
      const charged = [...recorded.values()].reduce((sum, cost) => sum + cost, 0);
      assert.equal(after.balance, granted - charged, "the account is charged exactly what its records say");
      assert.ok(charged <= granted, "no credit spent that was not there");
      assert.equal(after.activeHolds, 0);
      assert.equal(after.balance, after.sumOfEntries);
      assert.equal(after.lotsRemaining, after.balance);
      run++;
    }

    it("gives back what a lease did not use when the account's grant lands between its requests (a counterexample of the property)", async () => {
      // fast-check's shrunk case (PostgreSQL, seed -1336465398): every request uses its prompt only.
      const requests = (node: 0 | 1, worst: number[]): Step => ({ kind: "requests", node, worst, used: [0, 0, 0, 0, 0, 0] });
      await twoNodes(
        15_490,
        [
          requests(1, [52, 25, 70]),
          requests(0, [100, 53, 31]),
          requests(0, [50, 94, 71, 86, 78, 12]),
          requests(0, [93, 72, 51, 22]),
          { kind: "grant", amount: 1_246 },
          requests(1, [100]),
          requests(0, [45]),
          requests(0, [2, 62, 102]),
          requests(0, [116, 67]),
          requests(0, [63, 65]),
        ],
        true,
      );
    });

    it("never overspends nor bills twice, whatever interleaving of requests, crashes and sweeps on two nodes (property)", async () => {
      const step: fc.Arbitrary<Step> = fc.oneof(
        { weight: 6, arbitrary: fc.record({ kind: fc.constant("requests" as const), node: fc.constantFrom(0 as const, 1 as const), worst: fc.array(fc.integer({ min: 1, max: 120 }), { minLength: 1, maxLength: 6 }), used: fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: 6, maxLength: 6 }) }) },
        { weight: 1, arbitrary: fc.record({ kind: fc.constant("crash" as const), node: fc.constantFrom(0 as const, 1 as const) }) },
        { weight: 1, arbitrary: fc.record({ kind: fc.constant("sweep" as const) }) },
        { weight: 1, arbitrary: fc.record({ kind: fc.constant("flush" as const), node: fc.constantFrom(0 as const, 1 as const) }) },
        { weight: 1, arbitrary: fc.record({ kind: fc.constant("grant" as const), amount: fc.integer({ min: 1, max: 3_000 }) }) },
      );
      await fc.assert(
        fc.asyncProperty(fc.oneof(fc.integer({ min: 0, max: 600 }), fc.integer({ min: 600, max: 20_000 })), fc.array(step, { minLength: 3, maxLength: 14 }), fc.boolean(), (credit, steps, busy) =>
          // A run takes milliseconds; one seen once to hang (PostgreSQL, in CI) prints its case at once, so it can be replayed.
          withinDeadline(30_000, `credit ${credit}, busy ${busy}, steps ${JSON.stringify(steps)}`, () => twoNodes(credit, steps, busy)),
        ),
        { numRuns: backend === "sqlite" ? 60 : 20 },
      );
    });
  });
}
