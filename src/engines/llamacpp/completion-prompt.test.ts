/**
 * The token layout of text completion prompts on the real FIM test model (stories260K with
 * `<|fim_prefix|>` 512, `<|fim_suffix|>` 513, `<|fim_middle|>` 514): a plain prompt is BOS + the
 * text with special tokens parsed; a FIM prompt is BOS, FIM_PRE, the prefix as plain text (its
 * last 1,536 tokens), FIM_SUF, the suffix (its first 510), FIM_MID, as llama-server's `/infill`.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { getLlama, type LlamaModel, type Token } from "node-llama-cpp";
import { ApiError } from "../../protocol/errors.ts";
import { FIM_TOKEN_IDS, fimModelPath } from "../../../test/helpers/test-models.ts";
import { FIM_PREFIX_TOKENS, FIM_SUFFIX_TOKENS, fimTokens, renderCompletionPrompts } from "./completion-prompt.ts";

let model: LlamaModel;
const VOCABULARY = 515;

before(async () => {
  const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, maxThreads: 1 });
  model = await llama.loadModel({ modelPath: fimModelPath() });
});
after(async () => {
  await model?.dispose();
});

describe("text completion prompts", () => {
  it("finds the model's three FIM tokens", () => {
    assert.deepEqual(fimTokens(model), FIM_TOKEN_IDS);
  });

  it("lays out a plain prompt as llama-server's /v1/completions: BOS, the text, special tokens parsed", () => {
    const [rendered] = renderCompletionPrompts(model, { prompts: [{ text: "Once upon a time<|fim_middle|>" }], n: 1 }, VOCABULARY);
    assert.deepEqual(rendered!.tokens, [model.tokens.bos, ...model.tokenize("Once upon a time", true), FIM_TOKEN_IDS.middle]);
    const [tokens] = renderCompletionPrompts(model, { prompts: [{ tokens: [5, 6, 7] }], n: 1, echo: true }, VOCABULARY);
    assert.deepEqual(tokens!.tokens, [5, 6, 7], "a token prompt as it is");
  });

  it("lays out fill-in-the-middle as llama-server's /infill: BOS FIM_PRE prefix FIM_SUF suffix FIM_MID, special text not parsed", () => {
    const [rendered] = renderCompletionPrompts(model, { prompts: [{ text: "Once <|fim_suffix|>" }], n: 1, suffix: " the end." }, VOCABULARY);
    const prefix = model.tokenize("Once <|fim_suffix|>", false);
    assert.ok(!prefix.includes(FIM_TOKEN_IDS.suffix as Token), "written in the prefix, the token's text stays text");
    assert.deepEqual(rendered!.tokens, [model.tokens.bos, FIM_TOKEN_IDS.prefix, ...prefix, FIM_TOKEN_IDS.suffix, ...model.tokenize(" the end.", false), FIM_TOKEN_IDS.middle]);
  });

  it("keeps the prefix's last 1,536 tokens and the suffix's first 510, as llama-server's default batch does", () => {
    const long = Array.from({ length: 400 }, (_, index) => `word${index} and more`).join(" ");
    const tokens = model.tokenize(long, false);
    assert.ok(tokens.length > FIM_PREFIX_TOKENS, `${tokens.length} tokens`);
    const [rendered] = renderCompletionPrompts(model, { prompts: [{ text: long }], n: 1, suffix: long }, VOCABULARY);
    assert.deepEqual(rendered!.tokens, [
      model.tokens.bos,
      FIM_TOKEN_IDS.prefix,
      ...tokens.slice(tokens.length - FIM_PREFIX_TOKENS),
      FIM_TOKEN_IDS.suffix,
      ...tokens.slice(0, FIM_SUFFIX_TOKENS),
      FIM_TOKEN_IDS.middle,
    ]);
    assert.equal(FIM_PREFIX_TOKENS, 1536);
    assert.equal(FIM_SUFFIX_TOKENS, 510);
  });

  it("echoes a token prompt's text without its BOS, and refuses an id outside the vocabulary naming its prompt", () => {
    const ids = [model.tokens.bos!, ...model.tokenize("Once upon a time", true)];
    const [rendered] = renderCompletionPrompts(model, { prompts: [{ tokens: ids }], n: 1, echo: true }, VOCABULARY);
    assert.equal(rendered!.echo, "Once upon a time");
    assert.throws(
      () => renderCompletionPrompts(model, { prompts: [{ text: "a" }, { tokens: [1, 515] }], n: 1 }, VOCABULARY),
      (error: unknown) => error instanceof ApiError && error.param === "prompt[1]" && /515/.test(error.message),
    );
  });
});
