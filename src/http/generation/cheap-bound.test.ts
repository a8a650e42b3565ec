import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { likelyPromptTokens, notePromptCount } from "./cheap-bound.ts";

const bound = (atLeast: number, atMost: number) => ({ atLeast, atMost, bytes: atLeast * 4, verbatimBytes: atLeast * 4 });

describe("likelyPromptTokens", () => {
  it("guesses the lower bound for an engine that counted nothing yet", () => {
    assert.equal(likelyPromptTokens({}, bound(10, 1_000)), 10);
  });

  it("adds a quarter more than the largest gap of the engine's recent prompts, within the upper bound", () => {
    const engine = {};
    notePromptCount(engine, bound(3, 1_000), 13);
    notePromptCount(engine, bound(50, 2_000), 58);
    assert.equal(likelyPromptTokens(engine, bound(20, 1_000)), 20 + Math.ceil(10 * 1.25));
    assert.equal(likelyPromptTokens(engine, bound(20, 25)), 25, "never above the upper bound");
    assert.equal(likelyPromptTokens({}, bound(20, 1_000)), 20, "each engine learns its own");
  });

  it("forgets a gap once sixteen later prompts were counted", () => {
    const engine = {};
    notePromptCount(engine, bound(10, 10_000), 2_010);
    for (let count = 0; count < 15; count++) notePromptCount(engine, bound(10, 10_000), 14);
    assert.equal(likelyPromptTokens(engine, bound(10, 10_000)), 10 + 2_500, "still among the last sixteen");
    notePromptCount(engine, bound(10, 10_000), 14);
    assert.equal(likelyPromptTokens(engine, bound(10, 10_000)), 10 + 5);
    notePromptCount(engine, bound(10, 10_000), 5);
    assert.equal(likelyPromptTokens(engine, bound(10, 10_000)), 10 + 5, "a prompt below its bound's guess counts as no gap");
  });
});
