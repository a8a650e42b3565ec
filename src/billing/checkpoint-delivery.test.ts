/**
 * Issue 20, rows 1 and 3, at the metering's level: billing leads the client. With the group
 * commit's timer out of the way (a minute), only a request that waits can get a commit:
 * - a stream asks for a checkpoint half a checkpoint ahead, and output more than one checkpoint
 *   past the last durable one waits for the commit that writes one;
 * - a leased request's `settle` resolves at once while the group commit keeps up (its record
 *   joins the next one), and only once its record is written while the commit is late;
 * - while a commit keeps someone waiting past `shedAfterMs`, new requests get 503 `metering_behind`.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import pg from "pg";
import { createAccount } from "../accounts/accounts.ts";
import { createApiKey, verifyApiKey, type ApiKeyRecord } from "../auth/api-keys.ts";
import type { CatalogModel } from "../catalog/catalog.ts";
import type { GenerationUsage } from "../engines/engine.ts";
import { MeteringBehindError } from "../protocol/errors.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../test/helpers/databases.ts";
import { grantCredit } from "./ledger.ts";
import { Metering } from "./metering.ts";
import type { LeaseSettings } from "./credit-leases.ts";

const model = { id: "leased", pricing: { prompt: 1_000_000, cachedPrompt: 1_000_000, completion: 1_000_000 } } as unknown as CatalogModel;
/** No timer-driven commit during a test: every commit here is one somebody asked for. */
const NO_TIMER: Partial<LeaseSettings> = { flushIntervalMs: 60_000, checkpointIntervalMs: 60_000, checkpointTokens: 64, hotRequestsPerSecond: 0, leaseSeconds: 0 };
const usage = (completionTokens: number): GenerationUsage => ({ promptTokens: 10, cachedPromptTokens: 0, completionTokens, reasoningTokens: 0, source: "counted" });

