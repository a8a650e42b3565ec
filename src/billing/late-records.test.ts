/**
 * Issue 20 row 2: no usage record is ever left uncharged after an outage, on real SQLite and this
 * machine's real PostgreSQL, each interleaving driven exactly (fault points in the queries, a TCP
 * proxy that loses an answer): a record that lands after the sweeper closed its lease, a group
 * commit in flight while the sweeper closes its lease, a settlement whose record the sweeper
 * wrote from its checkpoint before failing to close the hold, and retries after a commit whose
 * answer was lost. After each: Σ usage-record cost = Σ charged, per account and per key.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { sql } from "kysely";
import { fundedKey as fundedKeyIn } from "../../test/helpers/funded-key.ts";
import type { ApiKeyRecord } from "../auth/api-keys.ts";
import type { CatalogModel } from "../catalog/catalog.ts";
import type { GenerationUsage } from "../engines/engine.ts";
import { openStore } from "../store/open.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../test/helpers/databases.ts";
import { assertBooksBalanced } from "../../test/helpers/audit-books.ts";
import { QueryFaults } from "../../test/helpers/query-faults.ts";
import { TcpProxy } from "../../test/helpers/tcp-proxy.ts";
import { temporaryDirectory } from "../../test/helpers/server.ts";
import { placeHold, releaseHold } from "./ledger.ts";
import { chargeStaleHolds, closeStaleHolds } from "./lease-store.ts";
import { Metering, type DeferredSettlementEvent } from "./metering.ts";
import { costOf } from "../protocol/price.ts";
import type { BatchEvent, LeaseSettings } from "./credit-leases.ts";

/** 1 credit a prompt token, 2 a completion token. */
const model = { id: "late", pricing: { prompt: 1_000_000, cachedPrompt: 1_000_000, completion: 2_000_000 } } as unknown as CatalogModel;
/** No timer writes or closes anything on its own: the test flushes and drains when it means to. */
const MANUAL: Partial<LeaseSettings> = { flushIntervalMs: 600_000, leaseIdleMs: 600_000, leaseMaxAgeMs: 600_000, checkpointIntervalMs: 0, checkpointTokens: 1, leaseSeconds: 0 };
const usage = (completionTokens: number): GenerationUsage => ({ promptTokens: 10, cachedPromptTokens: 0, completionTokens, reasoningTokens: 0, source: "counted" });
const done = (completionTokens: number) => ({ usage: usage(completionTokens), status: 200, finishReason: "stop", latencyMs: 1 });

