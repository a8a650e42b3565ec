/** Starts a Stripe Checkout session for one plan, paid once (not a subscription). */
import type Stripe from "stripe";
import type { Plan } from "../../protocol/plans.ts";
import { PaymentProviderError, PlanNotPurchasableError } from "./errors.ts";
import type { CheckoutSession } from "../../protocol/account-api.ts";

export type CheckoutSessionInput = {
  stripe: Stripe;
  plan: Plan;
  /** The buying account; comes back in the webhook as `client_reference_id` and `metadata.account_id`. */
  accountId: string;
  /** Where Stripe sends the buyer after paying. */
  successUrl: string;
  /** Where Stripe sends the buyer who gives up. */
  cancelUrl: string;
};

export type { CheckoutSession };

/**
 * Creates a Checkout session in `payment` mode with the plan's price inline (no Stripe product
 * to keep in sync), tagged with the account and plan so the webhook can credit the purchase.
 * A free plan throws 400 `plan_not_purchasable`; a Stripe failure throws 502
 * `payment_provider_error` whose `cause` holds the Stripe error for the log.
 */
export async function createCheckoutSession(input: CheckoutSessionInput): Promise<CheckoutSession> {
  const { stripe, plan, accountId } = input;
  if (plan.price.amount <= 0) throw new PlanNotPurchasableError(plan.id);
  let session: Stripe.Checkout.Session;
  try {
    session = await stripe.checkout.sessions.create({
      mode: "payment",
      line_items: [
        {
          price_data: {
            currency: plan.price.currency,
            unit_amount: plan.price.amount,
            product_data: { name: plan.name },
          },
          quantity: 1,
        },
      ],
      client_reference_id: accountId,
      metadata: { account_id: accountId, plan_id: plan.id },
      success_url: input.successUrl,
      cancel_url: input.cancelUrl,
    });
  } catch (error) {
    throw new PaymentProviderError(error);
  }
  // Only sessions with `ui_mode: "embedded"` come without a URL; this one is hosted.
  if (session.url === null) throw new PaymentProviderError(new Error(`checkout session ${session.id} has no url`));
  return { id: session.id, url: session.url };
}
