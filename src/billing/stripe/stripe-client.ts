/** The Stripe client, or `null` when no secret key is set (payments not configured). */
import Stripe from "stripe";

export type StripeClientSettings = {
  /** `STRIPE_SECRET_KEY` (`sk_live_…`, `sk_test_…` or a restricted `rk_…`); unset or empty: no payments. */
  secretKey?: string;
  /** API host; default `api.stripe.com`. Tests point it at a local server. */
  apiHost?: string;
  /** API port; default 443. */
  apiPort?: number;
  /** Default `https`. */
  apiProtocol?: "http" | "https";
};

/**
 * Builds the Stripe client from settings, or returns `null` when no secret key is set.
 * The key stays inside the client: it is never logged nor echoed.
 */
export function createStripeClient(settings: StripeClientSettings): Stripe | null {
  const secretKey = settings.secretKey?.trim();
  if (secretKey === undefined || secretKey === "") return null;
  return new Stripe(secretKey, {
    appInfo: { name: "turnpike" },
    telemetry: false,
    ...(settings.apiHost === undefined ? {} : { host: settings.apiHost }),
    ...(settings.apiPort === undefined ? {} : { port: settings.apiPort }),
    ...(settings.apiProtocol === undefined ? {} : { protocol: settings.apiProtocol }),
  });
}
