/**
 * What a request costs: its tokens times the model's prices (credit units per million tokens),
 * rounded up to the unit. Integer arithmetic throughout (BigInt), never floats. The one home of
 * the price formula: the server meters with it and the console (which bundles this file) shows
 * costs with it, so the two never disagree. Imports nothing.
 */

/** A model's prices, in credit units per million tokens (`FREE` in the catalog: all 0). */
export type Pricing = { prompt: number; cachedPrompt: number; completion: number };

const MILLION = 1_000_000n;

function ceilDivide(numerator: bigint, denominator: bigint): number {
  return Number((numerator + denominator - 1n) / denominator);
}

export type TokenCounts = { promptTokens: number; cachedPromptTokens: number; completionTokens: number };

/** The exact cost of a finished request. */
export function costOf(pricing: Pricing, usage: TokenCounts): number {
  const cached = BigInt(Math.min(usage.cachedPromptTokens, usage.promptTokens));
  const uncached = BigInt(usage.promptTokens) - cached;
  const total =
    uncached * BigInt(pricing.prompt) + cached * BigInt(pricing.cachedPrompt) + BigInt(usage.completionTokens) * BigInt(pricing.completion);
  return ceilDivide(total, MILLION);
}

/**
 * The most a request may cost: every prompt token at the dearer prompt price, every allowed
 * completion token (`maxCompletionTokens` counts all choices: `n × max_tokens`).
 */
export function worstCaseCost(pricing: Pricing, promptTokens: number, maxCompletionTokens: number): number {
  const promptPrice = BigInt(Math.max(pricing.prompt, pricing.cachedPrompt));
  return ceilDivide(BigInt(promptTokens) * promptPrice + BigInt(maxCompletionTokens) * BigInt(pricing.completion), MILLION);
}
