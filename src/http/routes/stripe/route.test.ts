import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import Fastify, { type FastifyInstance, type FastifyRequest } from "fastify";
import type Stripe from "stripe";
import { handleError } from "../../errors.ts";
import { InvalidApiKeyError } from "../../../protocol/errors.ts";
import { createAccount } from "../../../accounts/accounts.ts";
import { openTestDatabase, type TestDatabase } from "../../../../test/helpers/databases.ts";
import { checkLedger } from "../../../billing/ledger.ts";
import type { Plan } from "../../../protocol/plans.ts";
import { startFakeStripeApi, type FakeStripeApi } from "../../../billing/stripe/fake-stripe-api.ts";
import { closeCheckoutSession, findOpenCheckoutSession, grantCheckoutPurchase, recordCheckoutSession, type PurchaseOutcome } from "../../../billing/stripe/purchases.ts";
import { reverseCheckoutPurchase } from "../../../billing/stripe/reversals.ts";
import { CHECKOUT_LIMITS, registerStripeRoutes, type StripeRoutesOptions } from "./route.ts";
import { RedisSignInThrottle } from "../../../auth/redis-sign-in-throttle.ts";
import type { SignInThrottle } from "../../../auth/sign-in-throttle.ts";
import { createStripeClient } from "../../../billing/stripe/stripe-client.ts";
import { checkoutEvent, nowSeconds } from "../../../billing/stripe/test-events.ts";
import type { StripePurchase } from "../../../billing/stripe/webhook.ts";

const secretKey = "sk_test_route_secret_key";
const webhookSecret = "whsec_route_test_webhook_secret";
const apiKey = "test-api-key";
const plans: Plan[] = [
  { id: "starter", name: "Starter", price: { amount: 500, currency: "usd" }, credit: 1000, days: null, rpm: null, tpm: null, models: null, weight: 1, service_tiers: { default: 1 } },
  { id: "pro", name: "Pro", price: { amount: 2000, currency: "eur" }, credit: 5000, days: 30, rpm: null, tpm: null, models: null, weight: 1, service_tiers: { default: 1 } },
  { id: "free", name: "Free", price: { amount: 0, currency: "usd" }, credit: 10, days: null, rpm: null, tpm: null, models: null, weight: 1, service_tiers: { default: 1 } },
];

let store: TestDatabase;

/** The real purchases on a real SQLite store, with every call recorded. */
function recordingLedger() {
  const calls: StripePurchase[] = [];
  return {
    calls,
    async grantPurchase(purchase: StripePurchase): Promise<PurchaseOutcome> {
      calls.push(purchase);
      return grantCheckoutPurchase(store.database, purchase);
    },
  };
}

type Harness = { app: FastifyInstance; ledger: ReturnType<typeof recordingLedger> };

const logLines: string[] = [];
const harnesses: Harness[] = [];

async function buildTestApp(settings: {
  stripe: Stripe | null;
  webhookSecret: string | undefined;
  grantPurchase?: (purchase: StripePurchase) => Promise<PurchaseOutcome>;
  checkoutThrottle?: SignInThrottle;
  /** Default: the store's open sessions. */
  findOpenCheckoutSession?: StripeRoutesOptions["findOpenCheckoutSession"];
}): Promise<Harness> {
  const app = Fastify({ logger: { level: "trace", stream: { write: (line: string) => void logLines.push(line) } } });
  app.setErrorHandler(handleError);
  // Another route of the API, outside the webhook's scope: its JSON must still be parsed.
  app.post("/echo", async function echo(request) {
    return { body: request.body };
  });
  const ledger = recordingLedger();
  registerStripeRoutes(app, {
    stripe: settings.stripe,
    webhookSecret: settings.webhookSecret,
    plans: () => plans,
    authenticate: async function authenticate(request: FastifyRequest) {
      if (request.headers.authorization !== `Bearer ${apiKey}`) throw new InvalidApiKeyError();
    },
    accountIdOf: (request) => String(request.headers["x-test-account"] ?? buyer),
    recordCheckoutSession: (session) => recordCheckoutSession(store.database, session),
    findOpenCheckoutSession: settings.findOpenCheckoutSession ?? ((input) => findOpenCheckoutSession(store.database, input)),
    checkoutThrottle: settings.checkoutThrottle,
    grantPurchase: settings.grantPurchase ?? ledger.grantPurchase,
    reversePurchase: (reversal) => reverseCheckoutPurchase(store.database, reversal),
    closeCheckoutSession: (closed) => closeCheckoutSession(store.database, closed),
    publicUrl: "https://ai.example.com/",
  });
  await app.ready();
  const harness = { app, ledger };
  harnesses.push(harness);
  return harness;
}

