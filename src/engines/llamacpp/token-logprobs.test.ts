/**
 * Token log probabilities: the floor for impossible tokens, token bytes read from the real
 * Llama-2 vocabulary (byte-fallback tokens are one raw byte), and handing tokens out with the
 * text delta that carries them.
 */
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { getLlama, type LlamaModel, type Token } from "node-llama-cpp";
import { modelsDir } from "../../../test/helpers/server.ts";
import { choiceSeed } from "./generate-choice.ts";
import { ChoiceLogprobs, MIN_LOGPROB, toLogprob, tokenDescriber } from "./token-logprobs.ts";

let model: LlamaModel;
before(async () => {
  const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, maxThreads: 1 });
  model = await llama.loadModel({ modelPath: path.join(modelsDir, "llama-2-tiny-random.gguf") });
});
after(async () => {
  await model?.dispose();
});

const describeWith = () =>
  tokenDescriber(
    (tokens, lastTokens) => model.detokenize(tokens as Token[], false, lastTokens as Token[]),
    model.fileInfo.metadata.tokenizer.ggml.tokens,
  );

describe("toLogprob", () => {
  it("is the natural log, floored at -9999 for impossible tokens", () => {
    assert.equal(toLogprob(1), 0);
    assert.ok(Math.abs(toLogprob(0.5) - Math.log(0.5)) < 1e-12);
    assert.equal(toLogprob(0), MIN_LOGPROB);
    assert.equal(toLogprob(1e-300 * 1e-300), MIN_LOGPROB);
  });
});

describe("tokenDescriber", () => {
  it("gives a byte-fallback token its one raw byte", () => {
    const describe = describeWith();
    // '<0xE8>' is id 3 + 0xE8 in the Llama-2 vocabulary.
    assert.deepEqual(describe(3 + 0xe8, []).bytes, [0xe8]);
  });

  it("gives a word token the UTF-8 of its text, leading space included after other tokens", () => {
    const describe = describeWith();
    const [hello, world] = model.tokenize("Hello world");
    const described = describe(world!, [hello!]);
    assert.equal(described.text, " world");
    assert.deepEqual(described.bytes, [...Buffer.from(" world")]);
  });
});

describe("ChoiceLogprobs", () => {
  const fixed = (text: string) => ({ text, bytes: [...Buffer.from(text)] });
  const texts = ["Once", " upon", " a", " time"];

  it("hands each token out with the delta that carries the start of its text", () => {
    const logprobs = new ChoiceLogprobs((token) => fixed(texts[token]!), 0);
    logprobs.record(0, 0.5, undefined, [], 0);
    logprobs.record(1, 0.25, undefined, [], 4);
    // Only "Once u" was sent (the rest held back, e.g. as a possible stop sequence).
    assert.deepEqual(logprobs.take(6).map((entry) => entry.token), ["Once", " upon"]);
    logprobs.record(2, 1, undefined, [], 9);
    assert.deepEqual(logprobs.take(9), []);
    assert.deepEqual(logprobs.take(11).map((entry) => [entry.token, entry.logprob]), [[" a", 0]]);
    logprobs.record(3, 1, undefined, [], 11);
    assert.deepEqual(logprobs.rest().map((entry) => entry.token), [" time"]);
  });

  it("lists the likeliest alternatives, at most top_logprobs of them", () => {
    const logprobs = new ChoiceLogprobs((token) => fixed(texts[token]!), 2);
    logprobs.record(1, 0.5, new Map([[1, 0.5], [2, 0.3], [3, 0.2]]), [], 0);
    const [entry] = logprobs.rest();
    assert.deepEqual(
      entry!.topLogprobs.map((alternative) => [alternative.token, alternative.logprob]),
      [[" upon", Math.log(0.5)], [" a", Math.log(0.3)]],
    );
  });
});

describe("choiceSeed", () => {
  it("keeps the request's seed for choice 0 and derives distinct, stable seeds for the others", () => {
    assert.equal(choiceSeed(42, 0), 42);
    const seeds = [1, 2, 3, 4, 5, 6, 7].map((choice) => choiceSeed(42, choice));
    assert.equal(new Set([42, ...seeds]).size, 8);
    assert.deepEqual([1, 2, 3, 4, 5, 6, 7].map((choice) => choiceSeed(42, choice)), seeds);
    for (const seed of [...seeds, choiceSeed(-5, 3), choiceSeed(2 ** 40, 1)]) assert.ok(Number.isInteger(seed) && seed >= 0 && seed < 2 ** 32);
  });
});
