/**
 * The response bodies of `POST /v1/chat/completions`: the whole completion and the streamed
 * chunk, as zod schemas (the OpenAPI document shows them) and the types the server builds them with.
 * Objects are open on the wire: clients ignore fields they do not know.
 */
import { z } from "zod";
import { SERVICE_TIERS } from "../service-tiers.ts";

export const finishReasonSchema = z.enum(["stop", "length", "tool_calls", "content_filter"]);
export type FinishReason = z.infer<typeof finishReasonSchema>;

export const usageSchema = z.object({
  prompt_tokens: z.number().int(),
  completion_tokens: z.number().int(),
  total_tokens: z.number().int(),
  prompt_tokens_details: z.object({ cached_tokens: z.number().int() }),
  completion_tokens_details: z.object({ reasoning_tokens: z.number().int() }),
});
export type Usage = z.infer<typeof usageSchema>;

/** A tool call in a whole completion: `arguments` is JSON text. */
export const toolCallObjectSchema = z.object({
  id: z.string(),
  type: z.literal("function"),
  function: z.object({ name: z.string(), arguments: z.string().describe("JSON text.") }),
});
export type ToolCallObject = z.infer<typeof toolCallObjectSchema>;

/** A streamed piece of a tool call: the first carries id, type and name; later ones argument text. */
export const toolCallDeltaSchema = z.object({
  index: z.number().int(),
  id: z.string().optional(),
  type: z.literal("function").optional(),
  function: z.object({ name: z.string().optional(), arguments: z.string() }),
});
export type ToolCallDelta = z.infer<typeof toolCallDeltaSchema>;

/** One token's log probability; `bytes` are its UTF-8 bytes (null when it has none). */
export const topLogprobSchema = z.object({ token: z.string(), logprob: z.number(), bytes: z.array(z.number().int()).nullable() });
export type TopLogprob = z.infer<typeof topLogprobSchema>;
export const tokenLogprobEntrySchema = topLogprobSchema.extend({ top_logprobs: z.array(topLogprobSchema) });
export type TokenLogprobEntry = z.infer<typeof tokenLogprobEntrySchema>;
/** `choices[].logprobs`: set when the request asked for `logprobs`, else null. */
export const choiceLogprobsSchema = z.object({ content: z.array(tokenLogprobEntrySchema).nullable(), refusal: z.null() });
export type ChoiceLogprobs = z.infer<typeof choiceLogprobsSchema>;

export const chatCompletionSchema = z.object({
  id: z.string(),
  object: z.literal("chat.completion"),
  /** Seconds since the epoch. */
  created: z.number().int(),
  model: z.string(),
  /** The tier that served it: `default`, `flex` or `priority`. */
  service_tier: z.enum(SERVICE_TIERS),
  system_fingerprint: z.string().nullable(),
  choices: z.array(
    z.object({
      index: z.number().int(),
      message: z.object({
        role: z.literal("assistant"),
        /** Null when the answer is only tool calls. */
        content: z.string().nullable(),
        refusal: z.null(),
        /** As vLLM, SGLang and DeepSeek send it. */
        reasoning_content: z.string().optional().describe("A reasoning model's thinking; absent when there was none."),
        /** Absent when the model called no tool. */
        tool_calls: z.array(toolCallObjectSchema).optional(),
      }),
      logprobs: choiceLogprobsSchema.nullable(),
      finish_reason: finishReasonSchema,
    }),
  ),
  usage: usageSchema,
});
export type ChatCompletion = z.infer<typeof chatCompletionSchema>;

/** The `data` of each `text/event-stream` event of a streamed completion (before the closing `[DONE]`). */
export const chatCompletionChunkSchema = z.object({
  id: z.string(),
  object: z.literal("chat.completion.chunk"),
  created: z.number().int(),
  model: z.string(),
  /** The tier that served it: `default`, `flex` or `priority`. */
  service_tier: z.enum(SERVICE_TIERS),
  system_fingerprint: z.string().nullable(),
  /** Empty in the last chunk, the one carrying `usage`. */
  choices: z.array(
    z.object({
      index: z.number().int(),
      delta: z.object({
        role: z.literal("assistant").optional(),
        content: z.string().nullable().optional(),
        reasoning_content: z.string().optional(),
        refusal: z.null().optional(),
        tool_calls: z.array(toolCallDeltaSchema).optional(),
      }),
      logprobs: choiceLogprobsSchema.nullable(),
      finish_reason: finishReasonSchema.nullable(),
    }),
  ),
  /** Present (as `null`) on every chunk when usage was asked for; the last chunk carries it. */
  usage: usageSchema.nullable().optional().describe("With `stream_options.include_usage`: null on every chunk but the last, which carries it."),
});
export type ChatCompletionChunk = z.infer<typeof chatCompletionChunkSchema>;

/** Builds the usage object from exact token counts. */
export function makeUsage(promptTokens: number, completionTokens: number, cachedPromptTokens = 0, reasoningTokens = 0): Usage {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: cachedPromptTokens },
    completion_tokens_details: { reasoning_tokens: reasoningTokens },
  };
}

/** The wire usage of engine token counts. */
export function usageOf(usage: { promptTokens: number; completionTokens: number; cachedPromptTokens: number; reasoningTokens?: number }): Usage {
  return makeUsage(usage.promptTokens, usage.completionTokens, usage.cachedPromptTokens, usage.reasoningTokens ?? 0);
}
