/**
 * Buying plans with Stripe:
 * - `POST /api/billing/checkout` `{"plan": "<plan id>"}` (API key): answers `{"id","url"}` of a
 *   Checkout session for the caller's account; the console sends the buyer to `url`. The
 *   account's open session for the same plan is handed out again; a new one is made only within
 *   `CHECKOUT_LIMITS` per account (429 `too_many_checkouts` past it), and requests for the same
 *   account and plan that arrive together on one node share one call to Stripe.
 * - `POST /api/billing/stripe/webhook` (Stripe, signed): credits paid sessions through `grantPurchase`,
 *   once per Checkout session, and only sessions recorded at checkout whose amount and currency
 *   match; a refused or unknown purchase is acknowledged (200) and logged as an error. Refunds
 *   and disputes take back the purchase's unspent credit through `reversePurchase` (what had been
 *   spent is logged at warn); a session that can no longer be paid is no longer handed out.
 */
import type { FastifyInstance, FastifyRequest, preHandlerHookHandler } from "fastify";
import type Stripe from "stripe";
import type { Plan } from "../../../protocol/plans.ts";
import { checkoutRequestSchema } from "../../../protocol/account-api-requests.ts";
import { InvalidRequestError } from "../../../protocol/errors.ts";
import { createCheckoutSession } from "../../../billing/stripe/checkout.ts";
import { checkoutSessionSchema, webhookReplySchema, type CheckoutSession, type WebhookReply } from "../../../protocol/account-api.ts";
import { describeStripeError, PaymentProviderError, PaymentsNotConfiguredError, PlanNotFoundError, TooManyCheckoutsError } from "../../../billing/stripe/errors.ts";
import type { CheckoutSessionRecord, PurchaseOutcome } from "../../../billing/stripe/purchases.ts";
import type { ReversalOutcome } from "../../../billing/stripe/reversals.ts";
import { MemorySignInThrottle, type SignInThrottle, type ThrottleLimits } from "../../../auth/sign-in-throttle.ts";
import { closedSessionFromEvent, disputeWonFromEvent, purchaseFromEvent, reversalFromEvent, verifyStripeEvent, type ClosedSession, type StripePurchase, type StripeReversal } from "../../../billing/stripe/webhook.ts";
import { defineOperation, registerOperations } from "../../operation.ts";

/**
 * New Checkout sessions per account: 5 a minute. Each is a call to Stripe; a buyer needs one
 * (an open one for the same plan is handed out again without counting). Counted with the
 * sign-in throttle's classes (in memory, or in Redis across nodes), the account standing for
 * both of its subjects.
 */
export const CHECKOUT_LIMITS: ThrottleLimits = { perAccount: 5, perAddress: 5, windowMs: 60_000 };

export type StripeRoutesOptions = {
  /** `null`: no `STRIPE_SECRET_KEY`, payments are off. */
  stripe: Stripe | null;
  /** `STRIPE_WEBHOOK_SECRET` (`whsec_…`); unset: payments are off. */
  webhookSecret: string | undefined;
  /** The plans on sale now (read on each request, so admin edits apply at once). */
  plans: () => Plan[];
  authenticate: preHandlerHookHandler;
  /** The account an authenticated request acts for. */
  accountIdOf: (request: FastifyRequest) => string;
  /**
   * Records a session Stripe made, before its URL goes to the buyer (what `grantPurchase`
   * checks the payment against). A throw answers 500 and the buyer gets no URL.
   */
  recordCheckoutSession: (session: CheckoutSessionRecord) => Promise<void>;
  /** The account's open session for the plan as sold now, if it has one (handed out again). */
  findOpenCheckoutSession: (input: { accountId: string; plan: Plan }) => Promise<CheckoutSession | undefined>;
  /** Counts new Checkout sessions per account (`CHECKOUT_LIMITS`); default: in this node's memory. */
  checkoutThrottle?: SignInThrottle;
  /**
   * Credits a paid purchase. Must be idempotent per `purchase.sessionId`: Stripe retries a
   * delivery until it gets a 2xx, and may send several events for one session; a refusal says
   * why. A throw answers 500 and Stripe retries later.
   */
  grantPurchase: (purchase: StripePurchase) => Promise<PurchaseOutcome>;
  /**
   * Takes back the credit of a refunded or disputed purchase. Must be idempotent per
   * `reversal.key`. A throw answers 500 and Stripe retries later.
   */
  reversePurchase: (reversal: StripeReversal) => Promise<ReversalOutcome>;
  /** Marks a session that can no longer be paid (expired, or completed with its payment pending or failed), so that it is not handed out again. */
  closeCheckoutSession: (closed: ClosedSession) => Promise<void>;
  /** The server's public base URL (`https://ai.example.com`), for Stripe's return links. */
  publicUrl: string;
  /** Maximum age of a webhook signature in seconds; default 300. */
  webhookToleranceSeconds?: number;
};

