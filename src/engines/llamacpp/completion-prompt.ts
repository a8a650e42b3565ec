/**
 * A text completion's prompts as tokens, the way llama-server builds them, so that the same GGUF
 * answers the same at temperature 0 here and there:
 *
 * - a plain prompt (llama-server's `/v1/completions`): the text tokenized with special tokens
 *   parsed (`<|fim_prefix|>` written in the text is that token), a BOS before it where the model
 *   adds one (`tokenizer.ggml.add_bos_token`) and an EOS after it where the model adds one; a
 *   token prompt is taken as it is, nothing added;
 * - fill-in-the-middle (llama-server's `/infill` with `input_prefix` = the prompt, `input_suffix`
 *   = the suffix and no `prompt`): prefix and suffix tokenized as plain text (special tokens not
 *   parsed), the prefix cut to its last `FIM_PREFIX_TOKENS`, the suffix to its first
 *   `FIM_SUFFIX_TOKENS` (llama-server's 3:1 split of its default 2048-token batch), then
 *   `[BOS] FIM_PRE prefix FIM_SUF suffix FIM_MID` (its default prefix-suffix-middle order; its
 *   `--spm-infill` order is not offered);
 * - its repository-level context (`format_prompt_infill`): before the layout, where the model
 *   has a repository token (`FIM_REP`, `<|fim_repo|>` …) `FIM_REP myproject\n`, then each extra
 *   file (`/infill`'s `input_extra`) as `FIM_SEP filename\n text` where the model has a file
 *   separator token (`<|file_sep|>`), else as `\n\n--- snippet ---\n\n text`, then (with a file
 *   separator) `FIM_SEP filename\n` for the file being edited; only the last
 *   `context - LLAMA_SERVER_BATCH + 2` of those tokens are kept (llama-server's room left beside a
 *   batch, with its default unlimited `--n-predict`). `/infill`'s `prompt` (the middle's start,
 *   special tokens parsed) goes after the prefix, and the suffix keeps that many fewer tokens.
 *   `/v1/completions` sends no extra files and no middle, so it gets the repository tokens alone.
 */
import type { LlamaModel, Token } from "node-llama-cpp";
import type { CompletionPrompt, TextCompletion } from "../engine.ts";
import type { InfillChunk } from "../../protocol/generation.ts";
import { InvalidRequestError, UnsupportedParameterError } from "../../protocol/errors.ts";
import type { RenderedPrompt } from "./chat-prompt.ts";

/** llama-server's default `--batch-size`, from which `/infill` sizes its prefix and suffix. */
const LLAMA_SERVER_BATCH = 2048;
/** Prefix tokens a fill-in-the-middle prompt keeps (its last ones): three quarters of the batch. */
export const FIM_PREFIX_TOKENS = 3 * Math.floor(LLAMA_SERVER_BATCH / 4);
/** Suffix tokens it keeps (its first ones): a quarter of the batch, less the FIM_PRE and FIM_SUF tokens. */
export const FIM_SUFFIX_TOKENS = Math.floor(LLAMA_SERVER_BATCH / 4) - 2;

/** A completion prompt ready to run: its tokens, and the text an `echo` gives back. */
export type RenderedCompletionPrompt = RenderedPrompt & { echo: string };

/** The model's fill-in-the-middle tokens, or undefined when it lacks any of the three. */
export function fimTokens(model: LlamaModel): { prefix: Token; suffix: Token; middle: Token } | undefined {
  const { prefix, suffix, middle } = model.tokens.infill;
  if (prefix === null || suffix === null || middle === null) return undefined;
  return { prefix, suffix, middle };
}

/** Refuses a token id outside the vocabulary, naming the prompt it is in. */
function checkTokens(tokens: readonly number[], vocabularySize: number, param: string): void {
  for (const token of tokens) {
    if (!Number.isInteger(token) || token < 0 || token >= vocabularySize) {
      throw new InvalidRequestError(`Invalid '${param}': token id ${token} is not in this model's vocabulary (ids 0 to ${vocabularySize - 1}).`, param);
    }
  }
}

/**
 * The text of a prompt, for `echo`: a token prompt's detokenized without its special tokens, a
 * leading BOS left out first (so that a SentencePiece first word loses the space the tokenizer
 * added before it, as the text it came from had none).
 */
function echoOf(model: LlamaModel, prompt: CompletionPrompt): string {
  if ("text" in prompt) return prompt.text;
  const bos = model.tokens.bos;
  const tokens = bos !== null && prompt.tokens[0] === bos ? prompt.tokens.slice(1) : prompt.tokens;
  return model.detokenize(tokens as Token[], false);
}

/** A plain prompt's tokens, as llama-server's `/v1/completions` makes them. */
function plainTokens(model: LlamaModel, prompt: CompletionPrompt): Token[] {
  if ("tokens" in prompt) return [...prompt.tokens] as Token[];
  const tokens = model.tokenize(prompt.text, true);
  const { bos, eos } = model.tokens;
  if (model.tokens.shouldPrependBosToken && bos !== null) tokens.unshift(bos);
  if (model.tokens.shouldAppendEosToken && eos !== null) tokens.push(eos);
  return tokens;
}

/** The repository-level FIM tokens (llama.cpp's `FIM_REP` and `FIM_SEP`), either null when the model lacks it. */
export type RepositoryTokens = { repository: Token | null; fileSeparator: Token | null };

