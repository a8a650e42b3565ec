import { test } from "node:test";
import assert from "node:assert/strict";
import Stripe from "stripe";
import { createStripeClient } from "./stripe-client.ts";

test("gives no client when no secret key is set", () => {
  assert.equal(createStripeClient({}), null);
  assert.equal(createStripeClient({ secretKey: "" }), null);
  assert.equal(createStripeClient({ secretKey: "   " }), null);
});

test("gives a real Stripe client when a secret key is set", () => {
  const stripe = createStripeClient({ secretKey: "sk_test_client", apiHost: "127.0.0.1", apiPort: 12111, apiProtocol: "http" });
  assert.ok(stripe instanceof Stripe);
});
