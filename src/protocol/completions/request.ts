/**
 * The request body of `POST /v1/completions` (OpenAI's legacy text completions), in the OpenAI
 * spec's field order, our vendor sampling fields after. Unknown fields are accepted and dropped.
 * Fields are `nullish` where the official SDKs may send `null` for "not set". Every array the
 * prompt may hold is counted before any of its items is read (the request caps).
 */
import { z } from "zod";
import { crossFieldIssue } from "../parse.ts";
import { REQUEST_LIMITS } from "../chat-completions/request.ts";
import { REQUESTED_SERVICE_TIERS } from "../service-tiers.ts";

/** Caps on a text completion request, besides those it shares with chat (`REQUEST_LIMITS`). */
export const COMPLETION_LIMITS = {
  /** Prompts in one request (an array of strings or of token arrays). */
  prompts: 128,
  /** Token ids in one token prompt, and in all of a request's token prompts together. */
  promptTokens: 1_048_576,
  /** Choices per prompt (`n`, and `best_of`, which must equal it). */
  n: 8,
  /** Choices of the whole request: prompts × `n`. */
  choices: 128,
  /** The most log probabilities per token (OpenAI's legacy cap). */
  logprobs: 5,
} as const;

/** A token id: a non-negative integer (the engine checks it against its vocabulary). */
const tokenId = z.number().int().min(0);

/**
 * Counts the prompt's arrays before zod reads their items: too many prompts or token ids are
 * refused after one pass over the lengths, never after validating a million items.
 */
function checkPromptSize(prompt: unknown): string | undefined {
  if (!Array.isArray(prompt)) return undefined;
  const nested = prompt.length > 0 && prompt.every((item) => Array.isArray(item));
  if (nested || (prompt.length > 0 && typeof prompt[0] === "string")) {
    if (prompt.length > COMPLETION_LIMITS.prompts) return `must hold at most ${COMPLETION_LIMITS.prompts} prompts, got ${prompt.length}.`;
  }
  if (!nested) return prompt.length > COMPLETION_LIMITS.promptTokens ? `must hold at most ${COMPLETION_LIMITS.promptTokens} token ids.` : undefined;
  let total = 0;
  for (const item of prompt as unknown[][]) total += item.length;
  return total > COMPLETION_LIMITS.promptTokens ? `must hold at most ${COMPLETION_LIMITS.promptTokens} token ids in all, got ${total}.` : undefined;
}

const promptShapes = z.union([z.string(), z.array(tokenId).min(1), z.array(z.string()).min(1), z.array(z.array(tokenId).min(1)).min(1)], {
  error: "Expected a string, an array of strings, an array of token ids or an array of token-id arrays (none empty).",
});

/** `prompt`: a string, strings, token ids, or arrays of token ids; its size checked first. */
const prompt = z
  .custom<unknown>((input) => typeof input === "string" || Array.isArray(input), {
    error: "Expected a string, an array of strings, an array of token ids or an array of token-id arrays.",
  })
  .check((context) => {
    const problem = checkPromptSize(context.value);
    if (problem !== undefined) context.issues.push({ code: "custom", message: problem, input: undefined });
  })
  .pipe(promptShapes)
  .describe("A string, an array of strings (one prompt each), an array of token ids, or an array of token-id arrays (one prompt each). None may be empty.");

const probability = (min: number, max: number) => z.number().min(min).max(max).nullish();

/** `logit_bias`: token id (a decimal string) → bias, its keys counted first (as chat's). */
const logitBias = z
  .custom<Record<string, unknown>>((input) => input !== null && typeof input === "object" && !Array.isArray(input), { error: "Expected an object." })
  .check((context) => {
    if (Object.keys(context.value).length > REQUEST_LIMITS.logitBias) context.issues.push({ code: "custom", message: `must have at most ${REQUEST_LIMITS.logitBias} entries.`, input: context.value });
  })
  .pipe(z.record(z.string(), z.number()));

const stop = z.union([z.string().max(REQUEST_LIMITS.stopLength), z.array(z.string().max(REQUEST_LIMITS.stopLength)).max(REQUEST_LIMITS.stopSequences)], {
  error: `Expected a string or an array of up to ${REQUEST_LIMITS.stopSequences} strings, each of at most ${REQUEST_LIMITS.stopLength} characters.`,
});

