import { test } from "node:test";
import assert from "node:assert/strict";
import type Stripe from "stripe";
import { ApiError } from "../../protocol/errors.ts";
import { createStripeClient } from "./stripe-client.ts";
import { checkoutEvent, disputeEvent, nowSeconds, refundEvent } from "./test-events.ts";
import { closedSessionFromEvent, disputeWonFromEvent, purchaseFromEvent, reversalFromEvent, verifyStripeEvent } from "./webhook.ts";

const secret = "whsec_test_secret_for_webhook_unit_tests";
const stripe = createStripeClient({ secretKey: "sk_test_unit" }) ?? assert.fail("a key gives a client");

function sign(payload: string, options: { secret?: string; timestamp?: number } = {}): string {
  return stripe.webhooks.generateTestHeaderString({ payload, secret: options.secret ?? secret, timestamp: options.timestamp });
}

function assertInvalidSignature(action: () => unknown): ApiError {
  let caught: unknown;
  try {
    action();
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof ApiError, `expected an ApiError, got ${String(caught)}`);
  assert.equal(caught.status, 400);
  assert.equal(caught.type, "invalid_request_error");
  assert.equal(caught.code, "invalid_signature");
  assert.ok(!caught.message.includes(secret), "the message must not hold the secret");
  return caught;
}

test("verifies a correctly signed event from a Buffer and from a string", () => {
  const payload = JSON.stringify(checkoutEvent({ id: "evt_ok" }));
  const header = sign(payload);
  assert.equal(verifyStripeEvent({ stripe: stripe, payload: Buffer.from(payload), signature: header, secret }).id, "evt_ok");
  assert.equal(verifyStripeEvent({ stripe: stripe, payload, signature: header, secret }).id, "evt_ok");
});

test("refuses a missing signature header", () => {
  const payload = JSON.stringify(checkoutEvent());
  const error = assertInvalidSignature(() => verifyStripeEvent({ stripe: stripe, payload, signature: undefined, secret }));
  assert.match(error.message, /missing/);
  assertInvalidSignature(() => verifyStripeEvent({ stripe: stripe, payload, signature: "", secret }));
});

test("refuses a signature made with another secret", () => {
  const payload = JSON.stringify(checkoutEvent());
  assertInvalidSignature(() => verifyStripeEvent({ stripe: stripe, payload, signature: sign(payload, { secret: "whsec_forged" }), secret }));
});

test("refuses a garbled signature header", () => {
  const payload = JSON.stringify(checkoutEvent());
  assertInvalidSignature(() => verifyStripeEvent({ stripe: stripe, payload, signature: "not-a-signature", secret }));
});

test("refuses a payload changed after signing", () => {
  const payload = JSON.stringify(checkoutEvent({ amountTotal: 500 }));
  const tampered = payload.replace('"amount_total":500', '"amount_total":50000');
  assert.notEqual(tampered, payload);
  assertInvalidSignature(() => verifyStripeEvent({ stripe: stripe, payload: tampered, signature: sign(payload), secret }));
});

test("refuses a signature older than the tolerance, and says so", () => {
  const payload = JSON.stringify(checkoutEvent());
  const header = sign(payload, { timestamp: nowSeconds() - 3600 });
  const error = assertInvalidSignature(() => verifyStripeEvent({ stripe: stripe, payload, signature: header, secret }));
  assert.match(error.message, /too old/);
  // A wider tolerance accepts the same delivery.
  assert.equal(verifyStripeEvent({ stripe: stripe, payload, signature: header, secret, toleranceSeconds: 7200 }).type, "checkout.session.completed");
});

test("reads a paid completed checkout as a purchase", () => {
  const event = checkoutEvent({ id: "evt_paid", accountId: "account-9", planId: "pro", sessionId: "cs_test_9", amountTotal: 1500, currency: "eur" });
  assert.deepEqual(purchaseFromEvent(event as unknown as Stripe.Event), {
    eventId: "evt_paid",
    accountId: "account-9",
    planId: "pro",
    sessionId: "cs_test_9",
    amountTotal: 1500,
    currency: "eur",
    paymentIntentId: null,
  });
});

test("reads an async payment that succeeded as a purchase", () => {
  const event = checkoutEvent({ type: "checkout.session.async_payment_succeeded", paymentStatus: "paid" });
  assert.equal(purchaseFromEvent(event as unknown as Stripe.Event)?.planId, "starter");
});

test("ignores an unpaid completed checkout, other event types, and sessions without Turnpike metadata", () => {
  const ignored = [
    checkoutEvent({ paymentStatus: "unpaid" }),
    checkoutEvent({ type: "checkout.session.async_payment_failed" }),
    checkoutEvent({ type: "checkout.session.expired", paymentStatus: "unpaid" }),
    { ...checkoutEvent(), type: "payment_intent.succeeded" },
    checkoutEvent({ planId: null }),
    checkoutEvent({ accountId: null }),
  ];
  for (const event of ignored) assert.equal(purchaseFromEvent(event as unknown as Stripe.Event), null);
});

