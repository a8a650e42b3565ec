/**
 * The response bodies of `POST /v1/completions`: the `text_completion` object and its streamed
 * chunks (the same object, a piece of each choice's text at a time), with OpenAI's legacy
 * log probabilities. Objects are open on the wire: clients ignore fields they do not know.
 */
import { z } from "zod";
import { usageSchema } from "../chat-completions/response.ts";

export const completionFinishReasonSchema = z.enum(["stop", "length", "content_filter"]);
export type CompletionFinishReason = z.infer<typeof completionFinishReasonSchema>;

/**
 * The legacy log probabilities of one choice: per token its text, its log probability, the
 * likeliest alternatives as `{token: logprob}` (the sampled token among them, so up to
 * `logprobs` + 1 entries) and where its text starts in the choice's `text` (characters).
 */
export const legacyLogprobsSchema = z.object({
  tokens: z.array(z.string()),
  token_logprobs: z.array(z.number().nullable()),
  top_logprobs: z.array(z.record(z.string(), z.number()).nullable()),
  text_offset: z.array(z.number().int()),
});
export type LegacyLogprobs = z.infer<typeof legacyLogprobsSchema>;

const choiceSchema = z.object({
  text: z.string(),
  index: z.number().int().describe("prompt × n + the choice's number within its prompt: each prompt's `n` choices together, in the prompts' order."),
  logprobs: legacyLogprobsSchema.nullable(),
  finish_reason: completionFinishReasonSchema,
});

export const completionSchema = z.object({
  id: z.string(),
  object: z.literal("text_completion"),
  /** Seconds since the epoch. */
  created: z.number().int(),
  model: z.string(),
  system_fingerprint: z.string().nullable(),
  choices: z.array(choiceSchema),
  usage: usageSchema,
});
export type Completion = z.infer<typeof completionSchema>;

/** The `data` of each `text/event-stream` event of a streamed completion (before the closing `[DONE]`). */
export const completionChunkSchema = z.object({
  id: z.string(),
  object: z.literal("text_completion"),
  created: z.number().int(),
  model: z.string(),
  system_fingerprint: z.string().nullable(),
  /** Empty in the last chunk, the one carrying `usage`. */
  choices: z.array(choiceSchema.extend({ finish_reason: completionFinishReasonSchema.nullable() })),
  usage: usageSchema.nullable().optional().describe("With `stream_options.include_usage`: null on every chunk but the last, which carries it."),
});
export type CompletionChunk = z.infer<typeof completionChunkSchema>;
