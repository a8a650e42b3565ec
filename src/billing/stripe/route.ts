/**
 * Buying plans with Stripe:
 * - `POST /api/billing/checkout` `{"plan": "<plan id>"}` (API key): starts a Checkout session for
 *   the caller's account and answers `{"id","url"}`; the console sends the buyer to `url`.
 * - `POST /api/billing/stripe/webhook` (Stripe, signed): credits paid sessions through `grantPurchase`,
 *   once per Checkout session, and only sessions recorded at checkout whose amount and currency
 *   match; a refused or unknown purchase is acknowledged (200) and logged as an error.
 */
import type { FastifyInstance, FastifyRequest, preHandlerHookHandler } from "fastify";
import type Stripe from "stripe";
import type { Plan } from "../plans.ts";
import { parseWithSchema } from "../../protocol/parse.ts";
import { checkoutRequestSchema } from "../../protocol/account-api-requests.ts";
import { InvalidRequestError } from "../../protocol/errors.ts";
import { createCheckoutSession } from "./checkout.ts";
import type { CheckoutSession, WebhookReply } from "../../protocol/account-api.ts";
import { describeStripeError, PaymentProviderError, PaymentsNotConfiguredError, PlanNotFoundError } from "./errors.ts";
import type { CheckoutSessionRecord, PurchaseOutcome } from "./purchases.ts";
import { purchaseFromEvent, verifyStripeEvent, type StripePurchase } from "./webhook.ts";

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
  /**
   * Credits a paid purchase. Must be idempotent per `purchase.sessionId`: Stripe retries a
   * delivery until it gets a 2xx, and may send several events for one session; a refusal says
   * why. A throw answers 500 and Stripe retries later.
   */
  grantPurchase: (purchase: StripePurchase) => Promise<PurchaseOutcome>;
  /** The server's public base URL (`https://ai.example.com`), for Stripe's return links. */
  publicUrl: string;
  /** Maximum age of a webhook signature in seconds; default 300. */
  webhookToleranceSeconds?: number;
};

/** The `plan` field of a checkout request body. */
function planIdFrom(body: unknown): string {
  const plan = typeof body === "object" && body !== null ? (body as { plan?: unknown }).plan : undefined;
  if (plan === undefined || plan === null || plan === "") {
    throw new InvalidRequestError("Missing required parameter: 'plan'. Send {\"plan\": \"<plan id>\"}.", "plan", "missing_required_parameter");
  }
  if (typeof plan !== "string") throw new InvalidRequestError("'plan' must be a string: the id of a plan.", "plan", "invalid_type");
  return parseWithSchema(checkoutRequestSchema, body).plan;
}

/** Registers the checkout and webhook routes; the webhook lives in its own scope that keeps raw bodies. */
export function registerStripeRoutes(app: FastifyInstance, options: StripeRoutesOptions): void {
  const publicUrl = options.publicUrl.replace(/\/+$/, "");
  // Empty strings from the environment count as unset.
  const webhookSecret = options.webhookSecret === undefined || options.webhookSecret.trim() === "" ? undefined : options.webhookSecret;

  app.post("/api/billing/checkout", { preHandler: options.authenticate }, async function startCheckout(request): Promise<CheckoutSession> {
    const planId = planIdFrom(request.body);
    // Without the webhook secret a payment could be taken but never credited: refuse both halves.
    if (options.stripe === null || webhookSecret === undefined) throw new PaymentsNotConfiguredError();
    const plan = options.plans().find((candidate) => candidate.id === planId);
    if (plan === undefined) throw new PlanNotFoundError(planId);
    const accountId = options.accountIdOf(request);
    try {
      const session = await createCheckoutSession({
        stripe: options.stripe,
        plan,
        accountId,
        // Stripe fills in `{CHECKOUT_SESSION_ID}` itself.
        successUrl: `${publicUrl}/billing?checkout=success&session_id={CHECKOUT_SESSION_ID}`,
        cancelUrl: `${publicUrl}/billing?checkout=cancel`,
      });
      await options.recordCheckoutSession({ sessionId: session.id, accountId, plan });
      request.log.info({ account_id: accountId, plan_id: plan.id, session_id: session.id }, "stripe checkout started");
      return session;
    } catch (error) {
      if (error instanceof PaymentProviderError) {
        request.log.error({ stripe_error: describeStripeError(error.cause), plan_id: plan.id }, "stripe checkout failed");
      }
      throw error;
    }
  });

  app.register(async function stripeWebhookScope(scope) {
    // Signatures cover the exact bytes Stripe sent, so this scope keeps JSON bodies raw.
    scope.removeContentTypeParser("application/json");
    scope.addContentTypeParser("application/json", { parseAs: "buffer" }, function keepRawBody(_request, body, done) {
      done(null, body);
    });

    scope.post("/api/billing/stripe/webhook", async function receiveStripeWebhook(request): Promise<WebhookReply> {
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
      const purchase = purchaseFromEvent(event);
      if (purchase === null) {
        request.log.info({ event_id: event.id, event_type: event.type }, "stripe webhook ignored");
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
    });
  });
}
