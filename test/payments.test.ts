/**
 * Stripe end to end on a real server: a signed webhook grants a recorded checkout session once
 * however often, and by however many events, it is delivered; a payment that does not match
 * what was recorded, or names a session or account Turnpike does not know, is acknowledged and
 * logged, never granted nor a 500; forged or stale deliveries grant nothing. Payloads are signed
 * with the stripe library's own test helper. Sessions are recorded as `POST /api/billing/checkout`
 * records them; the checkout route itself calls a local fake of Stripe's API here (and in
 * src/http/routes/stripe/route.test.ts). Every answer, the checkout's and the webhook's, errors
 * included, is checked against `/openapi.json` as openapi-responses.test.ts checks the others.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import Stripe from "stripe";
import { createAccount } from "../src/accounts/accounts.ts";
import { createApiKey } from "../src/auth/api-keys.ts";
import { checkLedger } from "../src/billing/ledger.ts";
import { planSchema } from "../src/protocol/plans.ts";
import { recordCheckoutSession } from "../src/billing/stripe/purchases.ts";
import { startFakeStripeApi, type FakeStripeApi } from "../src/billing/stripe/fake-stripe-api.ts";
import { openStore } from "../src/store/open.ts";
import { assertConforms } from "./helpers/openapi.ts";
import { postJson, startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

const secret = "whsec_test_turnpike_0123456789";
const pro = { id: "pro", name: "Pro", price: { amount: 2000, currency: "usd" }, credit: 50000, days: 30 };
let test: TestServer;
let accountId: string;
let accountKey: string;
let stripeApi: FakeStripeApi;
/** The server's `/openapi.json`. */
let document: Record<string, any>;

before(async () => {
  stripeApi = await startFakeStripeApi();
  const configDir = temporaryDirectory();
  const configFile = path.join(configDir, "turnpike.json");
  fs.writeFileSync(configFile, JSON.stringify({ plans: [pro] }));
  test = await startTestServer({
    flags: { models: [storiesModel] },
    configFile,
    env: { STRIPE_SECRET_KEY: "sk_test_turnpike_not_a_real_key", STRIPE_WEBHOOK_SECRET: secret },
    stripeApi: { apiHost: "127.0.0.1", apiPort: stripeApi.port, apiProtocol: "http" },
  });
  document = (await (await fetch(`${test.url}/openapi.json`)).json()) as Record<string, any>;
  const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
  accountId = (await createAccount(database, { email: "buyer@example.com" })).id;
  accountKey = (await createApiKey(database, { accountId })).key;
  await database.destroy();
});
after(async () => {
  await test?.close();
  await stripeApi?.close();
});

function checkoutCompleted(eventId: string, session: { id?: string; accountId?: string; amountTotal?: number; currency?: string } = {}) {
  const buyer = session.accountId ?? accountId;
  return JSON.stringify({
    id: eventId,
    object: "event",
    type: "checkout.session.completed",
    created: Math.floor(Date.now() / 1000),
    data: {
      object: {
        id: session.id ?? `cs_test_${eventId}`,
        object: "checkout.session",
        payment_status: "paid",
        client_reference_id: buyer,
        metadata: { account_id: buyer, plan_id: "pro" },
        amount_total: session.amountTotal ?? 2000,
        currency: session.currency ?? "usd",
      },
    },
  });
}

/** Records a session of the `pro` plan as `POST /api/billing/checkout` does once Stripe made it. */
async function recordSession(sessionId: string, buyer = accountId): Promise<void> {
  const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
  try {
    await recordCheckoutSession(database, { sessionId, accountId: buyer, plan: planSchema.parse(pro) });
  } finally {
    await database.destroy();
  }
}

/** Delivers a webhook event; its answer, whatever the status, must be as the document says. */
async function deliver(payload: string, signature: string) {
  const response = await postJson(`${test.url}/api/billing/stripe/webhook`, payload, { "stripe-signature": signature });
  assertConforms(document, "post", "/api/billing/stripe/webhook", response.status, response.body);
  return response;
}

