import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { CatalogModel } from "../../catalog/catalog.ts";
import type { Engine, GenerationRequest } from "../../engines/engine.ts";
import { cheapBound, likelyPromptTokens, notePromptCount } from "./cheap-bound.ts";

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

  it("is guessed only where prepare counts the prompt itself and max_tokens is given", () => {
    const request = { messages: [{ role: "user", content: "Hello there" }], maxTokens: 10, choices: 1 } as unknown as GenerationRequest;
    const engineWith = (chargedPrompt?: () => number) =>
      ({ boundPrompt: () => bound(3, 1_100), info: () => ({ contextLength: 2048 }), ...(chargedPrompt === undefined ? {} : { chargedPrompt }) }) as unknown as Engine;
    const counting = engineWith();
    notePromptCount(counting, bound(3, 1_100), 13);
    const guessed = cheapBound({ request, model: { engine: counting } as unknown as CatalogModel });
    assert.deepEqual([guessed.tokens, guessed.likelyTokens, guessed.guessed], [13, 3 + 13 + 10, true]);
    // An upstream's charge is the bound's upper end, exact at once: nothing to guess.
    const charged = cheapBound({ request, model: { engine: engineWith(() => 1_100) } as unknown as CatalogModel });
    assert.deepEqual([charged.tokens, charged.likelyTokens, charged.guessed], [1_110, 1_110, false]);
    // Without max_tokens the charge is the context's room already.
    const open = cheapBound({ request: { ...request, maxTokens: undefined }, model: { engine: counting } as unknown as CatalogModel });
    assert.equal(open.guessed, false);
    assert.equal(open.likelyTokens, open.tokens);
  });
});
