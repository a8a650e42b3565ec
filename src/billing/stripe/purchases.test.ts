/**
 * Stripe purchases on both stores (real SQLite and this machine's real PostgreSQL): a paid
 * Checkout session is granted once, whatever events name it, and only for what was recorded.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createAccount } from "../../accounts/accounts.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../../test/helpers/databases.ts";
import { checkLedger, grantCredit } from "../ledger.ts";
import { MAX_CREDIT } from "../../protocol/money-bounds.ts";
import type { Plan } from "../../protocol/plans.ts";
import { savePlan } from "../plans-store.ts";
import { grantCheckoutPurchase, recordCheckoutSession } from "./purchases.ts";
import type { StripePurchase } from "./webhook.ts";

const starter: Plan = { id: "starter", name: "Starter", price: { amount: 500, currency: "usd" }, credit: 1000, days: 30, rpm: null, tpm: null, models: null, weight: 1, service_tiers: { default: 1 } };

for (const backend of backends) {
  describe(`stripe purchases (${backend})`, () => {
    let store: TestDatabase;
    before(async () => {
      store = await openTestDatabase(backend);
    });
    after(async () => {
      await store?.close();
    });

    /** A fresh account with a recorded `starter` session; the paid purchase as the webhook reads it. */
    async function startedSession(name: string): Promise<{ accountId: string; paid: (eventId: string, changes?: Partial<StripePurchase>) => StripePurchase }> {
      const accountId = (await createAccount(store.database, { email: `${name}-${Math.random().toString(36).slice(2)}@example.com` })).id;
      const sessionId = `cs_test_${name}_${Math.random().toString(36).slice(2)}`;
      await recordCheckoutSession(store.database, { sessionId, accountId, plan: starter });
      return {
        accountId,
        paid: (eventId, changes = {}) => ({ eventId, accountId, planId: "starter", sessionId, amountTotal: 500, currency: "usd", paymentIntentId: null, ...changes }),
      };
    }

    async function balance(accountId: string): Promise<number> {
      const check = await checkLedger(store.database, accountId);
      assert.equal(check.balance, check.sumOfEntries);
      return check.balance;
    }

    it("grants a paid session once, however many distinct events name it", async () => {
      const { accountId, paid } = await startedSession("once");
      assert.deepEqual(await grantCheckoutPurchase(store.database, paid("evt_1")), { granted: true });
      assert.deepEqual(await grantCheckoutPurchase(store.database, paid("evt_2")), { granted: false, reason: "already_granted" });
      assert.deepEqual(await grantCheckoutPurchase(store.database, paid("evt_1")), { granted: false, reason: "already_granted" });
      assert.equal(await balance(accountId), 1000);
    });

    it("grants a session once when its events race", async () => {
      const { accountId, paid } = await startedSession("race");
      const outcomes = await Promise.all(Array.from({ length: 6 }, (_, index) => grantCheckoutPurchase(store.database, paid(`evt_race_${index}`))));
      assert.equal(outcomes.filter((outcome) => outcome.granted).length, 1);
      assert.equal(await balance(accountId), 1000);
    });

    it("grants the credit and days recorded at checkout, not those of the plan as edited since", async () => {
      const { accountId, paid } = await startedSession("recorded");
      // The session's credit and days are the plan's when the buyer saw it: a later edit of the
      // plan neither raises nor cuts what was paid for.
      await savePlan(store.database, { ...starter, credit: 1, days: 1 }, "admin");
      assert.deepEqual(await grantCheckoutPurchase(store.database, paid("evt_recorded")), { granted: true });
      const lot = await store.database.selectFrom("credit_lots").selectAll().where("account_id", "=", accountId).executeTakeFirstOrThrow();
      assert.equal(Number(lot.granted), 1000);
      assert.equal(lot.plan_id, "starter");
      assert.ok(lot.expires_at !== null && Math.abs(Number(lot.expires_at) - (Date.now() + 30 * 86_400_000)) < 60_000);
    });

    it("refuses a payment whose amount, currency, account or plan differs from the recorded session", async () => {
      for (const [changes, detail] of [
        [{ amountTotal: 1 }, /amount_total 1 \(expected 500\)/],
        [{ amountTotal: null }, /amount_total null/],
        [{ currency: "eur" }, /currency eur \(expected usd\)/],
        [{ planId: "pro" }, /plan/],
      ] as const) {
        const { accountId, paid } = await startedSession("mismatch");
        const outcome = await grantCheckoutPurchase(store.database, paid("evt_mismatch", changes));
        assert.equal(outcome.granted, false);
        assert.equal(!outcome.granted && outcome.reason, "mismatch");
        assert.match((!outcome.granted && outcome.detail) || "", detail);
        assert.equal(await balance(accountId), 0);
      }
      const { accountId, paid } = await startedSession("mismatch");
      const other = (await createAccount(store.database, { email: `other-${Math.random().toString(36).slice(2)}@example.com` })).id;
      const outcome = await grantCheckoutPurchase(store.database, paid("evt_other_account", { accountId: other }));
      assert.equal(!outcome.granted && outcome.reason, "mismatch");
      assert.equal(await balance(accountId), 0);
      assert.equal(await balance(other), 0);
    });

    it("refuses a session it never recorded and an account that is gone, without throwing", async () => {
      const { paid } = await startedSession("unknown");
      assert.deepEqual(await grantCheckoutPurchase(store.database, paid("evt_unknown", { sessionId: "cs_test_never" })), { granted: false, reason: "unknown_session" });
      await recordCheckoutSession(store.database, { sessionId: "cs_test_ghost", accountId: "acct_ghost", plan: starter });
      const ghost = { eventId: "evt_ghost", accountId: "acct_ghost", planId: "starter", sessionId: "cs_test_ghost", amountTotal: 500, currency: "usd", paymentIntentId: null };
      assert.deepEqual(await grantCheckoutPurchase(store.database, ghost), { granted: false, reason: "unknown_account" });
    });

    it("refuses a purchase that would take the balance past the maximum, and says so", async () => {
      const { accountId, paid } = await startedSession("full");
      await grantCredit(store.database, { accountId, amount: MAX_CREDIT, source: `admin:${accountId}` });
      const outcome = await grantCheckoutPurchase(store.database, paid("evt_full"));
      assert.equal(!outcome.granted && outcome.reason, "balance_limit_exceeded");
      assert.equal(await balance(accountId), MAX_CREDIT);
    });
  });
}
