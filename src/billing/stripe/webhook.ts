/**
 * Stripe webhooks: check the `Stripe-Signature` of the raw body, then read what the event means
 * for Turnpike: a paid purchase, a refund or dispute of one, or a session that expired unpaid.
 * Acting on it (once per Checkout session, once per refund event or dispute, `purchases.ts` and
 * `reversals.ts`) is the caller's business.
 */
import Stripe from "stripe";
import { InvalidRequestError } from "../../protocol/errors.ts";
import { InvalidSignatureError } from "./errors.ts";

/** Stripe's own default: a signature older than this many seconds is refused (replays). */
export const DEFAULT_TOLERANCE_SECONDS = 300;

/**
 * How far ahead of this server's clock a signature's timestamp may be, in seconds (clocks
 * differ a little). Stripe's library checks only the age, so a delivery signed with a timestamp
 * far in the future (a signing secret that leaked, used to make deliveries that stay "fresh"
 * for as long as wanted) would pass; past this skew it is refused.
 */
export const MAX_FUTURE_SKEW_SECONDS = 300;

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
  /** Seconds since the epoch now; default the clock's. */
  nowSeconds?: number;
};

/**
 * The `t=` timestamp of a `Stripe-Signature` header (seconds), read as Stripe's library reads it
 * (the last `t=` counts), or null when there is none that reads.
 */
function signatureTimestamp(header: string): number | null {
  let timestamp: number | null = null;
  for (const part of header.split(",")) {
    const [name, value] = part.split("=", 2);
    if (name !== "t" || value === undefined) continue;
    const seconds = Number.parseInt(value, 10);
    timestamp = Number.isFinite(seconds) ? seconds : null;
  }
  return timestamp;
}

/**
 * Verifies a webhook delivery and returns its event. A missing, forged or stale signature
 * throws 400 `invalid_signature`; the message names what was wrong, never the secret.
 */
export function verifyStripeEvent(input: VerifyStripeEventInput): Stripe.Event {
  if (input.signature === undefined || input.signature.trim() === "") {
    throw new InvalidSignatureError("The Stripe-Signature header is missing.");
  }
  let event: Stripe.Event;
  try {
    event = input.stripe.webhooks.constructEvent(
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
  // The library verified the signature and the age; a timestamp ahead of the clock is ours to refuse.
  const timestamp = signatureTimestamp(input.signature);
  const now = input.nowSeconds ?? Math.floor(Date.now() / 1000);
  if (timestamp !== null && timestamp - now > MAX_FUTURE_SKEW_SECONDS) {
    throw new InvalidSignatureError(`The Stripe-Signature timestamp is more than ${MAX_FUTURE_SKEW_SECONDS} seconds in the future; check the clocks.`);
  }
  return event;
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
  /** The payment intent (`pi_…`) that paid it: refunds and disputes name it. Null if Stripe left it out. */
  paymentIntentId: string | null;
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
    paymentIntentId: idOf(session.payment_intent),
  };
}

/** The id of an expandable field: Stripe sends an id, or the object when it was expanded. */
function idOf(field: string | { id: string } | null | undefined): string | null {
  if (typeof field === "string") return field === "" ? null : field;
  return typeof field?.id === "string" ? field.id : null;
}

/**
 * A Checkout session that can no longer be used to pay, though it was not (or not yet) paid:
 * `expired` (`checkout.session.expired`), `pending` (completed, its payment still clearing: a
 * bank debit, granted later by `checkout.session.async_payment_succeeded`), or `failed`
 * (`checkout.session.async_payment_failed`). Null for other events.
 */
export type ClosedSession = { sessionId: string; status: "expired" | "pending" | "failed" };

/** The session an event closes without paying it (see `ClosedSession`), or null. */
export function closedSessionFromEvent(event: Stripe.Event): ClosedSession | null {
  if (event.type === "checkout.session.expired") return { sessionId: event.data.object.id, status: "expired" };
  if (event.type === "checkout.session.async_payment_failed") return { sessionId: event.data.object.id, status: "failed" };
  if (event.type === "checkout.session.completed" && event.data.object.payment_status === "unpaid") return { sessionId: event.data.object.id, status: "pending" };
  return null;
}

/**
 * A payment taken back from the merchant, whose purchase gives back its credit:
 * - `refund`: `charge.refunded`; `amount` is what the charge has had refunded so far (Stripe
 *   sends the running total), out of `chargeAmount`. Each event counts once.
 * - `dispute`: `charge.dispute.created` (Stripe withdraws the disputed amount from the merchant
 *   at once, so the credit goes too), or `charge.dispute.closed` with status `lost` (for a
 *   dispute whose creation was not delivered); `amount` is the disputed amount. Each dispute
 *   counts once, whichever of its events comes first.
 */
export type StripeReversal = {
  kind: "refund" | "dispute";
  /** The Stripe event (`evt_…`). */
  eventId: string;
  /** What makes it count once: `refund:<event id>` or `dispute:<dispute id>`. */
  key: string;
  /** The payment intent (`pi_…`) of the charge: what links it to the purchase. */
  paymentIntentId: string | null;
  /** The charge (`ch_…`), for the log. */
  chargeId: string | null;
  /** Money refunded so far or disputed, in the currency's minor unit. */
  amount: number;
  /** The charge's amount (refunds); null for disputes (the purchase's recorded price is used). */
  chargeAmount: number | null;
  /** Lowercase ISO code. */
  currency: string | null;
};

/** A dispute decided in the merchant's favour: credit taken back when it opened is not given back by itself. */
export type StripeDisputeWon = { eventId: string; disputeId: string; paymentIntentId: string | null; status: string };

/** The refund or dispute in a `charge.refunded`, `charge.dispute.created` or lost `charge.dispute.closed` event; null for anything else. */
export function reversalFromEvent(event: Stripe.Event): StripeReversal | null {
  if (event.type === "charge.refunded") {
    const charge = event.data.object;
    if (!Number.isSafeInteger(charge.amount_refunded) || charge.amount_refunded <= 0) return null;
    return {
      kind: "refund",
      eventId: event.id,
      key: `refund:${event.id}`,
      paymentIntentId: idOf(charge.payment_intent),
      chargeId: charge.id ?? null,
      amount: charge.amount_refunded,
      chargeAmount: Number.isSafeInteger(charge.amount) && charge.amount > 0 ? charge.amount : null,
      currency: charge.currency?.toLowerCase() ?? null,
    };
  }
  const disputeOpened = event.type === "charge.dispute.created";
  const disputeLost = event.type === "charge.dispute.closed" && event.data.object.status === "lost";
  if (disputeOpened || disputeLost) {
    const dispute = event.data.object;
    if (!Number.isSafeInteger(dispute.amount) || dispute.amount <= 0) return null;
    return {
      kind: "dispute",
      eventId: event.id,
      key: `dispute:${dispute.id}`,
      paymentIntentId: idOf(dispute.payment_intent),
      chargeId: idOf(dispute.charge),
      amount: dispute.amount,
      chargeAmount: null,
      currency: dispute.currency?.toLowerCase() ?? null,
    };
  }
  return null;
}

/** A `charge.dispute.closed` event whose dispute was not lost (won, or an inquiry closed); null for anything else. */
export function disputeWonFromEvent(event: Stripe.Event): StripeDisputeWon | null {
  if (event.type !== "charge.dispute.closed" || event.data.object.status === "lost") return null;
  const dispute = event.data.object;
  return { eventId: event.id, disputeId: dispute.id, paymentIntentId: idOf(dispute.payment_intent), status: dispute.status };
}