/** The spellings llama.cpp recognises as the repository and file separator tokens when the metadata names none. */
const REPOSITORY_SPELLINGS = ["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FILE_SEPARATOR_SPELLINGS = ["<|file_sep|>"];

const repositoryTokensOf = new WeakMap<LlamaModel, RepositoryTokens>();

/** The vocabulary's one token spelled `text` (a special token), or null. */
function specialToken(model: LlamaModel, text: string): Token | null {
  const tokens = model.tokenize(text, true);
  if (tokens.length !== 1) return null;
  return model.detokenize(tokens, true) === text ? tokens[0]! : null;
}

/** The metadata's token id for `key` (`tokenizer.ggml.fim_rep_token_id`), when it names one. */
function metadataToken(model: LlamaModel, key: "fim_rep_token_id" | "fim_sep_token_id"): Token | null {
  const tokenizer = (model.fileInfo.metadata as { tokenizer?: { ggml?: Record<string, unknown> } }).tokenizer?.ggml;
  const value = tokenizer?.[key];
  return typeof value === "number" && Number.isInteger(value) && value >= 0 ? (value as Token) : null;
}

/** The model's repository-level FIM tokens, found as llama.cpp finds them (the metadata, else the known spellings). */
export function repositoryTokens(model: LlamaModel): RepositoryTokens {
  let found = repositoryTokensOf.get(model);
  if (found === undefined) {
    const first = (spellings: string[]) => spellings.map((text) => specialToken(model, text)).find((token) => token !== null) ?? null;
    found = {
      repository: metadataToken(model, "fim_rep_token_id") ?? first(REPOSITORY_SPELLINGS),
      fileSeparator: metadataToken(model, "fim_sep_token_id") ?? first(FILE_SEPARATOR_SPELLINGS),
    };
    repositoryTokensOf.set(model, found);
  }
  return found;
}

/** llama-server's separator before an extra file where the model has no file separator token. */
const SNIPPET_SEPARATOR = "\n\n--- snippet ---\n\n";

/** The repository-level context before the FIM layout, whole (see the file's comment). */
function extraTokens(model: LlamaModel, extra: readonly InfillChunk[]): Token[] {
  const { repository, fileSeparator } = repositoryTokens(model);
  const tokens: Token[] = [];
  if (repository !== null) tokens.push(repository, ...model.tokenize("myproject\n", false));
  for (const chunk of extra) {
    if (fileSeparator !== null) tokens.push(fileSeparator, ...model.tokenize(`${chunk.filename}\n`, false));
    else tokens.push(...model.tokenize(SNIPPET_SEPARATOR, false));
    tokens.push(...model.tokenize(chunk.text, false));
  }
  if (fileSeparator !== null) tokens.push(fileSeparator, ...model.tokenize("filename\n", false));
  return tokens;
}

/** A fill-in-the-middle prompt's tokens, as llama-server's `/infill` makes them (see the file's comment). */
function infillTokens(model: LlamaModel, prompt: CompletionPrompt, completion: TextCompletion, contextSize: number): Token[] {
  const fim = fimTokens(model);
  if (fim === undefined) throw new UnsupportedParameterError("This model has no fill-in-the-middle tokens: 'suffix' cannot be served.", "suffix");
  const prefix = "tokens" in prompt ? ([...prompt.tokens] as Token[]) : model.tokenize(prompt.text, false);
  const after = model.tokenize(completion.suffix ?? "", false);
  const middle = completion.middle === undefined || completion.middle === "" ? [] : model.tokenize(completion.middle, true);
  const extra = extraTokens(model, completion.extra ?? []);
  const suffixTake = Math.max(0, FIM_SUFFIX_TOKENS - middle.length);
  const extraTake = Math.min(Math.max(0, contextSize - LLAMA_SERVER_BATCH + 2), extra.length);
  const tokens: Token[] = extra.slice(extra.length - extraTake);
  if (model.tokens.shouldPrependBosToken && model.tokens.bos !== null) tokens.push(model.tokens.bos);
  tokens.push(fim.prefix, ...prefix.slice(Math.max(0, prefix.length - FIM_PREFIX_TOKENS)), ...middle, fim.suffix, ...after.slice(0, suffixTake), fim.middle);
  return tokens;
}

/**
 * Tokenizes each prompt of a text completion (see the file's comment; `contextSize`: one
 * sequence's, which bounds the repository-level context). Throws a 400 naming the
 * prompt for an empty one or a token id outside the vocabulary.
 */
export function renderCompletionPrompts(model: LlamaModel, completion: TextCompletion, vocabularySize: number, contextSize: number): RenderedCompletionPrompt[] {
  const several = completion.prompts.length > 1;
  return completion.prompts.map((prompt, index) => {
    const param = several ? `prompt[${index}]` : "prompt";
    if ("tokens" in prompt) checkTokens(prompt.tokens, vocabularySize, param);
    const tokens = completion.suffix === undefined ? plainTokens(model, prompt) : infillTokens(model, prompt, completion, contextSize);
    if (tokens.length === 0) throw new InvalidRequestError(`Invalid '${param}': the prompt is empty, and this model adds no token before it; give at least one token of text.`, param);
    return { tokens, stopTokens: new Set<Token>(), stopTexts: [], echo: completion.echo === true ? echoOf(model, prompt) : "" };
  });
}
