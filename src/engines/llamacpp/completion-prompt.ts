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
 *   `--spm-infill` order is not offered). Its repository-level extras (`FIM_REP`/`FIM_SEP` and
 *   `input_extra`) are not: a client sends none through `/v1/completions`.
 */
import type { LlamaModel, Token } from "node-llama-cpp";
import type { CompletionPrompt, TextCompletion } from "../engine.ts";
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

/** A fill-in-the-middle prompt's tokens, as llama-server's `/infill` makes them (see the file's comment). */
function infillTokens(model: LlamaModel, prompt: CompletionPrompt, suffix: string): Token[] {
  const fim = fimTokens(model);
  if (fim === undefined) throw new UnsupportedParameterError("This model has no fill-in-the-middle tokens: 'suffix' cannot be served.", "suffix");
  const prefix = "tokens" in prompt ? ([...prompt.tokens] as Token[]) : model.tokenize(prompt.text, false);
  const after = model.tokenize(suffix, false);
  const tokens: Token[] = [];
  if (model.tokens.shouldPrependBosToken && model.tokens.bos !== null) tokens.push(model.tokens.bos);
  tokens.push(fim.prefix, ...prefix.slice(Math.max(0, prefix.length - FIM_PREFIX_TOKENS)), fim.suffix, ...after.slice(0, FIM_SUFFIX_TOKENS), fim.middle);
  return tokens;
}

/**
 * Tokenizes each prompt of a text completion (see the file's comment). Throws a 400 naming the
 * prompt for an empty one or a token id outside the vocabulary.
 */
export function renderCompletionPrompts(model: LlamaModel, completion: TextCompletion, vocabularySize: number): RenderedCompletionPrompt[] {
  const several = completion.prompts.length > 1;
  return completion.prompts.map((prompt, index) => {
    const param = several ? `prompt[${index}]` : "prompt";
    if ("tokens" in prompt) checkTokens(prompt.tokens, vocabularySize, param);
    const tokens = completion.suffix === undefined ? plainTokens(model, prompt) : infillTokens(model, prompt, completion.suffix);
    if (tokens.length === 0) throw new InvalidRequestError(`Invalid '${param}': the prompt is empty, and this model adds no token before it; give at least one token of text.`, param);
    return { tokens, stopTokens: new Set<Token>(), stopTexts: [], echo: completion.echo === true ? echoOf(model, prompt) : "" };
  });
}