/** What the two operations share, made once per registration. */
type StripeContext = {
  options: StripeRoutesOptions;
  /** The public base URL without its trailing slashes. */
  publicUrl: string;
  /** `STRIPE_WEBHOOK_SECRET`; undefined (an empty string from the environment too): payments are off. */
  webhookSecret: string | undefined;
  checkoutThrottle: SignInThrottle;
  /** Per account and plan, the checkout this node is answering now: requests that arrive meanwhile share it. */
  checkoutsUnderWay: Map<string, Promise<CheckoutSession>>;
};

/** The `plan` field of a checkout request body: missing or not a string, a code of its own before the schema's. */
function planIdFrom(body: unknown, parsed: () => { plan: string }): string {
  const plan = typeof body === "object" && body !== null ? (body as { plan?: unknown }).plan : undefined;
  if (plan === undefined || plan === null || plan === "") {
    throw new InvalidRequestError("Missing required parameter: 'plan'. Send {\"plan\": \"<plan id>\"}.", "plan", "missing_required_parameter");
  }
  if (typeof plan !== "string") throw new InvalidRequestError("'plan' must be a string: the id of a plan.", "plan", "invalid_type");
  return parsed().plan;
}

/** The account's open session for the plan, or a new one if the throttle allows. */
async function checkoutFor(context: StripeContext, request: FastifyRequest, stripe: Stripe, plan: Plan, accountId: string): Promise<CheckoutSession> {
  const { options } = context;
  const open = await options.findOpenCheckoutSession({ accountId, plan });
  if (open !== undefined) {
    request.log.info({ account_id: accountId, plan_id: plan.id, session_id: open.id }, "stripe checkout reused");
    return open;
  }
  const attempt = await context.checkoutThrottle.reserve(accountId, accountId);
  if (!attempt.allowed) {
    request.log.warn({ account_id: accountId, plan_id: plan.id, retry_after: attempt.retryAfterSeconds }, "stripe checkout throttled");
    throw new TooManyCheckoutsError(attempt.retryAfterSeconds);
  }
  try {
    const session = await createCheckoutSession({
      stripe,
      plan,
      accountId,
      // Stripe fills in `{CHECKOUT_SESSION_ID}` itself.
      successUrl: `${context.publicUrl}/billing?checkout=success&session_id={CHECKOUT_SESSION_ID}`,
      cancelUrl: `${context.publicUrl}/billing?checkout=cancel`,
    });
    await options.recordCheckoutSession({ sessionId: session.id, accountId, plan, url: session.url });
    request.log.info({ account_id: accountId, plan_id: plan.id, session_id: session.id }, "stripe checkout started");
    return session;
  } catch (error) {
    if (error instanceof PaymentProviderError) {
      request.log.error({ stripe_error: describeStripeError(error.cause), plan_id: plan.id }, "stripe checkout failed");
    }
    throw error;
  }
}

export const checkoutOperation = defineOperation({
  method: "post",
  path: "/api/billing/checkout",
  tag: "Billing",
  summary: "A Stripe Checkout URL for a plan (the account's open session for the plan, when it has one).",
  auth: "account",
  body: checkoutRequestSchema,
  example: { plan: "starter" },
  success: { status: 200, description: "`{id, url}` of the Checkout session." },
  response: checkoutSessionSchema,
  errors: ["missing_required_parameter", "invalid_type", "account_required", "payments_not_configured", "plan_not_found", "plan_not_purchasable", "too_many_checkouts", "payment_provider_error"],
  schemas: { CheckoutRequest: checkoutRequestSchema, CheckoutSession: checkoutSessionSchema },
  async handler({ request, body }, context: StripeContext): Promise<CheckoutSession> {
    const { options } = context;
    const planId = planIdFrom(request.body, body);
    // Without the webhook secret a payment could be taken but never credited: refuse both halves.
    if (options.stripe === null || context.webhookSecret === undefined) throw new PaymentsNotConfiguredError();
    const plan = options.plans().find((candidate) => candidate.id === planId);
    if (plan === undefined) throw new PlanNotFoundError(planId);
    const accountId = options.accountIdOf(request);
    const key = JSON.stringify([accountId, plan.id]);
    const underWay = context.checkoutsUnderWay.get(key);
    if (underWay !== undefined) return underWay;
    const checkout = checkoutFor(context, request, options.stripe, plan, accountId);
    context.checkoutsUnderWay.set(key, checkout);
    try {
      return await checkout;
    } finally {
      context.checkoutsUnderWay.delete(key);
    }
  },
});

