import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { creditsToMoney, creditValueSchema, moneyPrices } from "./credit-value.ts";

const oneDollar = { currency: "usd", per_million_credits: "1" };

describe("creditsToMoney", () => {
  it("converts exactly, as a decimal string without trailing zeros", () => {
    assert.equal(creditsToMoney(1_000_000, oneDollar), "1");
    assert.equal(creditsToMoney(125, oneDollar), "0.000125");
    assert.equal(creditsToMoney(0, oneDollar), "0");
    assert.equal(creditsToMoney(2_500_000, oneDollar), "2.5");
    assert.equal(creditsToMoney(-300, oneDollar), "-0.0003");
  });

  it("has no floating-point drift where floats would (0.1 + 0.2)", () => {
    const tenCents = { currency: "usd", per_million_credits: "0.1" };
    assert.equal(creditsToMoney(3_000_000, tenCents), "0.3");
    assert.equal(creditsToMoney(7, { currency: "usd", per_million_credits: "0.3" }), "0.0000021");
  });

  it("stays exact far past 2^53", () => {
    assert.equal(creditsToMoney(10n ** 15n, { currency: "usd", per_million_credits: "0.000001" }), "1000");
    assert.equal(creditsToMoney(9_007_199_254_740_993n, oneDollar), "9007199254.740993");
  });

  it("converts a model's prices per million tokens", () => {
    assert.deepEqual(moneyPrices({ prompt: 100, cached_prompt: 25, completion: 300 }, { currency: "usd", per_million_credits: "2" }), {
      prompt: "0.0002",
      cached_prompt: "0.00005",
      completion: "0.0006",
    });
  });
});

describe("creditValueSchema", () => {
  it("reads usd:1, the object form and null", () => {
    assert.deepEqual(creditValueSchema.parse("usd:1"), oneDollar);
    assert.deepEqual(creditValueSchema.parse({ currency: "USD", per_million_credits: 1.5 }), { currency: "usd", per_million_credits: "1.5" });
    assert.equal(creditValueSchema.parse(""), null);
    assert.equal(creditValueSchema.parse(null), null);
  });
});
