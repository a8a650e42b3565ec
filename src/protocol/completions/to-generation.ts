/**
 * Text completions → the generation request: the prompts as sent (no chat template), `n` choices
 * each, fill-in-the-middle when `suffix` is given. Linear in the body; nothing is tokenized here.
 */
import type { CompletionPrompt, GenerationRequest } from "../generation.ts";
import { UnsupportedParameterError } from "../errors.ts";
import { toSampling } from "../chat-completions/to-generation.ts";
import { DEFAULT_COMPLETION_MAX_TOKENS, type CompletionRequest } from "./request.ts";

/** The vendor sampling fields a text completion may carry (no chat template, so none of the template's). */
export const COMPLETION_VENDOR_FIELDS = ["top_k", "min_p", "repetition_penalty"] as const;

/** The prompts of a validated `prompt`: one string, strings, one token array, or token arrays. */
export function promptsOf(prompt: CompletionRequest["prompt"]): CompletionPrompt[] {
  if (typeof prompt === "string") return [{ text: prompt }];
  if (prompt.length > 0 && typeof prompt[0] === "number") return [{ tokens: prompt as number[] }];
  return (prompt as Array<string | number[]>).map((each) => (typeof each === "string" ? { text: each } : { tokens: each }));
}

/** Fields the schema accepts that this release answers with a clear 400. */
export function rejectUnsupportedCompletion(request: CompletionRequest): void {
  const n = request.n ?? 1;
  if (request.best_of != null && request.best_of !== n) {
    throw new UnsupportedParameterError(
      `'best_of' must equal 'n' (${n}) here: Turnpike does not generate extra candidates to choose the best from. Leave 'best_of' out, or set it to 'n'.`,
      "best_of",
    );
  }
}

/** The vendor fields the request sets, as sent; undefined when none. */
export function completionVendorFields(request: CompletionRequest): Record<string, unknown> | undefined {
  let vendor: Record<string, unknown> | undefined;
  for (const field of COMPLETION_VENDOR_FIELDS) {
    const value = request[field];
    if (value != null) (vendor ??= {})[field] = value;
  }
  return vendor;
}

/** The engine request for a validated text completion request. */
export function toCompletionGeneration(request: CompletionRequest): GenerationRequest {
  const prompts = promptsOf(request.prompt);
  const n = request.n ?? 1;
  const vendor = completionVendorFields(request);
  return {
    messages: [],
    completion: {
      prompts,
      n,
      ...(request.suffix != null ? { suffix: request.suffix } : {}),
      ...(request.echo === true ? { echo: true } : {}),
    },
    sampling: toSampling(request),
    maxTokens: request.max_tokens ?? DEFAULT_COMPLETION_MAX_TOKENS,
    choices: prompts.length * n,
    logprobs: request.logprobs == null ? undefined : { top: request.logprobs },
    ...(vendor !== undefined ? { vendor } : {}),
  };
}