/** Takes back a refunded or disputed purchase's credit and tells the operator what it could not take. */
async function reverse(context: StripeContext, request: FastifyRequest, reversal: StripeReversal): Promise<void> {
  const outcome = await context.options.reversePurchase(reversal);
  const fields = {
    event_id: reversal.eventId,
    kind: reversal.kind,
    payment_intent: reversal.paymentIntentId,
    charge_id: reversal.chargeId,
    amount: reversal.amount,
    currency: reversal.currency,
    session_id: outcome.sessionId,
    account_id: outcome.accountId,
    result: outcome.result,
  };
  if (outcome.result !== "reversed") {
    const level = outcome.result === "already_reversed" ? "info" : "warn";
    request.log[level](fields, `stripe ${reversal.kind} not applied`);
    return;
  }
  const taken = { ...fields, plan_id: outcome.planId, credit_share: outcome.share, credit_taken: outcome.taken, credit_spent: outcome.spent };
  // Credit spent before the money went back cannot be taken back: the operator must know.
  if (outcome.spent > 0) request.log.warn(taken, `stripe ${reversal.kind}: ${outcome.spent} of the purchase's credit had been spent already and was not taken back`);
  else request.log.info(taken, `stripe ${reversal.kind}: credit taken back`);
}

export const stripeWebhookOperation = defineOperation({
  method: "post",
  path: "/api/billing/stripe/webhook",
  tag: "Billing",
  summary: "Stripe's webhook: a paid Checkout session grants its plan; a refund or dispute takes its unspent credit back (signed with `Stripe-Signature`).",
  auth: "none",
  success: { status: 200, description: "`{received: true, granted?}`." },
  response: webhookReplySchema,
  errors: ["payments_not_configured", "invalid_signature", "invalid_event", "balance_limit_exceeded"],
  schemas: { WebhookReply: webhookReplySchema },
  async handler({ request }, context: StripeContext): Promise<WebhookReply> {
    const { options, webhookSecret } = context;
    if (options.stripe === null || webhookSecret === undefined) throw new PaymentsNotConfiguredError();
    const signature = request.headers["stripe-signature"];
    const payload = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
    let event: Stripe.Event;
    try {
      event = verifyStripeEvent({
        stripe: options.stripe,
        payload,
        signature: typeof signature === "string" ? signature : undefined,
        secret: webhookSecret,
        toleranceSeconds: options.webhookToleranceSeconds,
      });
    } catch (error) {
      request.log.warn({ code: (error as { code?: unknown }).code }, "stripe webhook refused");
      throw error;
    }
    const reversal = reversalFromEvent(event);
    if (reversal !== null) {
      await reverse(context, request, reversal);
      return { received: true };
    }
    const disputeWon = disputeWonFromEvent(event);
    if (disputeWon !== null) {
      // The credit taken back when the dispute opened is not given back by itself: the operator decides.
      request.log.warn(
        { event_id: disputeWon.eventId, dispute_id: disputeWon.disputeId, payment_intent: disputeWon.paymentIntentId, status: disputeWon.status },
        "stripe dispute closed in the merchant's favour: credit taken back when it opened may be granted again by an administrator",
      );
      return { received: true };
    }
    const purchase = purchaseFromEvent(event);
    if (purchase === null) {
      const closed = closedSessionFromEvent(event);
      if (closed !== null) await options.closeCheckoutSession(closed);
      request.log.info({ event_id: event.id, event_type: event.type, session_id: closed?.sessionId, session_status: closed?.status }, "stripe webhook: nothing to grant");
      return { received: true };
    }
    const outcome = await options.grantPurchase(purchase);
    const fields = { event_id: purchase.eventId, account_id: purchase.accountId, plan_id: purchase.planId, session_id: purchase.sessionId, granted: outcome.granted };
    if (outcome.granted) request.log.info(fields, "stripe purchase");
    else if (outcome.reason === "already_granted") request.log.info({ ...fields, reason: outcome.reason }, "stripe purchase");
    else {
      // Paid (or claimed paid) but not granted: an operator must look (refund, or grant by hand).
      // Acknowledged all the same: delivering it again would not change the answer.
      request.log.error(
        { ...fields, reason: outcome.reason, detail: outcome.detail, amount_total: purchase.amountTotal, currency: purchase.currency },
        "stripe purchase refused",
      );
    }
    return { received: true, granted: outcome.granted };
  },
});

/** Registers the checkout and webhook routes; the webhook lives in its own scope that keeps raw bodies. */
export function registerStripeRoutes(app: FastifyInstance, options: StripeRoutesOptions): void {
  const context: StripeContext = {
    options,
    publicUrl: options.publicUrl.replace(/\/+$/, ""),
    // Empty strings from the environment count as unset.
    webhookSecret: options.webhookSecret === undefined || options.webhookSecret.trim() === "" ? undefined : options.webhookSecret,
    checkoutThrottle: options.checkoutThrottle ?? new MemorySignInThrottle(CHECKOUT_LIMITS),
    checkoutsUnderWay: new Map(),
  };
  registerOperations(app, [checkoutOperation], { context, authenticate: { account: options.authenticate } });
  app.register(async function stripeWebhookScope(scope) {
    // Signatures cover the exact bytes Stripe sent, so this scope keeps JSON bodies raw.
    scope.removeContentTypeParser("application/json");
    scope.addContentTypeParser("application/json", { parseAs: "buffer" }, function keepRawBody(_request, body, done) {
      done(null, body);
    });
    registerOperations(scope, [stripeWebhookOperation], { context });
  });
}
