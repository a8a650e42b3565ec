/**
 * Stripe end to end on a real server: a signed webhook grants the plan once however often it
 * is delivered; forged or stale deliveries grant nothing. Payloads are signed with the stripe
 * library's own test helper.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import Stripe from "stripe";
import { createAccount } from "../src/accounts/accounts.ts";
import { createApiKey } from "../src/auth/api-keys.ts";
import { checkLedger } from "../src/billing/ledger.ts";
import { openStore } from "../src/store/open.ts";
import { postJson, startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

const secret = "whsec_test_turnpike_0123456789";
let test: TestServer;
let accountId: string;
let accountKey: string;

before(async () => {
  process.env.STRIPE_SECRET_KEY = "sk_test_turnpike_not_a_real_key";
  process.env.STRIPE_WEBHOOK_SECRET = secret;
  const configDir = temporaryDirectory();
  const configFile = path.join(configDir, "turnpike.json");
  fs.writeFileSync(configFile, JSON.stringify({ plans: [{ id: "pro", name: "Pro", price: { amount: 2000, currency: "usd" }, credit: 50000, days: 30 }] }));
  test = await startTestServer({ flags: { models: [storiesModel] }, configFile });
  const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
  accountId = (await createAccount(database, { email: "buyer@example.com" })).id;
  accountKey = (await createApiKey(database, { accountId })).key;
  await database.destroy();
});
after(async () => {
  delete process.env.STRIPE_SECRET_KEY;
  delete process.env.STRIPE_WEBHOOK_SECRET;
  await test?.close();
});

function checkoutCompleted(eventId: string) {
  return JSON.stringify({
    id: eventId,
    object: "event",
    type: "checkout.session.completed",
    created: Math.floor(Date.now() / 1000),
    data: {
      object: {
        id: `cs_test_${eventId}`,
        object: "checkout.session",
        payment_status: "paid",
        client_reference_id: accountId,
        metadata: { account_id: accountId, plan_id: "pro" },
        amount_total: 2000,
        currency: "usd",
      },
    },
  });
}

async function deliver(payload: string, signature: string) {
  return postJson(`${test.url}/api/billing/stripe/webhook`, payload, { "stripe-signature": signature });
}

async function balance(): Promise<number> {
  const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
  try {
    const check = await checkLedger(database, accountId);
    assert.equal(check.balance, check.sumOfEntries);
    return check.balance;
  } finally {
    await database.destroy();
  }
}

describe("Stripe payments", () => {
  const stripe = new Stripe("sk_test_turnpike_not_a_real_key");

  it("refuses a forged signature and grants nothing", async () => {
    const payload = checkoutCompleted("evt_forged");
    const response = await deliver(payload, stripe.webhooks.generateTestHeaderString({ payload, secret: "whsec_wrong" }));
    assert.equal(response.status, 400);
    assert.equal(response.body.error.code, "invalid_signature");
    assert.ok(!response.text.includes(secret));
    assert.equal(await balance(), 0);
  });

  it("refuses a stale signature", async () => {
    const payload = checkoutCompleted("evt_stale");
    const response = await deliver(payload, stripe.webhooks.generateTestHeaderString({ payload, secret, timestamp: Math.floor(Date.now() / 1000) - 3600 }));
    assert.equal(response.status, 400);
    assert.equal(await balance(), 0);
  });

  it("grants the plan once, however often Stripe retries the event", async () => {
    const payload = checkoutCompleted("evt_paid_1");
    for (let delivery = 0; delivery < 3; delivery++) {
      const response = await deliver(payload, stripe.webhooks.generateTestHeaderString({ payload, secret }));
      assert.equal(response.status, 200, response.text);
      assert.equal(response.body.granted, delivery === 0);
    }
    assert.equal(await balance(), 50000);
  });

  it("answers checkout with a clear error when the account key is missing", async () => {
    const response = await postJson(`${test.url}/api/billing/checkout`, { plan: "pro" });
    assert.equal(response.status, 401);
    const unknown = await postJson(`${test.url}/api/billing/checkout`, { plan: "nope" }, { authorization: `Bearer ${accountKey}` });
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.error.code, "plan_not_found");
  });
});