let api: FakeStripeApi;
let configured: Harness;
let unconfigured: Harness;
/** Account ids in the store. */
let buyer: string;
let other: string;

before(async () => {
  store = await openTestDatabase("sqlite");
  buyer = (await createAccount(store.database, { email: "buyer@example.com" })).id;
  other = (await createAccount(store.database, { email: "other@example.com" })).id;
  api = await startFakeStripeApi();
  const stripe = createStripeClient({ secretKey, apiHost: "127.0.0.1", apiPort: api.port, apiProtocol: "http" });
  configured = await buildTestApp({ stripe, webhookSecret });
  unconfigured = await buildTestApp({ stripe: createStripeClient({}), webhookSecret: undefined });
});

after(async () => {
  for (const harness of harnesses) await harness.app.close();
  await api.close();
  await store?.close();
});

/** A session as checkout records it, for a plan of `plans`. */
async function recordedSession(sessionId: string, planId: string, accountId = buyer): Promise<void> {
  await recordCheckoutSession(store.database, { sessionId, accountId, plan: plans.find((plan) => plan.id === planId) ?? assert.fail(`no plan ${planId}`) });
}

async function balanceOf(accountId: string): Promise<number> {
  const check = await checkLedger(store.database, accountId);
  assert.equal(check.balance, check.sumOfEntries);
  return check.balance;
}

function checkout(app: FastifyInstance, body: unknown, headers: Record<string, string> = { authorization: `Bearer ${apiKey}` }) {
  return app.inject({ method: "POST", url: "/api/billing/checkout", headers, payload: body as Record<string, unknown> });
}

function deliver(app: FastifyInstance, payload: string, signature: string | undefined, contentType = "application/json; charset=utf-8") {
  const headers: Record<string, string> = { "content-type": contentType };
  if (signature !== undefined) headers["stripe-signature"] = signature;
  return app.inject({ method: "POST", url: "/api/billing/stripe/webhook", headers, payload });
}

function sign(payload: string, options: { secret?: string; timestamp?: number } = {}): string {
  const stripe = createStripeClient({ secretKey: "sk_test_signer" }) ?? assert.fail("a key gives a client");
  return stripe.webhooks.generateTestHeaderString({ payload, secret: options.secret ?? webhookSecret, timestamp: options.timestamp });
}

function assertError(response: { statusCode: number; json(): unknown }, status: number, code: string, param: string | null = null) {
  assert.equal(response.statusCode, status);
  const body = response.json() as { error: { message: string; type: string; param: string | null; code: string } };
  assert.equal(body.error.code, code);
  assert.equal(body.error.param, param);
  assert.equal(typeof body.error.message, "string");
  return body.error;
}

