/**
 * Stripe webhooks: check the `Stripe-Signature` of the raw body, then read a paid purchase
 * out of the event. Crediting it (once per Checkout session, `purchases.ts`) is the caller's business.
 */
import Stripe from "stripe";
import { InvalidRequestError } from "../../protocol/errors.ts";
import { InvalidSignatureError } from "./errors.ts";

/** Stripe's own default: a signature older than this many seconds is refused (replays). */
export const DEFAULT_TOLERANCE_SECONDS = 300;

export type VerifyStripeEventInput = {
  stripe: Stripe;
  /** The request body exactly as received: re-serialised JSON does not verify. */
  payload: Buffer | string;
  /** The `Stripe-Signature` header. */
  signature: string | undefined;
  /** `STRIPE_WEBHOOK_SECRET` (`whsec_…`). */
  secret: string;
  /** Maximum age of the signature's timestamp, in seconds; default 300. */
  toleranceSeconds?: number;
};

/**
 * Verifies a webhook delivery and returns its event. A missing, forged or stale signature
 * throws 400 `invalid_signature`; the message names what was wrong, never the secret.
 */
export function verifyStripeEvent(input: VerifyStripeEventInput): Stripe.Event {
  if (input.signature === undefined || input.signature.trim() === "") {
    throw new InvalidSignatureError("The Stripe-Signature header is missing.");
  }
  try {
    return input.stripe.webhooks.constructEvent(
      input.payload,
      input.signature,
      input.secret,
      input.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS,
    );
  } catch (error) {
    if (error instanceof Stripe.errors.StripeSignatureVerificationError) {
      const stale = /tolerance/i.test(error.message);
      throw new InvalidSignatureError(
        stale
          ? "The Stripe-Signature timestamp is too old; the delivery may be a replay."
          : "The Stripe-Signature header does not match the payload.",
        error,
      );
    }
    // The signature held, but the body is not an event we can read.
    throw new InvalidRequestError("The webhook body is not a Stripe event.", null, "invalid_event");
  }
}

/** A paid Checkout session, ready to be credited to an account. */
export type StripePurchase = {
  /** The Stripe event id (`evt_…`), for the log: one session may be named by several events, so grants are keyed by `sessionId`. */
  eventId: string;
  accountId: string;
  planId: string;
  /** The Checkout session (`cs_…`): granted once, checked against what checkout recorded for it. */
  sessionId: string;
  /** What was paid, in the currency's minor unit; null only if Stripe left it out. */
  amountTotal: number | null;
  /** Lowercase ISO code; null only if Stripe left it out. */
  currency: string | null;
};

/**
 * The purchase in a `checkout.session.completed` event whose payment is `paid`, or in a
 * `checkout.session.async_payment_succeeded` event (bank debits and the like that clear later).
 * Anything else, a session not paid yet, or a session not started by Turnpike (no account or
 * plan in its metadata) gives `null`: the route acknowledges it and grants nothing.
 */
export function purchaseFromEvent(event: Stripe.Event): StripePurchase | null {
  let session: Stripe.Checkout.Session;
  if (event.type === "checkout.session.completed") {
    session = event.data.object;
    if (session.payment_status !== "paid") return null;
  } else if (event.type === "checkout.session.async_payment_succeeded") {
    session = event.data.object;
  } else {
    return null;
  }
  const accountId = session.metadata?.account_id ?? session.client_reference_id ?? null;
  const planId = session.metadata?.plan_id ?? null;
  if (accountId === null || accountId === "" || planId === null || planId === "") return null;
  return {
    eventId: event.id,
    accountId,
    planId,
    sessionId: session.id,
    amountTotal: session.amount_total ?? null,
    currency: session.currency ?? null,
  };
}
