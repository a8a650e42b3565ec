/**
 * Service tiers: the band a request queues in when the engines are saturated, and the price
 * multiplier it is billed at. OpenAI's names (`service_tier` on chat completions and responses):
 * `priority` goes first, `default` is the ordinary band, `flex` runs only in capacity nobody else
 * wants (and is refused with 429 when it finds none within its wait limit); `auto` asks for the
 * plan's default. A plan says which tiers its accounts may use and at what multiplier.
 * Dependency-free, so the console bundles it as it is.
 */

/** The tiers a request is served in, highest band first. */
export const SERVICE_TIERS = ["priority", "default", "flex"] as const;
export type ServiceTier = (typeof SERVICE_TIERS)[number];

/** What a request may ask for: a tier, or `auto` (the plan's default tier). */
export const REQUESTED_SERVICE_TIERS = ["auto", "default", "flex", "priority"] as const;
export type RequestedServiceTier = (typeof REQUESTED_SERVICE_TIERS)[number];

/**
 * A plan's tiers: each allowed tier's price multiplier (1 = the model's prices; 0.5 = half). A tier
 * absent is not allowed. Plans that say nothing allow `default` alone at 1.
 */
export type ServiceTierPrices = Partial<Record<ServiceTier, number>>;
export const DEFAULT_SERVICE_TIER_PRICES: Readonly<ServiceTierPrices> = { default: 1 };

/** Multipliers are kept in hundredths (percent), so that prices stay integer arithmetic. */
export function multiplierPercent(multiplier: number): number {
  return Math.round(multiplier * 100);
}

/** The tier a request is served in when it asks for `requested`: `auto` (or nothing) is `default`. */
export function servedTier(requested: RequestedServiceTier | null | undefined): ServiceTier {
  return requested === undefined || requested === null || requested === "auto" ? "default" : requested;
}