test("checkout starts a Stripe session for the plan and the caller's account", async () => {
  const countBefore = api.requests.length;
  const response = await checkout(configured.app, { plan: "pro" }, { authorization: `Bearer ${apiKey}`, "x-test-account": "account-42" });
  assert.equal(response.statusCode, 200);
  const body = response.json() as { id: string; url: string };
  assert.match(body.id, /^cs_test_/);
  assert.equal(body.url, `https://checkout.stripe.com/c/pay/${body.id}`);

  assert.equal(api.requests.length, countBefore + 1);
  const form = (api.requests.at(-1) ?? assert.fail("no Stripe request")).form;
  assert.equal(form.get("mode"), "payment");
  assert.equal(form.get("line_items[0][price_data][currency]"), "eur");
  assert.equal(form.get("line_items[0][price_data][unit_amount]"), "2000");
  assert.equal(form.get("line_items[0][price_data][product_data][name]"), "Pro");
  assert.equal(form.get("line_items[0][quantity]"), "1");
  assert.equal(form.get("client_reference_id"), "account-42");
  assert.equal(form.get("metadata[account_id]"), "account-42");
  assert.equal(form.get("metadata[plan_id]"), "pro");
  assert.equal(form.get("success_url"), "https://ai.example.com/billing?checkout=success&session_id={CHECKOUT_SESSION_ID}");
  assert.equal(form.get("cancel_url"), "https://ai.example.com/billing?checkout=cancel");

  // What the webhook will check the payment against: the plan, its price, and what it grants.
  const recorded = await store.database.selectFrom("checkout_sessions").selectAll().where("id", "=", body.id).executeTakeFirstOrThrow();
  assert.deepEqual(
    { account: recorded.account_id, plan: recorded.plan_id, amount: Number(recorded.amount), currency: recorded.currency, credit: Number(recorded.credit), days: recorded.days, status: recorded.status },
    { account: "account-42", plan: "pro", amount: 2000, currency: "eur", credit: 5000, days: 30, status: "open" },
  );
});

test("new checkouts are counted per account across nodes through Redis: five a minute in all, then 429 too_many_checkouts", async () => {
  const stripe = createStripeClient({ secretKey, apiHost: "127.0.0.1", apiPort: api.port, apiProtocol: "http" });
  const keyPrefix = `turnpike:test:checkout:${Math.random().toString(36).slice(2)}:`;
  const throttles = [0, 1].map(() => new RedisSignInThrottle({ url: "redis://127.0.0.1:6379", limits: CHECKOUT_LIMITS, keyPrefix, counted: "new checkouts" }));
  try {
    // Two nodes; no open session is ever handed out again here, so that each checkout asks for a new one.
    const nodes = await Promise.all(throttles.map((checkoutThrottle) => buildTestApp({ stripe, webhookSecret, checkoutThrottle, findOpenCheckoutSession: async () => undefined })));
    const account = `account-redis-${Math.random().toString(36).slice(2)}`;
    const callsBefore = api.requests.length;
    const statuses: number[] = [];
    for (let index = 0; index < 10; index++) {
      const response = await checkout(nodes[index % 2]!.app, { plan: "starter" }, { authorization: `Bearer ${apiKey}`, "x-test-account": account });
      statuses.push(response.statusCode);
      if (response.statusCode === 429) {
        assertError(response, 429, "too_many_checkouts");
        assert.ok(Number(response.headers["retry-after"]) >= 1);
      }
    }
    assert.deepEqual(statuses, [200, 200, 200, 200, 200, 429, 429, 429, 429, 429]);
    assert.equal(api.requests.length - callsBefore, 5, "one call to Stripe per new session");
    assert.ok(!throttles.some((throttle) => throttle.degraded), "counted in Redis");
    // Another account has its own count.
    const another = await checkout(nodes[1]!.app, { plan: "starter" }, { authorization: `Bearer ${apiKey}`, "x-test-account": `${account}-other` });
    assert.equal(another.statusCode, 200);
  } finally {
    for (const throttle of throttles) await throttle.close();
  }
});

test("checkout of an unknown plan is a 404 plan_not_found", async () => {
  const countBefore = api.requests.length;
  assertError(await checkout(configured.app, { plan: "platinum" }), 404, "plan_not_found", "plan");
  assert.equal(api.requests.length, countBefore);
});

test("checkout of a free plan is a 400 plan_not_purchasable", async () => {
  assertError(await checkout(configured.app, { plan: "free" }), 400, "plan_not_purchasable", "plan");
});

test("checkout without a plan is a 400 on the plan parameter", async () => {
  assertError(await checkout(configured.app, {}), 400, "missing_required_parameter", "plan");
  assertError(await checkout(configured.app, { plan: 5 }), 400, "invalid_type", "plan");
});

test("checkout needs an API key", async () => {
  const countBefore = api.requests.length;
  assertError(await checkout(configured.app, { plan: "starter" }, {}), 401, "invalid_api_key");
  assert.equal(api.requests.length, countBefore);
});

