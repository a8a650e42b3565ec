/**
 * Refunds and disputes on both stores (real SQLite and this machine's real PostgreSQL): the
 * purchase's unspent credit is taken back in proportion to the money, once per refund event or
 * dispute, never below zero, and the books hold (balance = Σ entries = Σ lots) after each.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createAccount } from "../../accounts/accounts.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../../test/helpers/databases.ts";
import { checkLedger, grantCredit, placeHold, settleHold } from "../ledger.ts";
import type { Plan } from "../../protocol/plans.ts";
import { grantCheckoutPurchase, recordCheckoutSession } from "./purchases.ts";
import { reverseCheckoutPurchase } from "./reversals.ts";
import type { StripeReversal } from "./webhook.ts";

const pro: Plan = { id: "pro", name: "Pro", price: { amount: 500, currency: "usd" }, credit: 1000, days: 30, rpm: null, tpm: null, models: null, weight: 1, service_tiers: { default: 1 } };
const DAY_MS = 24 * 60 * 60 * 1000;

for (const backend of backends) {
  describe(`stripe refunds and disputes (${backend})`, () => {
    let store: TestDatabase;
    before(async () => {
      store = await openTestDatabase(backend);
    });
    after(async () => {
      await store?.close();
    });

    /** A fresh account that bought `pro` (credit 1000 for 500), paid by a payment intent of its own. */
    async function bought(name: string, now = Date.now()): Promise<{ accountId: string; paymentIntent: string; sessionId: string }> {
      const unique = `${name}_${Math.random().toString(36).slice(2)}`;
      const accountId = (await createAccount(store.database, { email: `${unique}@example.com` })).id;
      const sessionId = `cs_test_${unique}`;
      const paymentIntent = `pi_${unique}`;
      await recordCheckoutSession(store.database, { sessionId, accountId, plan: pro, now });
      const outcome = await grantCheckoutPurchase(
        store.database,
        { eventId: `evt_paid_${unique}`, accountId, planId: "pro", sessionId, amountTotal: 500, currency: "usd", paymentIntentId: paymentIntent },
        now,
      );
      assert.deepEqual(outcome, { granted: true });
      return { accountId, paymentIntent, sessionId };
    }

    const refund = (paymentIntent: string, eventId: string, amountRefunded: number): StripeReversal => ({
      kind: "refund",
      eventId,
      key: `refund:${eventId}`,
      paymentIntentId: paymentIntent,
      chargeId: null,
      amount: amountRefunded,
      chargeAmount: 500,
      currency: "usd",
    });
    const dispute = (paymentIntent: string, eventId: string, disputeId: string, amount = 500): StripeReversal => ({
      kind: "dispute",
      eventId,
      key: `dispute:${disputeId}`,
      paymentIntentId: paymentIntent,
      chargeId: null,
      amount,
      chargeAmount: null,
      currency: "usd",
    });

    /** The balance, after checking that it is the sum of the entries and, with the holds, of the lots. */
    async function balance(accountId: string): Promise<number> {
      const check = await checkLedger(store.database, accountId);
      assert.equal(check.sumOfEntries, check.balance, "balance = Σ ledger entries");
      assert.equal(check.lotsRemaining, check.balance + check.heldActive, "Σ lots = balance + held");
      return check.balance;
    }

    async function spend(accountId: string, amount: number): Promise<void> {
      const holdId = await placeHold(store.database, { accountId, keyId: null, amount, nodeId: "node-test", ttlMs: 60_000 });
      await settleHold(store.database, holdId, amount);
    }

    it("a full refund takes back all the unspent credit, and once however often it is delivered", async () => {
      const { accountId, paymentIntent } = await bought("full");
      const outcome = await reverseCheckoutPurchase(store.database, refund(paymentIntent, "evt_full", 500));
      assert.equal(outcome.result, "reversed");
      assert.deepEqual(outcome.result === "reversed" && [outcome.share, outcome.taken, outcome.spent], [1000, 1000, 0]);
      assert.equal(await balance(accountId), 0);
      assert.equal((await reverseCheckoutPurchase(store.database, refund(paymentIntent, "evt_full", 500))).result, "already_reversed");
      assert.equal(await balance(accountId), 0);
    });

    it("partial refunds take their share (rounded up), each only what its running total adds, in any order", async () => {
      const { accountId, paymentIntent } = await bought("partial");
      // 166 of 500 refunded: ⌈1000 × 166 / 500⌉ = 332.
      await reverseCheckoutPurchase(store.database, refund(paymentIntent, "evt_p1", 166));
      assert.equal(await balance(accountId), 668);
      // The running total reaches 400 (800 credits in all), then an older total arrives late.
      await reverseCheckoutPurchase(store.database, refund(paymentIntent, "evt_p3", 400));
      assert.equal(await balance(accountId), 200);
      const late = await reverseCheckoutPurchase(store.database, refund(paymentIntent, "evt_p2", 250));
      assert.deepEqual(late.result === "reversed" && [late.share, late.taken], [0, 0]);
      assert.equal(await balance(accountId), 200);
      // The rest, and a dispute after it: nothing more than the purchase.
      await reverseCheckoutPurchase(store.database, refund(paymentIntent, "evt_p4", 500));
      const disputed = await reverseCheckoutPurchase(store.database, dispute(paymentIntent, "evt_d", "dp_partial"));
      assert.deepEqual(disputed.result === "reversed" && [disputed.share, disputed.taken], [0, 0]);
      assert.equal(await balance(accountId), 0);
    });

    it("takes only the purchase's unspent credit, never other credit nor below zero, and reports what was spent", async () => {
      const { accountId, paymentIntent } = await bought("spent");
      // Another grant with no expiry is spent last: the purchase's (30 days) is spent first.
      await grantCredit(store.database, { accountId, amount: 5000, source: `admin:${accountId}` });
      await spend(accountId, 700);
      assert.equal(await balance(accountId), 5300);
      const outcome = await reverseCheckoutPurchase(store.database, refund(paymentIntent, "evt_spent", 500));
      assert.deepEqual(outcome.result === "reversed" && [outcome.share, outcome.taken, outcome.spent], [1000, 300, 700]);
      assert.equal(await balance(accountId), 5000, "the other grant is untouched");
      const entry = await store.database.selectFrom("ledger_entries").select(["kind", "amount"]).where("account_id", "=", accountId).where("kind", "=", "refund").execute();
      assert.deepEqual(entry.map((row) => [row.kind, Number(row.amount)]), [["refund", -300]]);
    });

    it("leaves credit a running request reserves to that request (counted as spent)", async () => {
      const { accountId, paymentIntent } = await bought("held");
      const holdId = await placeHold(store.database, { accountId, keyId: null, amount: 600, nodeId: "node-test", ttlMs: 60_000 });
      const outcome = await reverseCheckoutPurchase(store.database, refund(paymentIntent, "evt_held", 500));
      assert.deepEqual(outcome.result === "reversed" && [outcome.taken, outcome.spent], [400, 600]);
      assert.equal(await balance(accountId), 0);
      // The request settles as usual; the books still hold.
      await settleHold(store.database, holdId, 600);
      assert.equal(await balance(accountId), 0);
    });

    it("expired credit is not taken twice: the expiry comes first", async () => {
      const longAgo = Date.now() - 40 * DAY_MS;
      const { accountId, paymentIntent } = await bought("expired", longAgo);
      const outcome = await reverseCheckoutPurchase(store.database, refund(paymentIntent, "evt_expired", 500));
      assert.deepEqual(outcome.result === "reversed" && [outcome.taken, outcome.spent], [0, 1000]);
      assert.equal(await balance(accountId), 0);
    });

    it("a dispute counts once, by its id, whichever of its events comes first; deliveries at once take nothing twice", async () => {
      const { accountId, paymentIntent } = await bought("dispute");
      const outcomes = await Promise.all([
        reverseCheckoutPurchase(store.database, dispute(paymentIntent, "evt_opened", "dp_once")),
        reverseCheckoutPurchase(store.database, dispute(paymentIntent, "evt_opened", "dp_once")),
        reverseCheckoutPurchase(store.database, dispute(paymentIntent, "evt_lost", "dp_once")),
        reverseCheckoutPurchase(store.database, refund(paymentIntent, "evt_refund_too", 500)),
      ]);
      assert.equal(outcomes.filter((outcome) => outcome.result === "reversed" && outcome.share > 0).length, 1, JSON.stringify(outcomes));
      assert.equal(await balance(accountId), 0);
      const reversals = await store.database.selectFrom("checkout_reversals").select(["share", "taken"]).where("account_id", "=", accountId).execute();
      assert.equal(reversals.reduce((sum, row) => sum + Number(row.share), 0), 1000, "the purchase is accounted for once");
    });

    it("acknowledges payments it cannot link to a granted purchase without taking anything", async () => {
      assert.equal((await reverseCheckoutPurchase(store.database, refund("pi_unknown", "evt_unknown", 500))).result, "unknown_payment");
      assert.equal((await reverseCheckoutPurchase(store.database, { ...refund("pi_x", "evt_null", 500), paymentIntentId: null })).result, "unknown_payment");
      // A session paid but refused (the amount did not match) granted nothing, so takes nothing back.
      const accountId = (await createAccount(store.database, { email: `refused-${Math.random().toString(36).slice(2)}@example.com` })).id;
      await recordCheckoutSession(store.database, { sessionId: "cs_test_refused_rev", accountId, plan: pro });
      await grantCheckoutPurchase(store.database, { eventId: "evt_cheap", accountId, planId: "pro", sessionId: "cs_test_refused_rev", amountTotal: 1, currency: "usd", paymentIntentId: "pi_refused" });
      assert.equal((await reverseCheckoutPurchase(store.database, refund("pi_refused", "evt_refused", 1))).result, "not_granted");
      assert.equal(await balance(accountId), 0);
    });
  });
}