for (const backend of backends) {
  describe(`billing leads the client (${backend})`, () => {
    let store: TestDatabase;
    const meterings: Metering[] = [];
    before(async () => {
      store = await openTestDatabase(backend);
    });
    after(async () => {
      for (const metering of meterings) metering.stop();
      await store?.close();
    });

    async function fundedKey(): Promise<ApiKeyRecord> {
      const account = await createAccount(store.database, { email: `leads-${Math.random().toString(36).slice(2)}@example.com` });
      await grantCredit(store.database, { accountId: account.id, amount: 10_000_000, source: `test:${account.id}` });
      const verified = await verifyApiKey(store.database, (await createApiKey(store.database, { accountId: account.id })).key);
      assert.ok(verified.ok);
      return verified.key;
    }

    function metering(leases: Partial<LeaseSettings> = {}): Metering {
      const made = new Metering({ database: store.database, nodeId: () => "leading-node", holdTtlMs: 60_000, leases: { ...NO_TIMER, ...leases } });
      meterings.push(made);
      return made;
    }

    const checkpointOf = async (requestId: string) =>
      (await store.database.selectFrom("usage_checkpoints").select("completion_tokens").where("request_id", "=", requestId).executeTakeFirst())?.completion_tokens;

    it("never lets a stream's client get more than one checkpoint past the last durable one", async () => {
      const node = metering();
      const key = await fundedKey();
      const admission = await node.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 4000, choices: 1, requestId: "leading", stream: true });
      let generated = 0;
      admission.track(() => usage(generated));

      generated = 20;
      assert.equal(admission.beforeDelivery(generated), undefined, "well within one checkpoint: no wait, nothing asked");
      await delay(50);
      assert.equal(await checkpointOf("leading"), undefined);

      generated = 40;
      assert.equal(admission.beforeDelivery(generated), undefined, "half a checkpoint ahead: a checkpoint is asked for, nobody waits");
      for (let waited = 0; waited < 200 && (await checkpointOf("leading")) === undefined; waited++) await delay(25);
      assert.equal(Number(await checkpointOf("leading")), 40, "the commit asked for came without the timer");

      generated = 40 + 65;
      const wait = admission.beforeDelivery(generated);
      assert.ok(wait !== undefined, "more than one checkpoint ahead: the output waits");
      await wait;
      assert.ok(Number(await checkpointOf("leading")) >= 105, "once it may go out, a checkpoint covers it");
      assert.equal(admission.beforeDelivery(generated), undefined);
      await admission.settle({ usage: usage(generated), status: 200, finishReason: "stop", latencyMs: 1 });
    });

    it("answers a leased request's settle at once while the group commit keeps up; its record joins the next one", async () => {
      const node = metering();
      const key = await fundedKey();
      const admissions = await Promise.all(
        [0, 1, 2].map((index) => node.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 100, choices: 1, requestId: `ending_${index}`, stream: true })),
      );
      for (const [index, admission] of admissions.entries()) await admission.settle({ usage: usage(5 + index), status: 200, finishReason: "stop", latencyMs: 1 });
      const recordOf = (index: number) => store.database.selectFrom("usage_records").select(["completion_tokens", "hold_id"]).where("request_id", "=", `ending_${index}`).executeTakeFirst();
      // The timer is a minute away here: nobody waited, so nothing was written yet.
      assert.equal(await recordOf(0), undefined, "the client was not kept waiting for a commit");
      await node.leases.flush();
      for (const index of [0, 1, 2]) {
        const record = await recordOf(index);
        assert.ok(record !== undefined, `request ${index}'s record is in the next group commit`);
        assert.equal(Number(record.completion_tokens), 5 + index);
        assert.notEqual(record.hold_id, null, "it was served from a lease");
      }
    });

    if (backend === "postgres") {
      it("while the group commit is late, resolves a leased request's settle only once its record is written", async () => {
        const node = metering({ shedAfterMs: 60_000 });
        const key = await fundedKey();
        const running = await node.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 4000, choices: 1, requestId: "stuck-stream", stream: true });
        let generated = 0;
        running.track(() => usage(generated));
        const ending = await node.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 100, choices: 1, requestId: "late-ending", stream: true });
        const locker = new pg.Client({ connectionString: store.databaseUrl });
        await locker.connect();
        try {
          await locker.query("BEGIN");
          await locker.query("LOCK TABLE usage_checkpoints IN SHARE MODE");
          // A stream asks for a checkpoint: its group commit starts and stays stuck on the lock.
          generated = 100;
          const wait = running.beforeDelivery(generated);
          assert.ok(wait !== undefined);
          for (let waited = 0; waited < 400 && !node.leases.late; waited++) await delay(10);
          assert.equal(node.leases.late, true, "the group commit in flight counts as late");
          let settled = false;
          const settling = ending.settle({ usage: usage(7), status: 200, finishReason: "stop", latencyMs: 1 }).then(() => (settled = true));
          await delay(300);
          assert.equal(settled, false, "the client does not hear the end while its record cannot be written");
          await locker.query("ROLLBACK");
          await settling;
          const record = await store.database.selectFrom("usage_records").select("completion_tokens").where("request_id", "=", "late-ending").executeTakeFirst();
          assert.equal(Number(record?.completion_tokens), 7, "written when its settle resolved");
          await wait;
        } finally {
          await locker.end();
        }
        await running.settle({ usage: usage(generated), status: 200, finishReason: "stop", latencyMs: 1 });
      });

      it("refuses new requests with 503 metering_behind while a commit keeps someone waiting, and serves again once it is written", async () => {
        const node = metering({ shedAfterMs: 300 });
        const key = await fundedKey();
        const admit = (requestId: string) => node.admit({ key, plan: null, model, promptTokens: 10, maxTokens: 100, choices: 1, requestId, stream: true });
        const running = await admit("held-back");
        let generated = 0;
        running.track(() => usage(generated));
        // The writer falls behind: a lock (as contention would) keeps its commit from finishing.
        const locker = new pg.Client({ connectionString: store.databaseUrl });
        await locker.connect();
        try {
          await locker.query("BEGIN");
          await locker.query("LOCK TABLE usage_checkpoints IN SHARE MODE");
          generated = 100;
          const wait = running.beforeDelivery(generated);
          assert.ok(wait !== undefined);
          let refused: unknown;
          // Probes admitted before the writer counts as behind end once it catches up (their settle waits for the commit).
          const probes: Promise<unknown>[] = [];
          for (let attempt = 0; attempt < 100 && refused === undefined; attempt++) {
            await delay(50);
            await admit(`probe_${attempt}`).then(
              (admission) => void probes.push(admission.settle({ usage: null, status: 499, finishReason: null, latencyMs: 1 })),
              (error: unknown) => (refused = error),
            );
          }
          assert.ok(refused instanceof MeteringBehindError, `refused with metering_behind: ${String(refused)}`);
          assert.equal(refused.status, 503);
          assert.equal(refused.headers["retry-after"], "1");
          await locker.query("ROLLBACK");
          await wait;
          await Promise.all(probes);
          assert.equal(Number(await checkpointOf("held-back")), 100);
          const again = await admit("served-again");
          await again.settle({ usage: usage(3), status: 200, finishReason: "stop", latencyMs: 1 });
        } finally {
          await locker.end();
        }
        await running.settle({ usage: usage(generated), status: 200, finishReason: "stop", latencyMs: 1 });
      });
    }
  });
}
