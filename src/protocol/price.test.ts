/** costOf and worstCaseCost: integer credit units, rounded up; the worst case covers every choice. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { costOf, worstCaseCost } from "./price.ts";

const pricing = { prompt: 1_000_000, cachedPrompt: 500_000, completion: 2_000_000 };

describe("pricing", () => {
  it("charges prompt, cached prompt and completion tokens at their prices", () => {
    assert.equal(costOf(pricing, { promptTokens: 10, cachedPromptTokens: 4, completionTokens: 7 }), 6 + 2 + 14);
  });

  it("rounds a fraction of a unit up", () => {
    assert.equal(costOf({ prompt: 1, cachedPrompt: 1, completion: 1 }, { promptTokens: 1, cachedPromptTokens: 0, completionTokens: 0 }), 1);
  });

  it("reserves every prompt token at the dearer price and every completion token of every choice", () => {
    const choices = 3;
    const maxTokens = 100;
    assert.equal(worstCaseCost(pricing, 10, maxTokens * choices), 10 + 600);
    assert.ok(worstCaseCost(pricing, 10, maxTokens * choices) >= costOf(pricing, { promptTokens: 10, cachedPromptTokens: 0, completionTokens: 300 }));
  });

  it("applies a service tier's multiplier in percent before the one rounding up", () => {
    const usage = { promptTokens: 10, cachedPromptTokens: 4, completionTokens: 7 };
    assert.equal(costOf(pricing, usage, 100), costOf(pricing, usage));
    assert.equal(costOf(pricing, usage, 50), 11);
    assert.equal(costOf(pricing, usage, 200), 44);
    assert.equal(costOf(pricing, usage, 0), 0);
    // 22 × 0.33 = 7.26: rounded up once, not per token.
    assert.equal(costOf(pricing, usage, 33), 8);
    assert.equal(costOf({ prompt: 1, cachedPrompt: 1, completion: 1 }, { promptTokens: 1, cachedPromptTokens: 0, completionTokens: 0 }, 1), 1);
    assert.equal(worstCaseCost(pricing, 10, 300, 50), 305);
    assert.equal(worstCaseCost(pricing, 10, 300, 150), 915);
    // Past 2^53 in the product, still exact.
    assert.equal(costOf({ prompt: 9_007_199_254, cachedPrompt: 0, completion: 0 }, { promptTokens: 1_000_000, cachedPromptTokens: 0, completionTokens: 0 }, 10_000), 900_719_925_400);
  });
});

describe("the console's cost", () => {
  it("is the server's exact formula, also where floating point would lose a unit", async () => {
    // The console's own helper, in the wire's field names (it bundles this module).
    const { costOf: consoleCostOf } = await import("../../console/src/format.ts");
    // The last case sums past 2^53: in floating point (the console's old copy of the formula)
    // 9,007,199,255,000,001 becomes ...000 and the cost comes out one unit short.
    const cases = [
      { pricing: { prompt: 100_000, cachedPrompt: 100_000, completion: 100_000 }, usage: { promptTokens: 1, cachedPromptTokens: 0, completionTokens: 2 } },
      { pricing: { prompt: 7, cachedPrompt: 3, completion: 11 }, usage: { promptTokens: 999_999, cachedPromptTokens: 500_000, completionTokens: 1 } },
      { pricing: { prompt: 9_007_199_255, cachedPrompt: 0, completion: 1 }, usage: { promptTokens: 1_000_000, cachedPromptTokens: 0, completionTokens: 1 } },
    ];
    for (const { pricing: prices, usage } of cases) {
      const wire = { prompt: prices.prompt, cached_prompt: prices.cachedPrompt, completion: prices.completion };
      const shown = consoleCostOf(wire, { prompt_tokens: usage.promptTokens, completion_tokens: usage.completionTokens, cached_tokens: usage.cachedPromptTokens });
      assert.equal(shown, costOf(prices, usage), JSON.stringify({ prices, usage }));
    }
    assert.equal(costOf(cases[2]!.pricing, cases[2]!.usage), 9_007_199_256);
  });
});
