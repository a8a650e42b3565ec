/** costOf and worstCaseCost: integer credit units, rounded up; the worst case covers every choice. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { costOf, worstCaseCost } from "./pricing.ts";

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
});