for (const backend of backends) {
  describe(`usage records after an outage (${backend})`, () => {
    let store: TestDatabase;
    before(async () => {
      store = await openTestDatabase(backend);
    });
    after(async () => {
      await store?.close();
    });

    const fundedKey = (credit: number) => fundedKeyIn(store.database, credit, "late");

    const admitInput = (key: ApiKeyRecord, requestId: string) => ({ key, plan: null, model, promptTokens: 10, maxTokens: 100, choices: 1, requestId, stream: true });

    async function records(accountId: string) {
      const rows = await store.database.selectFrom("usage_records").select(["request_id", "cost"]).where("account_id", "=", accountId).orderBy("request_id").execute();
      return rows.map((row) => `${row.request_id}:${Number(row.cost)}`);
    }

    it("charges a record that lands after the sweeper closed its lease to the account directly, once", async () => {
      const { accountId, key } = await fundedKey(100_000);
      const events: BatchEvent[] = [];
      const node = new Metering({ database: store.database, nodeId: () => "late-node", holdTtlMs: 60_000, leases: { ...MANUAL, hotRequestsPerSecond: 0 }, onBatch: (event) => events.push(event) });
      const first = await node.admit(admitInput(key, "late_1"));
      const second = await node.admit(admitInput(key, "late_2"));
      await first.settle(done(20));
      await node.leases.flush();
      // The node could not reach the database (a black hole): another node's sweeper took it for
      // dead and closed its lease, charging the record written so far.
      assert.equal(await chargeStaleHolds(store.database, { deadNodes: ["late-node"] }), 1);
      // The node is back: its second request ends, and its record lands against the closed lease.
      await second.settle(done(30));
      await node.leases.flush();
      assert.equal(await node.drain(), 0);
      assert.deepEqual(await records(accountId), [`late_1:${costOf(model.pricing, usage(20))}`, `late_2:${costOf(model.pricing, usage(30))}`]);
      const books = await assertBooksBalanced(store.database, [accountId]);
      assert.equal(books.accounts[0]!.balance, 100_000 - costOf(model.pricing, usage(20)) - costOf(model.pricing, usage(30)));
      const late = events.filter((event) => event.kind === "late");
      assert.equal(late.length, 1, "the late charge is reported (and logged)");
      assert.deepEqual(late[0] && { records: late[0].records, charged: late[0].charged, short: late[0].short }, { records: 1, charged: costOf(model.pricing, usage(30)), short: 0 });
      // Another sweep finds nothing more to charge.
      assert.equal(await chargeStaleHolds(store.database, { deadNodes: ["late-node"] }), 0);
      await assertBooksBalanced(store.database, [accountId]);
    });

    it("charges a late record only as far as the balance covers, never below zero, and its record says what was charged", async () => {
      const { accountId, key } = await fundedKey(1_000);
      const events: BatchEvent[] = [];
      const node = new Metering({ database: store.database, nodeId: () => "poor-node", holdTtlMs: 60_000, leases: { ...MANUAL, hotRequestsPerSecond: 0 }, onBatch: (event) => events.push(event) });
      // Worst case 10 + 2 × 100 = 210 each, from a lease of four times that.
      const first = await node.admit(admitInput(key, "poor_1"));
      const second = await node.admit(admitInput(key, "poor_2"));
      await first.settle(done(100));
      await node.leases.flush();
      assert.equal(await chargeStaleHolds(store.database, { deadNodes: ["poor-node"] }), 1);
      // The credit the sweeper gave back is reserved by another node's request meanwhile.
      const elsewhere = await placeHold(store.database, { accountId, keyId: null, amount: 1_000 - 210, nodeId: "other-node", ttlMs: 60_000 });
      await second.settle(done(100));
      await node.leases.flush();
      await node.drain();
      await releaseHold(store.database, elsewhere);
      assert.deepEqual(await records(accountId), ["poor_1:210", "poor_2:0"]);
      const books = await assertBooksBalanced(store.database, [accountId]);
      assert.equal(books.accounts[0]!.balance, 1_000 - 210);
      const late = events.find((event) => event.kind === "late");
      assert.deepEqual(late && { charged: late.charged, short: late.short }, { charged: 0, short: 210 }, "the shortfall is reported (and logged)");
    });

    it("settles a request whose record the sweeper wrote from its checkpoint before failing to close its hold: no duplicate key, charged once", async () => {
      const { accountId, key } = await fundedKey(100_000);
      const deferred: DeferredSettlementEvent[] = [];
      const node = new Metering({
        database: store.database,
        nodeId: () => "checkpointed-node",
        holdTtlMs: 60_000,
        leases: { ...MANUAL, hotRequestsPerSecond: 1e9 },
        retryDelaysMs: [20],
        onDeferred: (event) => deferred.push(event),
      });
      let generated = 0;
      const admission = await node.admit(admitInput(key, "checkpointed"));
      admission.track(() => usage(generated));
      generated = 40;
      await node.leases.flush();
      // The sweeper (this node looked dead) turns the checkpoint into a record, then its
      // connection is cut before it charges the hold.
      const faults = new QueryFaults(store.database);
      faults.failAt(/^select sum\("cost"\) as "total" from "usage_records"/);
      await assert.rejects(chargeStaleHolds(faults.database, { deadNodes: ["checkpointed-node"] }));
      // The node was alive: its request ends and settles.
      const settled = await admission.settle(done(60));
      assert.equal(settled.cost, costOf(model.pricing, usage(60)), "charged in full, not released uncharged");
      assert.deepEqual(deferred, []);
      await node.drain();
      await closeStaleHolds(store.database, { deadNodes: ["checkpointed-node"] });
      assert.deepEqual(await records(accountId), [`checkpointed:${costOf(model.pricing, usage(60))}`]);
      await assertBooksBalanced(store.database, [accountId]);
    });

    it("settles a request over a record already there while its hold is still active (written by an older node): replaced, charged once", async () => {
      const { accountId, key } = await fundedKey(100_000);
      const node = new Metering({ database: store.database, nodeId: () => "dup-node", holdTtlMs: 60_000, leases: { ...MANUAL, hotRequestsPerSecond: 1e9 } });
      let generated = 0;
      const admission = await node.admit(admitInput(key, "dup"));
      admission.track(() => usage(generated));
      generated = 40;
      await node.leases.flush();
      const checkpoint = await store.database.selectFrom("usage_checkpoints").selectAll().where("request_id", "=", "dup").executeTakeFirstOrThrow();
      await store.database
        .insertInto("usage_records")
        .values({
          id: checkpoint.id,
          request_id: "dup",
          account_id: accountId,
          key_id: key.id,
          model: model.id,
          prompt_tokens: 10,
          cached_prompt_tokens: 0,
          completion_tokens: 40,
          cost: Number(checkpoint.cost),
          latency_ms: 1,
          status: 500,
          finish_reason: "interrupted",
          stream: 1,
          created_at: Date.now(),
          hold_id: checkpoint.hold_id,
        })
        .execute();
      assert.equal((await admission.settle(done(60))).cost, costOf(model.pricing, usage(60)));
      await node.drain();
      assert.deepEqual(await records(accountId), [`dup:${costOf(model.pricing, usage(60))}`]);
      await assertBooksBalanced(store.database, [accountId]);
    });

    if (backend !== "postgres") return;

    it("fences off a group commit in flight while the sweeper closes its lease: the record is charged with it", async () => {
      const { accountId, key } = await fundedKey(100_000);
      const faults = new QueryFaults(store.database);
      const node = new Metering({ database: faults.database, nodeId: () => "inflight-node", holdTtlMs: 60_000, leases: { ...MANUAL, hotRequestsPerSecond: 0 } });
      const first = await node.admit(admitInput(key, "inflight_1"));
      const second = await node.admit(admitInput(key, "inflight_2"));
      // A checkpoint of the second: its record replaces it, so its group commit is a transaction.
      second.track(() => usage(5));
      await first.settle(done(20));
      await node.leases.flush();
      await second.settle(done(30));
      // The group commit has written the second record, uncommitted, when the sweeper closes the lease.
      const paused = faults.pauseAfter(/^insert into "usage_records"/);
      const flushing = node.leases.flush();
      await paused.reached;
      const applicationName = `sweeper_${Math.random().toString(36).slice(2)}`;
      const sweeperDatabase = await openStore({ dataDir: temporaryDirectory(), databaseUrl: `${store.databaseUrl}&application_name=${applicationName}` });
      try {
        let swept = false;
        const sweeping = chargeStaleHolds(sweeperDatabase, { deadNodes: ["inflight-node"] }).finally(() => (swept = true));
        // Until the sweeper is done (it did not wait) or waits for the lease's row lock.
        for (let attempt = 0; attempt < 400 && !swept; attempt++) {
          const { rows } = await sql<{ waiting: number }>`select count(*)::int as waiting from pg_stat_activity where application_name = ${applicationName} and wait_event_type = 'Lock'`.execute(store.database);
          if (rows[0]!.waiting > 0) break;
          await delay(25);
        }
        paused.release();
        await flushing;
        assert.equal(await sweeping, 1);
      } finally {
        await sweeperDatabase.destroy();
      }
      assert.equal(await node.drain(), 0);
      const books = await assertBooksBalanced(store.database, [accountId]);
      assert.equal(books.accounts[0]!.charged, costOf(model.pricing, usage(20)) + costOf(model.pricing, usage(30)));
    });

    it("fences off a one-statement group commit (records of holds, nothing else) behind a sweeper closing their lease: nothing written by it, then the record and its late charge together", async () => {
      const { accountId, key } = await fundedKey(100_000);
      const applicationName = `fenced_${Math.random().toString(36).slice(2)}`;
      const nodeDatabase = await openStore({ dataDir: temporaryDirectory(), databaseUrl: `${store.databaseUrl}&application_name=${applicationName}` });
      const sweeperStore = await openStore({ dataDir: temporaryDirectory(), databaseUrl: store.databaseUrl! });
      const sweeper = new QueryFaults(sweeperStore);
      try {
        const faults = new QueryFaults(nodeDatabase);
        const node = new Metering({ database: faults.database, nodeId: () => "fenced-node", holdTtlMs: 60_000, leases: { ...MANUAL, hotRequestsPerSecond: 0 } });
        const first = await node.admit(admitInput(key, "fenced_1"));
        const second = await node.admit(admitInput(key, "fenced_2"));
        await first.settle(done(20));
        await node.leases.flush();
        await second.settle(done(30));
        // The sweeper has locked the lease's hold, to close it, when the group commit runs.
        const locked = sweeper.pauseAfter(/from "holds" where .*for update/);
        const sweeping = chargeStaleHolds(sweeper.database, { deadNodes: ["fenced-node"] });
        await locked.reached;
        // The statement finds the hold closed: it writes nothing, and the transaction that would write
        // the record and its late charge together fails at its first query, as a node dying there would.
        const transaction = faults.failAt(/^select \* from "holds" where "id" in/);
        const flushing = node.leases.flush();
        let waited = false;
        for (let attempt = 0; attempt < 400 && !waited; attempt++) {
          const { rows } = await sql<{ waiting: number }>`select count(*)::int as waiting from pg_stat_activity where application_name = ${applicationName} and wait_event_type = 'Lock'`.execute(store.database);
          waited = rows[0]!.waiting > 0;
          if (!waited) await delay(25);
        }
        assert.ok(waited, "the group commit waits for the hold's lock");
        locked.release();
        assert.equal(await sweeping, 1);
        await assert.rejects(flushing);
        await transaction.reached;
        assert.deepEqual(await records(accountId), [`fenced_1:${costOf(model.pricing, usage(20))}`], "no record without its charge");
        await node.leases.flush();
        assert.equal(await node.drain(), 0);
        node.stop();
      } finally {
        await nodeDatabase.destroy();
        await sweeperStore.destroy();
      }
      assert.deepEqual(await records(accountId), [`fenced_1:${costOf(model.pricing, usage(20))}`, `fenced_2:${costOf(model.pricing, usage(30))}`]);
      const books = await assertBooksBalanced(store.database, [accountId]);
      assert.equal(books.accounts[0]!.charged, costOf(model.pricing, usage(20)) + costOf(model.pricing, usage(30)));
    });

    it("retries a settlement and a group commit whose COMMIT went through but whose answer was lost: no duplicate key, charged once", async () => {
      const { accountId, key } = await fundedKey(100_000);
      const proxy = new TcpProxy(store.databaseUrl!);
      await proxy.open();
      const database = await openStore({ dataDir: temporaryDirectory(), databaseUrl: proxy.url(store.databaseUrl!), queryTimeoutMs: 5_000 });
      const deferred: DeferredSettlementEvent[] = [];
      const batches: BatchEvent[] = [];
      const ownBatches: BatchEvent[] = [];
      try {
        const own = new Metering({
          database,
          nodeId: () => "lost-answer-node",
          holdTtlMs: 60_000,
          leases: { ...MANUAL, hotRequestsPerSecond: 1e9 },
          retryDelaysMs: [20],
          onDeferred: (event) => deferred.push(event),
          onBatch: (event) => ownBatches.push(event),
        });
        // A hold of its own whose usage cost more than it reserved (210) is settled before answering.
        const admission = await own.admit(admitInput(key, "lost_own"));
        const lost = proxy.loseNextAnswer(/commit/i);
        const settled = await admission.settle(done(150));
        await lost;
        assert.equal(settled.cost, null, "the answer was lost: the charge is retried");
        for (let attempt = 0; attempt < 400 && !deferred.some((event) => event.kind !== "deferred"); attempt++) await delay(25);
        assert.deepEqual(deferred.map((event) => event.kind), ["deferred", "settled"]);

        // One within its reservation is settled in the group commit that writes its record.
        const quiet = await own.admit(admitInput(key, "lost_quiet"));
        assert.deepEqual(await quiet.settle(done(25)), { cost: costOf(model.pricing, usage(25)) });
        const lostOwnBatch = proxy.loseNextAnswer(/commit/i);
        await assert.rejects(own.leases.flush());
        await lostOwnBatch;
        await own.leases.flush();
        assert.deepEqual(ownBatches.map((event) => event.kind), ["deferred", "written"]);

        const leased = new Metering({ database, nodeId: () => "lost-answer-node", holdTtlMs: 60_000, leases: { ...MANUAL, hotRequestsPerSecond: 0 }, onBatch: (event) => batches.push(event) });
        const request = await leased.admit(admitInput(key, "lost_leased"));
        await request.settle(done(35));
        // A lease's records with nothing else to write go in one statement, committed on its own.
        const lostBatch = proxy.loseNextAnswer(/with "locked"/);
        await assert.rejects(leased.leases.flush());
        await lostBatch;
        await leased.leases.flush();
        assert.equal(await leased.drain(), 0);
        own.stop();
        leased.stop();
      } finally {
        await database.destroy();
        await proxy.close();
      }
      assert.deepEqual(batches.map((event) => event.kind), ["deferred", "written"]);
      assert.deepEqual(await records(accountId), [
        `lost_leased:${costOf(model.pricing, usage(35))}`,
        `lost_own:${costOf(model.pricing, usage(150))}`,
        `lost_quiet:${costOf(model.pricing, usage(25))}`,
      ]);
      await assertBooksBalanced(store.database, [accountId]);
    });
  });
}
