/**
 * The errors of Stripe payments, as `ApiError`s with stable codes. None of their messages
 * ever holds a Stripe key, a webhook secret or the text of a Stripe error.
 */
import { ApiError } from "../../protocol/errors.ts";

/** 503: Stripe keys are not set, so nothing can be bought and no payment can be credited. */
export class PaymentsNotConfiguredError extends ApiError {
  constructor() {
    super("Payments are not configured on this server. The operator must set STRIPE_SECRET_KEY and STRIPE_WEBHOOK_SECRET.", "payments_not_configured");
  }
}

export { PlanNotFoundError } from "../errors.ts";

/** 400: the plan is free (price 0); Stripe takes no payment for it. */
export class PlanNotPurchasableError extends ApiError {
  constructor(planId: string) {
    super(`The plan '${planId}' is free and cannot be bought through Stripe.`, "plan_not_purchasable", { param: "plan" });
  }
}

/** 400: the webhook's `Stripe-Signature` is missing, forged, or older than the tolerance. */
export class InvalidSignatureError extends ApiError {
  constructor(message: string, cause?: unknown) {
    super(message, "invalid_signature", { cause });
  }
}

/** 429: the account started too many Checkout sessions lately (each is a call to Stripe). */
export class TooManyCheckoutsError extends ApiError {
  constructor(retryAfterSeconds: number) {
    super(
      `Too many checkouts were started for this account. Finish or cancel the one already open, or try again in ${retryAfterSeconds} seconds.`,
      "too_many_checkouts",
      { headers: { "retry-after": String(retryAfterSeconds) } },
    );
  }
}

/** 502: Stripe refused or could not be reached; the details go to the log, not to the client. */
export class PaymentProviderError extends ApiError {
  constructor(cause?: unknown) {
    super("The payment provider could not start the checkout. Try again in a moment.", "payment_provider_error", { cause });
  }
}

/** Anything that looks like a Stripe key or webhook secret. */
const SECRET_PATTERN = /\b(?:sk|rk|pk|whsec)_[A-Za-z0-9_*]+/g;

/**
 * A Stripe error as log fields (type, code, HTTP status, request id and message) with anything
 * shaped like a key or secret blanked out. Errors that are not Stripe's give just their name.
 */
export function describeStripeError(error: unknown): Record<string, string | number | undefined> {
  if (!(error instanceof Error)) return { type: typeof error };
  const fields = error as Error & { type?: unknown; code?: unknown; statusCode?: unknown; requestId?: unknown };
  return {
    type: typeof fields.type === "string" ? fields.type : error.name,
    code: typeof fields.code === "string" ? fields.code : undefined,
    status: typeof fields.statusCode === "number" ? fields.statusCode : undefined,
    request_id: typeof fields.requestId === "string" ? fields.requestId : undefined,
    message: error.message.replace(SECRET_PATTERN, "[redacted]").slice(0, 500),
  };
}