test("checkout without Stripe configured says which settings to set", async () => {
  const error = assertError(await checkout(unconfigured.app, { plan: "starter" }), 503, "payments_not_configured");
  assert.match(error.message, /STRIPE_SECRET_KEY/);
  assert.match(error.message, /STRIPE_WEBHOOK_SECRET/);
});

test("checkout with a Stripe key but no webhook secret is refused too (payments could not be credited)", async () => {
  const stripe = createStripeClient({ secretKey, apiHost: "127.0.0.1", apiPort: api.port, apiProtocol: "http" });
  const halfConfigured = await buildTestApp({ stripe, webhookSecret: "" });
  assertError(await checkout(halfConfigured.app, { plan: "starter" }), 503, "payments_not_configured");
});

test("checkout that Stripe refuses is a 502, logged without the key", async () => {
  api.failWith({ status: 401, body: { error: { type: "invalid_request_error", message: `Invalid API Key provided: ${secretKey}` } } });
  try {
    const error = assertError(await checkout(configured.app, { plan: "starter" }), 502, "payment_provider_error");
    assert.ok(!error.message.includes(secretKey));
  } finally {
    api.failWith(null);
  }
  assert.ok(logLines.some((line) => line.includes("stripe checkout failed") && line.includes("[redacted]")));
});

test("a correctly signed paid checkout is granted to its account and plan", async () => {
  await recordedSession("cs_test_7", "starter");
  const before = await balanceOf(buyer);
  const payload = JSON.stringify(checkoutEvent({ id: "evt_grant_1", accountId: buyer, planId: "starter", sessionId: "cs_test_7", paymentIntent: "pi_test_7" }));
  const response = await deliver(configured.app, payload, sign(payload));
  assert.equal(response.statusCode, 200);
  assert.deepEqual(response.json(), { received: true, granted: true });
  const call = configured.ledger.calls.find((purchase) => purchase.eventId === "evt_grant_1") ?? assert.fail("grantPurchase was not called");
  assert.deepEqual(call, { eventId: "evt_grant_1", accountId: buyer, planId: "starter", sessionId: "cs_test_7", amountTotal: 500, currency: "usd", paymentIntentId: "pi_test_7" });
  assert.equal(await balanceOf(buyer), before + 1000);
  const session = await store.database.selectFrom("checkout_sessions").selectAll().where("id", "=", "cs_test_7").executeTakeFirstOrThrow();
  assert.equal(session.status, "granted");
  assert.equal(session.event_id, "evt_grant_1");
  // What refunds and disputes will name.
  assert.equal(session.payment_intent, "pi_test_7");
});

test("a session started through checkout is granted when its paid event arrives", async () => {
  const started = await checkout(configured.app, { plan: "pro" }, { authorization: `Bearer ${apiKey}`, "x-test-account": other });
  assert.equal(started.statusCode, 200, started.body);
  const { id } = started.json() as { id: string };
  const before = await balanceOf(other);
  const payload = JSON.stringify(checkoutEvent({ id: "evt_started_1", accountId: other, planId: "pro", sessionId: id, amountTotal: 2000, currency: "eur" }));
  const response = await deliver(configured.app, payload, sign(payload));
  assert.deepEqual(response.json(), { received: true, granted: true });
  assert.equal(await balanceOf(other), before + 5000);
});

test("an async payment that succeeded is granted", async () => {
  await recordedSession("cs_test_async", "starter");
  const payload = JSON.stringify(checkoutEvent({ id: "evt_async_1", type: "checkout.session.async_payment_succeeded", accountId: buyer, sessionId: "cs_test_async" }));
  const response = await deliver(configured.app, payload, sign(payload));
  assert.equal(response.statusCode, 200);
  assert.deepEqual(response.json(), { received: true, granted: true });
});

test("the same event delivered twice is granted once", async () => {
  await recordedSession("cs_test_twice", "starter");
  const before = await balanceOf(buyer);
  const payload = JSON.stringify(checkoutEvent({ id: "evt_twice", accountId: buyer, sessionId: "cs_test_twice" }));
  const first = await deliver(configured.app, payload, sign(payload));
  const second = await deliver(configured.app, payload, sign(payload));
  assert.equal(first.statusCode, 200);
  assert.deepEqual(first.json(), { received: true, granted: true });
  assert.equal(second.statusCode, 200);
  assert.deepEqual(second.json(), { received: true, granted: false });
  assert.equal(configured.ledger.calls.filter((purchase) => purchase.eventId === "evt_twice").length, 2);
  assert.equal(await balanceOf(buyer), before + 1000);
});

