/**
 * Issue 19 row 3: usage reported past what a hold reserved (an upstream counting more prompt
 * tokens than the prompt bound allowed for) is charged, as far as the balance covers, never
 * dropped; the books stay consistent (balance = Σ entries, never below zero) on both stores,
 * whose settlement statements differ.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createAccount } from "../accounts/accounts.ts";
import { createApiKey } from "../auth/api-keys.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../test/helpers/databases.ts";
import { CreditLeases } from "./credit-leases.ts";
import { checkLedger, grantCredit, placeHold, settleHold } from "./ledger.ts";
import type { UsageRecord } from "./usage.ts";

for (const backend of backends) {
  describe(`settling past the hold (${backend})`, () => {
    let store: TestDatabase;
    before(async () => {
      store = await openTestDatabase(backend);
    });
    after(async () => {
      await store?.close();
    });

    async function fundedAccount(amount: number) {
      const owner = await createAccount(store.database, { email: `beyond-${Math.random().toString(36).slice(2)}@example.com` });
      await grantCredit(store.database, { accountId: owner.id, amount, source: `admin:${owner.id}` });
      const key = await createApiKey(store.database, { name: "beyond", accountId: owner.id });
      return { accountId: owner.id, keyId: key.id };
    }

    async function assertConsistent(accountId: string) {
      const check = await checkLedger(store.database, accountId);
      assert.equal(check.balance, check.sumOfEntries, "balance = sum of entries");
      assert.equal(check.lotsRemaining, check.balance + check.heldActive, "lots = balance + active holds");
      assert.ok(check.balance >= 0, "never below zero");
      return check;
    }

    const usage =
      (accountId: string, keyId: string, requestId: string) =>
      (charged: number): UsageRecord => ({
        request_id: requestId,
        account_id: accountId,
        key_id: keyId,
        model: "m",
        prompt_tokens: 500_013,
        cached_prompt_tokens: 0,
        completion_tokens: 3,
        cost: charged,
        latency_ms: 1,
        status: 200,
        finish_reason: "stop",
        stream: 1,
        created_at: Date.now(),
      });

    async function recordedCost(requestId: string): Promise<number> {
      const row = await store.database.selectFrom("usage_records").select("cost").where("request_id", "=", requestId).executeTakeFirstOrThrow();
      return Number(row.cost);
    }

    it("charges the whole cost when it is more than the hold, with the usage record, the key's spend and the hold's cost", async () => {
      const { accountId, keyId } = await fundedAccount(10_000);
      const hold = await placeHold(store.database, { accountId, keyId, amount: 1_100, nodeId: "n1", ttlMs: 60_000 });
      const requestId = `req-${Math.random().toString(36).slice(2)}`;
      assert.equal(await settleHold(store.database, hold, 4_321, Date.now(), usage(accountId, keyId, requestId)), 4_321);
      const check = await assertConsistent(accountId);
      assert.equal(check.balance, 10_000 - 4_321);
      assert.equal(check.activeHolds, 0);
      assert.equal(await recordedCost(requestId), 4_321, "the usage record says the whole charge");
      const key = await store.database.selectFrom("api_keys").select(["spent", "reserved"]).where("id", "=", keyId).executeTakeFirstOrThrow();
      assert.equal(Number(key.spent), 4_321);
      assert.equal(Number(key.reserved), 0);
      const closed = await store.database.selectFrom("holds").select("cost").where("id", "=", hold).executeTakeFirstOrThrow();
      assert.equal(Number(closed.cost), 4_321);
      // A retry of the same settlement (its commit unanswered) charges nothing more.
      assert.equal(await settleHold(store.database, hold, 4_321, Date.now(), usage(accountId, keyId, requestId)), 0);
      assert.equal((await assertConsistent(accountId)).balance, 10_000 - 4_321);
    });

    it("charges the difference up to the balance, never below zero", async () => {
      const { accountId, keyId } = await fundedAccount(5_000);
      const hold = await placeHold(store.database, { accountId, keyId, amount: 1_100, nodeId: "n1", ttlMs: 60_000 });
      const requestId = `req-${Math.random().toString(36).slice(2)}`;
      assert.equal(await settleHold(store.database, hold, 500_016, Date.now(), usage(accountId, keyId, requestId)), 5_000);
      const check = await assertConsistent(accountId);
      assert.equal(check.balance, 0);
      assert.equal(await recordedCost(requestId), 5_000);
      const entries = await store.database.selectFrom("ledger_entries").select(["kind", "amount"]).where("hold_id", "=", hold).execute();
      assert.equal(entries.filter((entry) => entry.kind === "settle").reduce((sum, entry) => sum + Number(entry.amount), 0), -5_000);
    });

    it("charges a busy key's request past its share of a lease when the lease closes, up to the balance", async () => {
      const { accountId, keyId } = await fundedAccount(3_000);
      const leases = new CreditLeases({ database: store.database, nodeId: () => "n1", holdTtlMs: 60_000 });
      try {
        const ticket = await leases.reserve({ accountId, keyId, amount: 100, hot: true });
        assert.equal(ticket.own, false, "served from a lease");
        const requestId = `req-${Math.random().toString(36).slice(2)}`;
        const record = { ...usage(accountId, keyId, requestId)(0), id: ticket.usageId, hold_id: ticket.holdId, cost: 2_500 };
        leases.finishShared(ticket, record);
        await leases.drain();
        const check = await assertConsistent(accountId);
        assert.equal(check.activeHolds, 0);
        assert.equal(check.balance, 500, "the lease's close charged the whole 2,500");
        assert.equal(await recordedCost(requestId), 2_500);
      } finally {
        leases.abandon();
      }
    });

    it("still charges at most the cost when it fits in the hold", async () => {
      const { accountId, keyId } = await fundedAccount(1_000);
      const hold = await placeHold(store.database, { accountId, keyId, amount: 300, nodeId: "n1", ttlMs: 60_000 });
      assert.equal(await settleHold(store.database, hold, 120), 120);
      assert.equal((await assertConsistent(accountId)).balance, 880);
    });
  });
}