test("refuses a signature timestamp more than five minutes in the future, and says so", () => {
  const payload = JSON.stringify(checkoutEvent());
  const tenMinutesAhead = sign(payload, { timestamp: nowSeconds() + 600 });
  const error = assertInvalidSignature(() => verifyStripeEvent({ stripe: stripe, payload, signature: tenMinutesAhead, secret }));
  assert.match(error.message, /future/);
  // A wider tolerance for old deliveries does not widen the future skew.
  assertInvalidSignature(() => verifyStripeEvent({ stripe: stripe, payload, signature: tenMinutesAhead, secret, toleranceSeconds: 7200 }));
  // Clocks differ a little: a minute ahead is accepted.
  assert.equal(verifyStripeEvent({ stripe: stripe, payload, signature: sign(payload, { timestamp: nowSeconds() + 60 }), secret }).type, "checkout.session.completed");
});

test("reads a paid checkout's payment intent, which refunds and disputes name", () => {
  const event = checkoutEvent({ paymentIntent: "pi_123" });
  assert.equal(purchaseFromEvent(event as unknown as Stripe.Event)?.paymentIntentId, "pi_123");
  const expanded = checkoutEvent();
  ((expanded.data as { object: Record<string, unknown> }).object).payment_intent = { id: "pi_expanded", object: "payment_intent" };
  assert.equal(purchaseFromEvent(expanded as unknown as Stripe.Event)?.paymentIntentId, "pi_expanded");
});

test("reads a refund as its running total, keyed by the event", () => {
  const event = refundEvent({ id: "evt_refund", paymentIntent: "pi_1", amount: 2000, amountRefunded: 500, chargeId: "ch_1" });
  assert.deepEqual(reversalFromEvent(event as unknown as Stripe.Event), {
    kind: "refund",
    eventId: "evt_refund",
    key: "refund:evt_refund",
    paymentIntentId: "pi_1",
    chargeId: "ch_1",
    amount: 500,
    chargeAmount: 2000,
    currency: "usd",
  });
});

test("reads a dispute that opened, or closed lost, as one reversal keyed by the dispute; a dispute won is only reported", () => {
  const opened = reversalFromEvent(disputeEvent({ id: "evt_a", disputeId: "dp_1", paymentIntent: "pi_1", amount: 2000 }) as unknown as Stripe.Event);
  const lost = reversalFromEvent(disputeEvent({ id: "evt_b", disputeId: "dp_1", paymentIntent: "pi_1", amount: 2000, type: "charge.dispute.closed", status: "lost" }) as unknown as Stripe.Event);
  assert.equal(opened?.kind, "dispute");
  assert.equal(opened?.key, "dispute:dp_1");
  assert.equal(lost?.key, "dispute:dp_1");
  assert.equal(lost?.amount, 2000);
  const won = disputeEvent({ id: "evt_c", disputeId: "dp_1", paymentIntent: "pi_1", amount: 2000, type: "charge.dispute.closed", status: "won" }) as unknown as Stripe.Event;
  assert.equal(reversalFromEvent(won), null);
  assert.deepEqual(disputeWonFromEvent(won), { eventId: "evt_c", disputeId: "dp_1", paymentIntentId: "pi_1", status: "won" });
  // Neither a purchase nor a reversal: a checkout, or a refund of nothing.
  assert.equal(reversalFromEvent(checkoutEvent() as unknown as Stripe.Event), null);
  assert.equal(reversalFromEvent(refundEvent({ id: "evt_zero", paymentIntent: "pi_1", amount: 2000, amountRefunded: 0 }) as unknown as Stripe.Event), null);
});

test("reads the sessions that can no longer be paid: expired, completed with the payment clearing, or that payment failed", () => {
  const closed = (options: Parameters<typeof checkoutEvent>[0]) => closedSessionFromEvent(checkoutEvent({ sessionId: "cs_gone", ...options }) as unknown as Stripe.Event);
  assert.deepEqual(closed({ type: "checkout.session.expired", paymentStatus: "unpaid" }), { sessionId: "cs_gone", status: "expired" });
  assert.deepEqual(closed({ paymentStatus: "unpaid" }), { sessionId: "cs_gone", status: "pending" });
  assert.deepEqual(closed({ type: "checkout.session.async_payment_failed", paymentStatus: "unpaid" }), { sessionId: "cs_gone", status: "failed" });
  assert.equal(closed({}), null, "a paid one is a purchase");
});