test("two distinct events for one checkout session grant it once", async () => {
  await recordedSession("cs_test_two_events", "starter");
  const before = await balanceOf(buyer);
  const events = [
    checkoutEvent({ id: "evt_session_a", accountId: buyer, sessionId: "cs_test_two_events" }),
    checkoutEvent({ id: "evt_session_b", accountId: buyer, sessionId: "cs_test_two_events" }),
    checkoutEvent({ id: "evt_session_c", type: "checkout.session.async_payment_succeeded", accountId: buyer, sessionId: "cs_test_two_events" }),
  ];
  const granted = [];
  for (const event of events) {
    const payload = JSON.stringify(event);
    const response = await deliver(configured.app, payload, sign(payload));
    assert.equal(response.statusCode, 200);
    granted.push((response.json() as { granted: boolean }).granted);
  }
  assert.deepEqual(granted, [true, false, false]);
  assert.equal(await balanceOf(buyer), before + 1000);
});

/** The log lines (parsed) that mention an event id. */
function loggedAbout(eventId: string): Array<Record<string, unknown>> {
  return logLines.filter((line) => line.includes(eventId)).map((line) => JSON.parse(line) as Record<string, unknown>);
}

test("a paid amount or currency other than the one recorded is acknowledged, not granted, and logged as an error", async () => {
  await recordedSession("cs_test_underpaid", "starter");
  await recordedSession("cs_test_other_currency", "starter");
  const before = await balanceOf(buyer);
  for (const [eventId, sessionId, amountTotal, currency] of [
    ["evt_underpaid", "cs_test_underpaid", 1, "usd"],
    ["evt_other_currency", "cs_test_other_currency", 500, "jpy"],
  ] as const) {
    const payload = JSON.stringify(checkoutEvent({ id: eventId, accountId: buyer, sessionId, amountTotal, currency }));
    const response = await deliver(configured.app, payload, sign(payload));
    assert.equal(response.statusCode, 200, "acknowledged, so that Stripe stops delivering it");
    assert.deepEqual(response.json(), { received: true, granted: false });
    const [line] = loggedAbout(eventId);
    assert.ok(line !== undefined, `no log line for ${eventId}`);
    assert.equal(line.level, 50, "logged as an error");
    assert.equal(line.msg, "stripe purchase refused");
    assert.equal(line.session_id, sessionId);
    assert.equal(line.reason, "mismatch");
    const session = await store.database.selectFrom("checkout_sessions").select("status").where("id", "=", sessionId).executeTakeFirstOrThrow();
    assert.equal(session.status, "refused");
  }
  assert.equal(await balanceOf(buyer), before);
});

test("an event for a session Turnpike never started, or for an account that is gone, is acknowledged and logged, not a 500", async () => {
  await recordedSession("cs_test_ghost_account", "starter", "acct_gone");
  const cases = [
    { eventId: "evt_unknown_session", accountId: buyer, sessionId: "cs_test_never_started", reason: "unknown_session" },
    { eventId: "evt_ghost_account", accountId: "acct_gone", sessionId: "cs_test_ghost_account", reason: "unknown_account" },
  ];
  for (const { eventId, accountId, sessionId, reason } of cases) {
    const payload = JSON.stringify(checkoutEvent({ id: eventId, accountId, sessionId }));
    const response = await deliver(configured.app, payload, sign(payload));
    assert.equal(response.statusCode, 200, response.body);
    assert.deepEqual(response.json(), { received: true, granted: false });
    const [line] = loggedAbout(eventId);
    assert.equal(line?.level, 50);
    assert.equal(line?.reason, reason);
    assert.equal(line?.session_id, sessionId);
  }
});

