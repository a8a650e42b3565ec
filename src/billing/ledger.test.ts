/**
 * The ledger on both stores: real SQLite and this machine's real PostgreSQL.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createAccount } from "../accounts/accounts.ts";
import { createApiKey } from "../auth/api-keys.ts";
import { InsufficientQuotaError } from "../protocol/errors.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../test/helpers/databases.ts";
import { BalanceLimitExceededError, PlanOutOfBoundsError } from "./errors.ts";
import { checkLedger, expireDueCredit, grantCredit, placeHold, releaseHold, settleHold, sweepHolds } from "./ledger.ts";
import { MAX_CREDIT, MAX_PLAN_DAYS } from "../protocol/money-bounds.ts";

const DAY = 24 * 60 * 60 * 1000;

for (const backend of backends) {
  describe(`ledger (${backend})`, () => {
    let store: TestDatabase;
    before(async () => {
      store = await openTestDatabase(backend);
    });
    after(async () => {
      await store?.close();
    });

    async function account(email: string) {
      return createAccount(store.database, { email: `${email}-${Math.random().toString(36).slice(2)}@example.com` });
    }

    async function assertConsistent(accountId: string) {
      const check = await checkLedger(store.database, accountId);
      assert.equal(check.balance, check.sumOfEntries, "balance = sum of entries");
      assert.equal(check.lotsRemaining, check.balance + check.heldActive, "lots = balance + active holds");
      assert.ok(check.balance >= 0);
      return check;
    }

    it("grants credit once per source", async () => {
      const owner = await account("grant");
      assert.deepEqual((await grantCredit(store.database, { accountId: owner.id, amount: 1000, source: "stripe:evt_1" })).granted, true);
      assert.deepEqual((await grantCredit(store.database, { accountId: owner.id, amount: 1000, source: "stripe:evt_1" })).granted, false);
      const check = await assertConsistent(owner.id);
      assert.equal(check.balance, 1000);
    });

    it("holds the worst case, settles the exact cost and releases the rest", async () => {
      const owner = await account("settle");
      await grantCredit(store.database, { accountId: owner.id, amount: 500, source: `admin:${owner.id}` });
      const hold = await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 200, nodeId: "n1", ttlMs: 60_000 });
      assert.equal((await assertConsistent(owner.id)).balance, 300, "the hold is not spendable");
      assert.equal(await settleHold(store.database, hold, 37), 37);
      const check = await assertConsistent(owner.id);
      assert.equal(check.balance, 463);
      assert.equal(check.activeHolds, 0);
      assert.equal(await settleHold(store.database, hold, 37), 0, "settling twice charges once");
      assert.equal((await assertConsistent(owner.id)).balance, 463);
    });

    it("refuses a hold the balance does not cover, before anything is reserved", async () => {
      const owner = await account("refuse");
      await grantCredit(store.database, { accountId: owner.id, amount: 100, source: `admin:${owner.id}` });
      await assert.rejects(
        placeHold(store.database, { accountId: owner.id, keyId: null, amount: 101, nodeId: "n1", ttlMs: 60_000 }),
        InsufficientQuotaError,
      );
      const check = await assertConsistent(owner.id);
      assert.equal(check.balance, 100);
      assert.equal(check.activeHolds, 0);
    });

    it("never overspends under concurrent holds", async () => {
      const owner = await account("race");
      await grantCredit(store.database, { accountId: owner.id, amount: 1000, source: `admin:${owner.id}` });
      const attempts = await Promise.allSettled(
        Array.from({ length: 60 }, () => placeHold(store.database, { accountId: owner.id, keyId: null, amount: 100, nodeId: "n1", ttlMs: 60_000 })),
      );
      const admitted = attempts.filter((attempt) => attempt.status === "fulfilled");
      assert.equal(admitted.length, 10);
      for (const attempt of attempts) {
        if (attempt.status === "rejected") assert.ok(attempt.reason instanceof InsufficientQuotaError, String(attempt.reason));
      }
      assert.equal((await assertConsistent(owner.id)).balance, 0);
      await Promise.all(admitted.map((attempt) => settleHold(store.database, (attempt as PromiseFulfilledResult<string>).value, 60)));
      const check = await assertConsistent(owner.id);
      assert.equal(check.balance, 400);
    });

    it("releases a failed request's hold without charging", async () => {
      const owner = await account("release");
      await grantCredit(store.database, { accountId: owner.id, amount: 50, source: `admin:${owner.id}` });
      const hold = await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 50, nodeId: "n1", ttlMs: 60_000 });
      await releaseHold(store.database, hold);
      assert.equal((await assertConsistent(owner.id)).balance, 50);
    });

    it("caps a key's spending with its own spend cap", async () => {
      const owner = await account("cap");
      await grantCredit(store.database, { accountId: owner.id, amount: 1000, source: `admin:${owner.id}` });
      const key = await createApiKey(store.database, { accountId: owner.id, spendCap: 150 });
      const first = await placeHold(store.database, { accountId: owner.id, keyId: key.id, amount: 100, nodeId: "n1", ttlMs: 60_000 });
      await assert.rejects(placeHold(store.database, { accountId: owner.id, keyId: key.id, amount: 100, nodeId: "n1", ttlMs: 60_000 }), /spend cap/);
      await settleHold(store.database, first, 40);
      const second = await placeHold(store.database, { accountId: owner.id, keyId: key.id, amount: 100, nodeId: "n1", ttlMs: 60_000 });
      await settleHold(store.database, second, 100);
      await assert.rejects(placeHold(store.database, { accountId: owner.id, keyId: key.id, amount: 20, nodeId: "n1", ttlMs: 60_000 }), InsufficientQuotaError);
      const row = await store.database.selectFrom("api_keys").select(["spent", "reserved"]).where("id", "=", key.id).executeTakeFirstOrThrow();
      assert.deepEqual({ spent: Number(row.spent), reserved: Number(row.reserved) }, { spent: 140, reserved: 0 });
      assert.equal((await assertConsistent(owner.id)).balance, 860);
    });

    it("makes expired credit unspendable and spends soonest-expiring credit first", async () => {
      const owner = await account("expiry");
      const start = Date.now();
      await grantCredit(store.database, { accountId: owner.id, amount: 300, source: `short:${owner.id}`, days: 1, now: start });
      await grantCredit(store.database, { accountId: owner.id, amount: 100, source: `long:${owner.id}`, days: 30, now: start });
      const hold = await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 250, nodeId: "n1", ttlMs: 60_000, now: start });
      await settleHold(store.database, hold, 250, start);
      assert.equal((await assertConsistent(owner.id)).balance, 150);
      // Two days later the short lot's last 50 expire; the long lot's 100 stay.
      await expireDueCredit(store.database, owner.id, start + 2 * DAY);
      assert.equal((await assertConsistent(owner.id)).balance, 100);
      await assert.rejects(
        placeHold(store.database, { accountId: owner.id, keyId: null, amount: 101, nodeId: "n1", ttlMs: 60_000, now: start + 2 * DAY }),
        InsufficientQuotaError,
      );
      // A month on, nothing is spendable.
      await assert.rejects(
        placeHold(store.database, { accountId: owner.id, keyId: null, amount: 1, nodeId: "n1", ttlMs: 60_000, now: start + 31 * DAY }),
        InsufficientQuotaError,
      );
      assert.equal((await assertConsistent(owner.id)).balance, 0);
    });

    it("applies due expiries before a hold, then holds against what is left", async () => {
      const owner = await account("expiry-due");
      const start = Date.now();
      await grantCredit(store.database, { accountId: owner.id, amount: 100, source: `short:${owner.id}`, days: 1, now: start });
      await grantCredit(store.database, { accountId: owner.id, amount: 80, source: `long:${owner.id}`, days: 30, now: start });
      // Two days later nobody applied the expiry yet: the hold applies it first.
      const later = start + 2 * DAY;
      const hold = await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 50, nodeId: "n1", ttlMs: 60_000, now: later });
      assert.equal((await assertConsistent(owner.id)).balance, 30);
      const expiries = await store.database.selectFrom("ledger_entries").select("amount").where("account_id", "=", owner.id).where("kind", "=", "expiry").execute();
      assert.deepEqual(expiries.map((entry) => Number(entry.amount)), [-100]);
      await settleHold(store.database, hold, 20, later);
      assert.equal((await assertConsistent(owner.id)).balance, 60);
      // More than the unexpired credit is refused, and the refusal leaves the books as they were.
      await assert.rejects(placeHold(store.database, { accountId: owner.id, keyId: null, amount: 61, nodeId: "n1", ttlMs: 60_000, now: later }), InsufficientQuotaError);
      assert.equal((await assertConsistent(owner.id)).balance, 60);
    });

    it("charges a cost across several lots, soonest-expiring first, lots without expiry last", async () => {
      const owner = await account("lots");
      const start = Date.now();
      await grantCredit(store.database, { accountId: owner.id, amount: 100, source: `never:${owner.id}`, now: start });
      await grantCredit(store.database, { accountId: owner.id, amount: 100, source: `month:${owner.id}`, days: 30, now: start });
      await grantCredit(store.database, { accountId: owner.id, amount: 100, source: `day:${owner.id}`, days: 1, now: start });
      const hold = await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 280, nodeId: "n1", ttlMs: 60_000, now: start });
      assert.equal(await settleHold(store.database, hold, 250, start), 250);
      const lots = await store.database.selectFrom("credit_lots").select(["source", "remaining"]).where("account_id", "=", owner.id).execute();
      const remaining = Object.fromEntries(lots.map((lot) => [lot.source.split(":")[0], Number(lot.remaining)]));
      assert.deepEqual(remaining, { day: 0, month: 0, never: 50 });
      assert.equal((await assertConsistent(owner.id)).balance, 50);
    });

    it("gives a key's refused hold back to the account", async () => {
      const owner = await account("cap-refused");
      await grantCredit(store.database, { accountId: owner.id, amount: 500, source: `admin:${owner.id}` });
      const key = await createApiKey(store.database, { accountId: owner.id, spendCap: 50 });
      await assert.rejects(placeHold(store.database, { accountId: owner.id, keyId: key.id, amount: 60, nodeId: "n1", ttlMs: 60_000 }), /spend cap/);
      const check = await assertConsistent(owner.id);
      assert.equal(check.balance, 500);
      assert.equal(check.activeHolds, 0);
    });

    it("writes a settlement's usage record once: a repeated settlement (a retry whose first commit went through) writes nothing", async () => {
      const owner = await account("retry");
      await grantCredit(store.database, { accountId: owner.id, amount: 100, source: `admin:${owner.id}` });
      const usage = (requestId: string) => (charged: number) => ({
        request_id: requestId,
        account_id: owner.id,
        key_id: null,
        model: "m",
        prompt_tokens: 1,
        cached_prompt_tokens: 0,
        completion_tokens: 2,
        cost: charged,
        latency_ms: 1,
        status: 200,
        finish_reason: "stop",
        stream: 0,
        created_at: Date.now(),
      });
      const recorded = async () =>
        (await store.database.selectFrom("usage_records").select(["request_id", "cost"]).where("account_id", "=", owner.id).orderBy("request_id").execute()).map(
          (row) => `${row.request_id}:${Number(row.cost)}`,
        );
      const hold = await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 40, nodeId: "n1", ttlMs: 60_000 });
      assert.equal(await settleHold(store.database, hold, 12, Date.now(), usage("a")), 12);
      assert.equal(await settleHold(store.database, hold, 12, Date.now(), usage("a")), 0);
      assert.deepEqual(await recorded(), ["a:12"]);
      // A swept hold: its late settlement charges and records once, even when nothing is owed.
      const now = Date.now();
      const swept = await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 10, nodeId: "gone", ttlMs: 600_000, now });
      const sweptFree = await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 10, nodeId: "gone", ttlMs: 600_000, now });
      assert.equal(await sweepHolds(store.database, { now: now + 1000, deadNodes: ["gone"] }), 2);
      for (let attempt = 0; attempt < 2; attempt++) {
        await settleHold(store.database, swept, 7, Date.now(), usage("b"));
        await settleHold(store.database, sweptFree, 0, Date.now(), usage("c"));
      }
      assert.deepEqual(await recorded(), ["a:12", "b:7", "c:0"]);
      assert.equal((await assertConsistent(owner.id)).balance, 100 - 12 - 7);
    });

    it("sweeps holds past their expiry and holds of dead nodes", async () => {
      const owner = await account("sweep");
      await grantCredit(store.database, { accountId: owner.id, amount: 100, source: `admin:${owner.id}` });
      const now = Date.now();
      await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 10, nodeId: "alive", ttlMs: 1000, now });
      await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 20, nodeId: "dead", ttlMs: 600_000, now });
      const kept = await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 30, nodeId: "alive", ttlMs: 600_000, now });
      assert.equal(await sweepHolds(store.database, { now: now + 5000, deadNodes: ["dead"] }), 2);
      const check = await assertConsistent(owner.id);
      assert.equal(check.activeHolds, 1);
      assert.equal(check.balance, 70);
      await settleHold(store.database, kept, 30);
      assert.equal((await assertConsistent(owner.id)).balance, 70);
      // The "dead" node was alive after all and settles its request: the tokens are charged
      // once, as far as the balance covers; settling again charges nothing.
      const swept = await store.database.selectFrom("holds").select("id").where("account_id", "=", owner.id).where("node_id", "=", "dead").executeTakeFirstOrThrow();
      assert.equal(await settleHold(store.database, swept.id, 15), 15);
      assert.equal((await assertConsistent(owner.id)).balance, 55);
      assert.equal(await settleHold(store.database, swept.id, 15), 0);
      assert.equal((await assertConsistent(owner.id)).balance, 55);
      // A hold released because its request failed is never charged later.
      const failed = await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 5, nodeId: "alive", ttlMs: 600_000, now });
      await releaseHold(store.database, failed);
      assert.equal(await settleHold(store.database, failed, 5), 0);
      assert.equal((await assertConsistent(owner.id)).balance, 55);
      // More than the balance left: charged as far as it covers, never below zero.
      const late = await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 50, nodeId: "dead", ttlMs: 600_000, now });
      assert.equal(await sweepHolds(store.database, { now: now + 5000, deadNodes: ["dead"] }), 1);
      await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 40, nodeId: "alive", ttlMs: 600_000, now });
      assert.equal(await settleHold(store.database, late, 50), 15);
      const last = await assertConsistent(owner.id);
      assert.equal(last.balance, 0);
    });
    it("refuses a grant that would take the balance past MAX_CREDIT, granting nothing, and reads the maximum back exactly", async () => {
      const owner = await account("ceiling");
      assert.equal((await grantCredit(store.database, { accountId: owner.id, amount: MAX_CREDIT, source: `max:${owner.id}` })).granted, true);
      await assert.rejects(grantCredit(store.database, { accountId: owner.id, amount: 1, source: `one:${owner.id}` }), BalanceLimitExceededError);
      // The refused grant left no lot behind: its source may be granted later, once it fits.
      const lots = await store.database.selectFrom("credit_lots").select("source").where("account_id", "=", owner.id).execute();
      assert.deepEqual(lots.map((lot) => lot.source), [`max:${owner.id}`]);
      const check = await assertConsistent(owner.id);
      assert.equal(check.balance, MAX_CREDIT);
      const hold = await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 10, nodeId: "n1", ttlMs: 60_000 });
      await settleHold(store.database, hold, 10);
      assert.equal((await grantCredit(store.database, { accountId: owner.id, amount: 1, source: `one:${owner.id}` })).granted, true);
      assert.equal((await assertConsistent(owner.id)).balance, MAX_CREDIT - 9);
    });

    it("counts what running requests hold against the maximum", async () => {
      const owner = await account("held-ceiling");
      await grantCredit(store.database, { accountId: owner.id, amount: MAX_CREDIT, source: `max:${owner.id}` });
      const hold = await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 1000, nodeId: "n1", ttlMs: 60_000 });
      // The balance is MAX_CREDIT - 1000, but releasing the hold would give the 1000 back.
      await assert.rejects(grantCredit(store.database, { accountId: owner.id, amount: 1000, source: `more:${owner.id}` }), BalanceLimitExceededError);
      await releaseHold(store.database, hold);
      const check = await assertConsistent(owner.id);
      assert.equal(check.balance, MAX_CREDIT);
    });

    it("grants concurrently only as much as fits under the maximum", async () => {
      const owner = await account("ceiling-race");
      const quarter = MAX_CREDIT / 4;
      const outcomes = await Promise.allSettled(
        Array.from({ length: 8 }, (_, index) => grantCredit(store.database, { accountId: owner.id, amount: quarter, source: `race:${owner.id}:${index}` })),
      );
      assert.equal(outcomes.filter((outcome) => outcome.status === "fulfilled").length, 4);
      for (const outcome of outcomes) if (outcome.status === "rejected") assert.ok(outcome.reason instanceof BalanceLimitExceededError, String(outcome.reason));
      const check = await assertConsistent(owner.id);
      assert.equal(check.balance, MAX_CREDIT);
    });

    it("refuses a single grant above MAX_CREDIT or lasting more than MAX_PLAN_DAYS", async () => {
      const owner = await account("oversized");
      await assert.rejects(grantCredit(store.database, { accountId: owner.id, amount: MAX_CREDIT + 1, source: `big:${owner.id}` }), BalanceLimitExceededError);
      await assert.rejects(grantCredit(store.database, { accountId: owner.id, amount: 9007199254740991, source: `huge:${owner.id}` }), BalanceLimitExceededError);
      await assert.rejects(grantCredit(store.database, { accountId: owner.id, amount: 10, source: `long:${owner.id}`, days: MAX_PLAN_DAYS + 1 }), PlanOutOfBoundsError);
      assert.equal((await assertConsistent(owner.id)).balance, 0);
    });
  });
}
