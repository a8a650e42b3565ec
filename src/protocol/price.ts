/**
 * What a request costs: its tokens times the model's prices (credit units per million tokens),
 * rounded up to the unit. Integer arithmetic throughout (BigInt), never floats. The one home of
 * the price formula: the server meters with it and the console (which bundles this file) shows
 * costs with it, so the two never disagree. Imports nothing.
 */

/** A model's prices, in credit units per million tokens (`FREE` in the catalog: all 0). */
export type Pricing = { prompt: number; cachedPrompt: number; completion: number };

const MILLION = 1_000_000n;
/** A price multiplier of 1, in percent (a service tier's multiplier: `service-tiers.ts`). */
const FULL_PRICE_PERCENT = 100;

function ceilDivide(numerator: bigint, denominator: bigint): number {
  return Number((numerator + denominator - 1n) / denominator);
}

export type TokenCounts = { promptTokens: number; cachedPromptTokens: number; completionTokens: number };

/**
 * The exact cost of a finished request; `multiplierPercent` is its service tier's price
 * multiplier in percent (100: the model's prices; 50: half), applied before the one rounding up.
 */
export function costOf(pricing: Pricing, usage: TokenCounts, multiplierPercent = FULL_PRICE_PERCENT): number {
  const cached = BigInt(Math.min(usage.cachedPromptTokens, usage.promptTokens));
  const uncached = BigInt(usage.promptTokens) - cached;
  const total =
    uncached * BigInt(pricing.prompt) + cached * BigInt(pricing.cachedPrompt) + BigInt(usage.completionTokens) * BigInt(pricing.completion);
  return ceilDivide(total * BigInt(multiplierPercent), MILLION * 100n);
}

/**
 * The most a request may cost: every prompt token at the dearer prompt price, every allowed
 * completion token (`maxCompletionTokens` counts all choices: `n × max_tokens`), at the service
 * tier's multiplier in percent (`costOf`).
 */
export function worstCaseCost(pricing: Pricing, promptTokens: number, maxCompletionTokens: number, multiplierPercent = FULL_PRICE_PERCENT): number {
  const promptPrice = BigInt(Math.max(pricing.prompt, pricing.cachedPrompt));
  const total = BigInt(promptTokens) * promptPrice + BigInt(maxCompletionTokens) * BigInt(pricing.completion);
  return ceilDivide(total * BigInt(multiplierPercent), MILLION * 100n);
}