test("a signature made with another secret is a 400 invalid_signature and grants nothing", async () => {
  const payload = JSON.stringify(checkoutEvent({ id: "evt_forged" }));
  const error = assertError(await deliver(configured.app, payload, sign(payload, { secret: "whsec_attacker" })), 400, "invalid_signature");
  assert.equal(error.type, "invalid_request_error");
  assert.ok(!error.message.includes(webhookSecret));
  assert.equal(configured.ledger.calls.some((purchase) => purchase.eventId === "evt_forged"), false);
});

test("a stale signature is a 400 invalid_signature and grants nothing", async () => {
  const payload = JSON.stringify(checkoutEvent({ id: "evt_stale" }));
  assertError(await deliver(configured.app, payload, sign(payload, { timestamp: nowSeconds() - 3600 })), 400, "invalid_signature");
  assert.equal(configured.ledger.calls.some((purchase) => purchase.eventId === "evt_stale"), false);
});

test("a payload changed after signing is a 400 invalid_signature and grants nothing", async () => {
  const payload = JSON.stringify(checkoutEvent({ id: "evt_tampered", planId: "starter" }));
  const tampered = payload.replace('"plan_id":"starter"', '"plan_id":"pro"');
  assert.notEqual(tampered, payload);
  assertError(await deliver(configured.app, tampered, sign(payload)), 400, "invalid_signature");
  assert.equal(configured.ledger.calls.some((purchase) => purchase.eventId === "evt_tampered"), false);
});

test("a delivery without a signature is a 400 invalid_signature", async () => {
  const payload = JSON.stringify(checkoutEvent({ id: "evt_unsigned" }));
  assertError(await deliver(configured.app, payload, undefined), 400, "invalid_signature");
  assert.equal(configured.ledger.calls.some((purchase) => purchase.eventId === "evt_unsigned"), false);
});

test("unpaid checkouts and other event types are acknowledged without a grant", async () => {
  const events = [
    checkoutEvent({ id: "evt_unpaid", paymentStatus: "unpaid" }),
    checkoutEvent({ id: "evt_failed", type: "checkout.session.async_payment_failed" }),
    { ...checkoutEvent({ id: "evt_other" }), type: "customer.created" },
  ];
  for (const event of events) {
    const payload = JSON.stringify(event);
    const response = await deliver(configured.app, payload, sign(payload));
    assert.equal(response.statusCode, 200);
    assert.deepEqual(response.json(), { received: true });
  }
  const ignoredIds = new Set(["evt_unpaid", "evt_failed", "evt_other"]);
  assert.equal(configured.ledger.calls.some((purchase) => ignoredIds.has(purchase.eventId)), false);
});

test("a grant that fails answers 500 so that Stripe delivers again", async () => {
  const stripe = createStripeClient({ secretKey, apiHost: "127.0.0.1", apiPort: api.port, apiProtocol: "http" });
  const failing = await buildTestApp({
    stripe,
    webhookSecret,
    grantPurchase: async () => {
      throw new Error("database is down");
    },
  });
  const payload = JSON.stringify(checkoutEvent({ id: "evt_ledger_down", accountId: buyer }));
  const error = assertError(await deliver(failing.app, payload, sign(payload)), 500, "internal_error");
  assert.ok(!error.message.includes("database"));
});

test("the webhook without a webhook secret is a 503 payments_not_configured", async () => {
  const payload = JSON.stringify(checkoutEvent({ id: "evt_unconfigured" }));
  assertError(await deliver(unconfigured.app, payload, sign(payload)), 503, "payments_not_configured");
  assert.equal(unconfigured.ledger.calls.length, 0);
});

test("routes outside the webhook keep their parsed JSON bodies", async () => {
  const response = await configured.app.inject({ method: "POST", url: "/echo", payload: { hello: "world" } });
  assert.equal(response.statusCode, 200);
  assert.deepEqual(response.json(), { body: { hello: "world" } });
});

test("neither the Stripe key nor the webhook secret ever reaches the log", () => {
  assert.ok(logLines.length > 0, "the tests above wrote log lines");
  const log = logLines.join("");
  assert.ok(log.includes("stripe purchase"));
  assert.ok(!log.includes(secretKey));
  assert.ok(!log.includes(webhookSecret));
});
