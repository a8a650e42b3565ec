/** Test support: Stripe event payloads as Stripe sends them, for signing with the real library. */

export type CheckoutEventOptions = {
  id?: string;
  type?: string;
  paymentStatus?: "paid" | "unpaid" | "no_payment_required";
  accountId?: string | null;
  planId?: string | null;
  sessionId?: string;
  amountTotal?: number;
  currency?: string;
  /** The payment intent that paid it (`pi_…`); none by default. */
  paymentIntent?: string;
};

/** A `checkout.session.*` event (by default a completed, paid one) as a plain object. */
export function checkoutEvent(options: CheckoutEventOptions = {}): Record<string, unknown> {
  const accountId = options.accountId === undefined ? "account-1" : options.accountId;
  const planId = options.planId === undefined ? "starter" : options.planId;
  const metadata: Record<string, string> = {};
  if (accountId !== null) metadata.account_id = accountId;
  if (planId !== null) metadata.plan_id = planId;
  return {
    id: options.id ?? "evt_test_1",
    object: "event",
    api_version: "2025-01-01",
    created: Math.floor(Date.now() / 1000),
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    type: options.type ?? "checkout.session.completed",
    data: {
      object: {
        id: options.sessionId ?? "cs_test_1",
        object: "checkout.session",
        mode: "payment",
        status: "complete",
        payment_status: options.paymentStatus ?? "paid",
        client_reference_id: accountId,
        metadata,
        amount_total: options.amountTotal ?? 500,
        currency: options.currency ?? "usd",
        payment_intent: options.paymentIntent ?? null,
      },
    },
  };
}

/** Seconds since the epoch, as Stripe signature timestamps count. */
export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

/** A `charge.refunded` event: the charge of `paymentIntent` has had `amountRefunded` of its `amount` refunded so far. */
export function refundEvent(options: { id: string; paymentIntent: string; amount: number; amountRefunded: number; currency?: string; chargeId?: string }): Record<string, unknown> {
  return {
    id: options.id,
    object: "event",
    api_version: "2025-01-01",
    created: nowSeconds(),
    livemode: false,
    type: "charge.refunded",
    data: {
      object: {
        id: options.chargeId ?? `ch_for_${options.paymentIntent}`,
        object: "charge",
        amount: options.amount,
        amount_captured: options.amount,
        amount_refunded: options.amountRefunded,
        refunded: options.amountRefunded >= options.amount,
        currency: options.currency ?? "usd",
        payment_intent: options.paymentIntent,
        status: "succeeded",
      },
    },
  };
}

/** A `charge.dispute.created` (or `.closed`, with its `status`) event about the charge of `paymentIntent`. */
export function disputeEvent(options: {
  id: string;
  disputeId: string;
  paymentIntent: string;
  amount: number;
  type?: "charge.dispute.created" | "charge.dispute.closed";
  status?: string;
  currency?: string;
}): Record<string, unknown> {
  return {
    id: options.id,
    object: "event",
    api_version: "2025-01-01",
    created: nowSeconds(),
    livemode: false,
    type: options.type ?? "charge.dispute.created",
    data: {
      object: {
        id: options.disputeId,
        object: "dispute",
        amount: options.amount,
        currency: options.currency ?? "usd",
        charge: `ch_for_${options.paymentIntent}`,
        payment_intent: options.paymentIntent,
        reason: "fraudulent",
        status: options.status ?? "needs_response",
      },
    },
  };
}