export const completionRequestShape = {
  model: z.string().min(1).max(REQUEST_LIMITS.name),
  prompt,
  /** Must equal `n` (Turnpike generates no extra candidates to pick from). */
  best_of: z.number().int().min(1).max(COMPLETION_LIMITS.n).nullish(),
  /** The prompt's text comes back before each choice's completion. */
  echo: z.boolean().nullish(),
  frequency_penalty: probability(-2, 2),
  /** Token id (a decimal string) → bias added to its logit, -100..100 (-100 bans the token). */
  logit_bias: logitBias.nullish(),
  /** Log probabilities of each generated token and of this many likeliest alternatives (0..5): the legacy shape. */
  logprobs: z.number().int().min(0).max(COMPLETION_LIMITS.logprobs).nullish(),
  /** Completion tokens per choice; OpenAI's default is 16. 0 only with `echo`: the prompt alone (scored, with `logprobs`). */
  max_tokens: z.number().int().min(0).max(REQUEST_LIMITS.completionTokens).nullish(),
  /** Choices per prompt, each billed. */
  n: z.number().int().min(1).max(COMPLETION_LIMITS.n).nullish(),
  presence_penalty: probability(-2, 2),
  seed: z.number().int().nullish(),
  /** The band it queues in when the engines are saturated, billed at the plan's multiplier: `auto` (the default tier), `default`, `flex` or `priority`. */
  service_tier: z.enum(REQUESTED_SERVICE_TIERS).nullish(),
  stop: stop.nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().nullish() }).nullish(),
  /** Fill-in-the-middle: the text after the completion (the prompt is the text before). Only for a model with FIM tokens. */
  suffix: z.string().nullish(),
  temperature: probability(0, 2),
  top_p: probability(0, 1),
  user: z.string().nullish(),
  // Vendor sampling fields: passed as sent to upstream engines whose model entry allows them (a 400 elsewhere).
  /** Sample from the k likeliest tokens (-1 or 0: all). */
  top_k: z.number().int().min(-1).max(1_000_000).nullish(),
  /** Drop tokens less likely than this fraction of the likeliest. */
  min_p: z.number().min(0).max(1).nullish(),
  /** Penalty on repeated tokens (1: none). */
  repetition_penalty: z.number().gt(0).max(10).nullish(),
};

/** OpenAI's default `max_tokens` for a text completion. */
export const DEFAULT_COMPLETION_MAX_TOKENS = 16;

/** How many prompts a validated `prompt` holds. */
export function promptCount(value: CompletionRequest["prompt"]): number {
  if (typeof value === "string") return 1;
  return typeof value[0] === "number" ? 1 : value.length;
}

/** The rules between fields, in the schema so that they also run in the body worker. */
export const completionRequestSchema = z.object(completionRequestShape).check((context) => {
  const request = context.value;
  const fail = (path: PropertyKey[], message: string, input: unknown): void => {
    context.issues.push(crossFieldIssue(path, message, input));
  };
  const n = request.n ?? 1;
  const choices = promptCount(request.prompt) * n;
  if (choices > COMPLETION_LIMITS.choices) return fail(["n"], `The prompts × 'n' must be at most ${COMPLETION_LIMITS.choices} choices, got ${choices}.`, request.n);
  const each = request.max_tokens ?? DEFAULT_COMPLETION_MAX_TOKENS;
  if (choices * each > REQUEST_LIMITS.completionTokens) {
    return fail(["max_tokens"], `The prompts × 'n' × 'max_tokens' must be at most ${REQUEST_LIMITS.completionTokens} tokens, got ${choices} × ${each}.`, request.max_tokens);
  }
  if (request.max_tokens === 0 && request.echo !== true) {
    return fail(["max_tokens"], "'max_tokens' may be 0 only with 'echo': the prompt alone comes back (with 'logprobs', its tokens' log probabilities).", request.max_tokens);
  }
  if (request.stream_options != null && request.stream !== true) return fail(["stream_options"], "'stream_options' is only allowed when 'stream' is true.", request.stream_options);
});

export type CompletionRequest = z.infer<typeof completionRequestSchema>;
