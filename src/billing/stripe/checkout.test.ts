import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type Stripe from "stripe";
import { ApiError } from "../../protocol/errors.ts";
import type { Plan } from "../../protocol/plans.ts";
import { createCheckoutSession } from "./checkout.ts";
import { describeStripeError } from "./errors.ts";
import { startFakeStripeApi, type FakeStripeApi } from "./fake-stripe-api.ts";
import { createStripeClient } from "./stripe-client.ts";

const secretKey = "sk_test_checkout_unit_key";
const starter: Plan = { id: "starter", name: "Starter", price: { amount: 500, currency: "usd" }, credit: 1000, days: null, rpm: null, tpm: null, models: null, weight: 1, service_tiers: { default: 1 } };
const free: Plan = { ...starter, id: "free", name: "Free", price: { amount: 0, currency: "usd" } };

let api: FakeStripeApi;
let stripe: Stripe;

before(async () => {
  api = await startFakeStripeApi();
  stripe =
    createStripeClient({ secretKey, apiHost: "127.0.0.1", apiPort: api.port, apiProtocol: "http" }) ?? assert.fail("a key gives a client");
});

after(async () => {
  await api.close();
});

const urls = { successUrl: "https://ai.example.com/billing?checkout=success", cancelUrl: "https://ai.example.com/billing?checkout=cancel" };

test("creates a one-time payment session with the plan's price inline and the account in its metadata", async () => {
  api.failWith(null);
  const countBefore = api.requests.length;
  const session = await createCheckoutSession({ stripe, plan: starter, accountId: "account-7", ...urls });
  assert.match(session.id, /^cs_test_/);
  assert.equal(session.url, `https://checkout.stripe.com/c/pay/${session.id}`);

  assert.equal(api.requests.length, countBefore + 1);
  const sent = api.requests.at(-1) ?? assert.fail("no request recorded");
  assert.equal(sent.method, "POST");
  assert.equal(sent.path, "/v1/checkout/sessions");
  assert.equal(sent.authorization, `Bearer ${secretKey}`);
  const form = sent.form;
  assert.equal(form.get("mode"), "payment");
  assert.equal(form.get("line_items[0][price_data][currency]"), "usd");
  assert.equal(form.get("line_items[0][price_data][unit_amount]"), "500");
  assert.equal(form.get("line_items[0][price_data][product_data][name]"), "Starter");
  assert.equal(form.get("line_items[0][quantity]"), "1");
  assert.equal(form.get("client_reference_id"), "account-7");
  assert.equal(form.get("metadata[account_id]"), "account-7");
  assert.equal(form.get("metadata[plan_id]"), "starter");
  assert.equal(form.get("success_url"), urls.successUrl);
  assert.equal(form.get("cancel_url"), urls.cancelUrl);
});

test("refuses a free plan with a 400 without calling Stripe", async () => {
  const countBefore = api.requests.length;
  await assert.rejects(createCheckoutSession({ stripe, plan: free, accountId: "account-7", ...urls }), (error: unknown) => {
    assert.ok(error instanceof ApiError);
    assert.equal(error.status, 400);
    assert.equal(error.code, "plan_not_purchasable");
    assert.equal(error.param, "plan");
    return true;
  });
  assert.equal(api.requests.length, countBefore);
});

test("turns a Stripe refusal into a 502 that says nothing of the key", async () => {
  api.failWith({ status: 401, body: { error: { type: "invalid_request_error", message: `Invalid API Key provided: ${secretKey}` } } });
  try {
    await assert.rejects(createCheckoutSession({ stripe, plan: starter, accountId: "account-7", ...urls }), (error: unknown) => {
      assert.ok(error instanceof ApiError);
      assert.equal(error.status, 502);
      assert.equal(error.code, "payment_provider_error");
      assert.ok(!JSON.stringify(error.toBody()).includes(secretKey));
      // What the route logs about the cause is blanked too.
      const logged = describeStripeError(error.cause);
      assert.equal(logged.status, 401);
      assert.ok(!JSON.stringify(logged).includes(secretKey));
      return true;
    });
  } finally {
    api.failWith(null);
  }
});