/** Asks for a checkout; its answer, whatever the status, must be as the document says. */
async function checkout(body: unknown, headers: Record<string, string> = {}) {
  const response = await postJson(`${test.url}/api/billing/checkout`, body, headers);
  assertConforms(document, "post", "/api/billing/checkout", response.status, response.body);
  return response;
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
    await recordSession("cs_test_evt_paid_1");
    const payload = checkoutCompleted("evt_paid_1");
    for (let delivery = 0; delivery < 3; delivery++) {
      const response = await deliver(payload, stripe.webhooks.generateTestHeaderString({ payload, secret }));
      assert.equal(response.status, 200, response.text);
      assert.equal(response.body.granted, delivery === 0);
    }
    assert.equal(await balance(), 50000);
  });

  it("grants a checkout session once, however many distinct events name it", async () => {
    await recordSession("cs_test_two_events");
    const before = await balance();
    const granted = [];
    for (const eventId of ["evt_session_first", "evt_session_second"]) {
      const payload = checkoutCompleted(eventId, { id: "cs_test_two_events" });
      const response = await deliver(payload, stripe.webhooks.generateTestHeaderString({ payload, secret }));
      assert.equal(response.status, 200, response.text);
      granted.push(response.body.granted);
    }
    assert.deepEqual(granted, [true, false]);
    assert.equal(await balance(), before + 50000);
  });

  it("acknowledges a payment of the wrong amount or currency without granting it, and logs it as an error", async () => {
    await recordSession("cs_test_one_cent");
    await recordSession("cs_test_euros");
    const before = await balance();
    for (const [eventId, session] of [
      ["evt_one_cent", { id: "cs_test_one_cent", amountTotal: 1 }],
      ["evt_euros", { id: "cs_test_euros", currency: "eur" }],
    ] as const) {
      const payload = checkoutCompleted(eventId, session);
      const response = await deliver(payload, stripe.webhooks.generateTestHeaderString({ payload, secret }));
      assert.equal(response.status, 200, response.text);
      assert.equal(response.body.granted, false);
      const logged = test.logs().find((line) => line.event_id === eventId && line.msg === "stripe purchase refused");
      assert.ok(logged !== undefined, `no error logged for ${eventId}`);
      assert.equal(logged.level, 50);
      assert.equal(logged.session_id, session.id);
      assert.equal(logged.reason, "mismatch");
    }
    assert.equal(await balance(), before);
  });

  it("acknowledges an event for an unknown account or session and logs it as an error, without a 500 or a grant", async () => {
    // A session recorded for an account that is gone by the time Stripe says it was paid.
    await recordSession("cs_test_ghost", "acct_nobody");
    const before = await balance();
    for (const [eventId, session, reason] of [
      ["evt_unknown_account", { id: "cs_test_ghost", accountId: "acct_nobody" }, "unknown_account"],
      ["evt_unknown_session", { id: "cs_test_never_started" }, "unknown_session"],
    ] as const) {
      const payload = checkoutCompleted(eventId, session);
      const response = await deliver(payload, stripe.webhooks.generateTestHeaderString({ payload, secret }));
      assert.equal(response.status, 200, response.text);
      assert.equal(response.body.granted, false);
      const logged = test.logs().find((line) => line.event_id === eventId && line.msg === "stripe purchase refused");
      assert.equal(logged?.reason, reason);
      assert.equal(logged?.level, 50);
    }
    assert.equal(await balance(), before);
  });

  it("answers checkout with a clear error when the account key is missing", async () => {
    const response = await checkout({ plan: "pro" });
    assert.equal(response.status, 401);
    const unknown = await checkout({ plan: "nope" }, { authorization: `Bearer ${accountKey}` });
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.error.code, "plan_not_found");
  });

  it("answers checkout with the Checkout session Stripe made, as documented, and Stripe's refusal as a 502", async () => {
    const response = await checkout({ plan: "pro" }, { authorization: `Bearer ${accountKey}` });
    assert.equal(response.status, 200, response.text);
    assert.match(response.body.url, /^https:\/\/checkout\.stripe\.com\//);
    assert.equal(stripeApi.requests.at(-1)?.path, "/v1/checkout/sessions");
    // The account's open session would be handed out again: another account needs a new one.
    const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
    const otherKey = (await createApiKey(database, { accountId: (await createAccount(database, { email: "second-buyer@example.com" })).id })).key;
    await database.destroy();
    stripeApi.failWith({ status: 402, body: { error: { type: "card_error", message: "Your card was declined." } } });
    try {
      const refused = await checkout({ plan: "pro" }, { authorization: `Bearer ${otherKey}` });
      assert.equal(refused.status, 502, refused.text);
      assert.equal(refused.body.error.code, "payment_provider_error");
    } finally {
      stripeApi.failWith(null);
    }
  });
});
