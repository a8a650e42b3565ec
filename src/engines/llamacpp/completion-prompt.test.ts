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
import { FIM_REPOSITORY_TOKEN_IDS, FIM_TOKEN_IDS, fimModelPath, fimRepositoryModelPath } from "../../../test/helpers/test-models.ts";
import { FIM_PREFIX_TOKENS, FIM_SUFFIX_TOKENS, fimTokens, renderCompletionPrompts, repositoryTokens } from "./completion-prompt.ts";

let model: LlamaModel;
let repositoryModel: LlamaModel;
const VOCABULARY = 515;

before(async () => {
  const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, maxThreads: 1 });
  model = await llama.loadModel({ modelPath: fimModelPath() });
  repositoryModel = await llama.loadModel({ modelPath: fimRepositoryModelPath() });
});
after(async () => {
  await model?.dispose();
  await repositoryModel?.dispose();
});

describe("text completion prompts", () => {
  it("finds the model's three FIM tokens", () => {
    assert.deepEqual(fimTokens(model), FIM_TOKEN_IDS);
  });

  it("lays out a plain prompt as llama-server's /v1/completions: BOS, the text, special tokens parsed", () => {
    const [rendered] = renderCompletionPrompts(model, { prompts: [{ text: "Once upon a time<|fim_middle|>" }], n: 1 }, VOCABULARY, 2048);
    assert.deepEqual(rendered!.tokens, [model.tokens.bos, ...model.tokenize("Once upon a time", true), FIM_TOKEN_IDS.middle]);
    const [tokens] = renderCompletionPrompts(model, { prompts: [{ tokens: [5, 6, 7] }], n: 1, echo: true }, VOCABULARY, 2048);
    assert.deepEqual(tokens!.tokens, [5, 6, 7], "a token prompt as it is");
  });

  it("lays out fill-in-the-middle as llama-server's /infill: BOS FIM_PRE prefix FIM_SUF suffix FIM_MID, special text not parsed", () => {
    const [rendered] = renderCompletionPrompts(model, { prompts: [{ text: "Once <|fim_suffix|>" }], n: 1, suffix: " the end." }, VOCABULARY, 2048);
    const prefix = model.tokenize("Once <|fim_suffix|>", false);
    assert.ok(!prefix.includes(FIM_TOKEN_IDS.suffix as Token), "written in the prefix, the token's text stays text");
    assert.deepEqual(rendered!.tokens, [model.tokens.bos, FIM_TOKEN_IDS.prefix, ...prefix, FIM_TOKEN_IDS.suffix, ...model.tokenize(" the end.", false), FIM_TOKEN_IDS.middle]);
  });

  it("keeps the prefix's last 1,536 tokens and the suffix's first 510, as llama-server's default batch does", () => {
    const long = Array.from({ length: 400 }, (_, index) => `word${index} and more`).join(" ");
    const tokens = model.tokenize(long, false);
    assert.ok(tokens.length > FIM_PREFIX_TOKENS, `${tokens.length} tokens`);
    const [rendered] = renderCompletionPrompts(model, { prompts: [{ text: long }], n: 1, suffix: long }, VOCABULARY, 2048);
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
    const [rendered] = renderCompletionPrompts(model, { prompts: [{ tokens: ids }], n: 1, echo: true }, VOCABULARY, 2048);
    assert.equal(rendered!.echo, "Once upon a time");
    assert.throws(
      () => renderCompletionPrompts(model, { prompts: [{ text: "a" }, { tokens: [1, 515] }], n: 1 }, VOCABULARY, 2048),
      (error: unknown) => error instanceof ApiError && error.param === "prompt[1]" && /515/.test(error.message),
    );
  });

  it("lays out /infill's extra files as llama-server does without FIM_REP/FIM_SEP: a snippet separator before each, then the prefix, the middle after it", () => {
    assert.deepEqual(repositoryTokens(model), { repository: null, fileSeparator: null });
    const extra = [{ filename: "a.txt", text: "Tom had a ball." }, { filename: "b.txt", text: "Lily had a cat." }];
    const [rendered] = renderCompletionPrompts(model, { prompts: [{ text: "Once" }], n: 1, suffix: " end.", extra, middle: "<|fim_suffix|> upon" }, VOCABULARY, 4096);
    const snippet = model.tokenize("\n\n--- snippet ---\n\n", false);
    // llama-server appends `prompt` (special tokens parsed) to the prefix, before FIM_SUF.
    assert.deepEqual(rendered!.tokens, [
      ...snippet,
      ...model.tokenize("Tom had a ball.", false),
      ...snippet,
      ...model.tokenize("Lily had a cat.", false),
      model.tokens.bos,
      FIM_TOKEN_IDS.prefix,
      ...model.tokenize("Once", false),
      ...model.tokenize("<|fim_suffix|> upon", true),
      FIM_TOKEN_IDS.suffix,
      ...model.tokenize(" end.", false),
      FIM_TOKEN_IDS.middle,
    ]);
    assert.ok(rendered!.tokens.filter((token) => token === FIM_TOKEN_IDS.suffix).length === 2, "the middle's special text is parsed");
  });

  it("keeps only the extra context's last (context - 2048 + 2) tokens, and gives the suffix as many fewer tokens as the middle has", () => {
    const extra = [{ filename: "a.txt", text: "Tom had a ball and a red car." }];
    const whole = [...model.tokenize("\n\n--- snippet ---\n\n", false), ...model.tokenize("Tom had a ball and a red car.", false)];
    const [small] = renderCompletionPrompts(model, { prompts: [{ text: "Once" }], n: 1, suffix: " end.", extra }, VOCABULARY, 2048 + 3);
    assert.deepEqual(small!.tokens.slice(0, 6), [...whole.slice(whole.length - 5), model.tokens.bos], "5 extra tokens kept, then BOS");
    const [none] = renderCompletionPrompts(model, { prompts: [{ text: "Once" }], n: 1, suffix: " end.", extra }, VOCABULARY, 1024);
    assert.equal(none!.tokens[0], model.tokens.bos, "no room beside a batch: no extra context");
    const long = Array.from({ length: 400 }, (_, index) => `word${index} and more`).join(" ");
    const [cut] = renderCompletionPrompts(model, { prompts: [{ text: "Once" }], n: 1, suffix: long, middle: " upon a" }, VOCABULARY, 2048);
    const middle = model.tokenize(" upon a", true);
    const suffixStart = cut!.tokens.indexOf(FIM_TOKEN_IDS.suffix as Token) + 1;
    assert.equal(cut!.tokens.length - 1 - suffixStart, FIM_SUFFIX_TOKENS - middle.length);
  });

  it("lays out the repository-level pattern with FIM_REP and FIM_SEP (metadata id, or found by spelling): the project, each file by name, then the current file", () => {
    const m = repositoryModel;
    assert.deepEqual(repositoryTokens(m), { repository: FIM_REPOSITORY_TOKEN_IDS.repository, fileSeparator: FIM_REPOSITORY_TOKEN_IDS.fileSeparator });
    const [rendered] = renderCompletionPrompts(m, { prompts: [{ text: "Once" }], n: 1, suffix: " end.", extra: [{ filename: "a.txt", text: "Tom had a ball." }] }, 517, 4096);
    assert.deepEqual(rendered!.tokens, [
      FIM_REPOSITORY_TOKEN_IDS.repository,
      ...m.tokenize("myproject\n", false),
      FIM_REPOSITORY_TOKEN_IDS.fileSeparator,
      ...m.tokenize("a.txt\n", false),
      ...m.tokenize("Tom had a ball.", false),
      FIM_REPOSITORY_TOKEN_IDS.fileSeparator,
      ...m.tokenize("filename\n", false),
      m.tokens.bos,
      FIM_TOKEN_IDS.prefix,
      ...m.tokenize("Once", false),
      FIM_TOKEN_IDS.suffix,
      ...m.tokenize(" end.", false),
      FIM_TOKEN_IDS.middle,
    ]);
  });
});
