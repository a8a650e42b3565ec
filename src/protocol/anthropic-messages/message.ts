/**
 * What the Messages API answers: the `message` object, its content blocks and usage, the stream's
 * events, the token count, and Anthropic's error body. Zod schemas (the `/openapi.json`
 * declarations, output side) with their types; the answers are built in `from-generation.ts`.
 */
import { randomBytes } from "node:crypto";
import { z } from "zod";

export const textBlockSchema = z.object({ type: z.literal("text"), text: z.string() });
export const thinkingBlockSchema = z.object({
  type: z.literal("thinking"),
  thinking: z.string(),
  /** Always empty: Turnpike's reasoning is plain text, never signed or encrypted (a client may pass it back; it is ignored). */
  signature: z.string(),
});
export const toolUseBlockSchema = z.object({
  type: z.literal("tool_use"),
  /** `toolu_…`. */
  id: z.string(),
  name: z.string(),
  /** The call's arguments, parsed (`{}` when the model's JSON was cut short, by `max_tokens` say). */
  input: z.record(z.string(), z.unknown()),
});
export const contentBlockSchema = z.discriminatedUnion("type", [textBlockSchema, thinkingBlockSchema, toolUseBlockSchema]);

/**
 * Anthropic's usage. `input_tokens` excludes both cache fields: the prompt is `input_tokens +
 * cache_read_input_tokens + cache_creation_input_tokens`, each token counted once.
 */
export const messageUsageSchema = z.object({
  /** Prompt tokens not read from the cache. */
  input_tokens: z.number().int(),
  /** Always 0: Turnpike writes no separate cache (see the README); every prompt token not read from the cache is in `input_tokens`. */
  cache_creation_input_tokens: z.number().int(),
  /** Prompt tokens whose state was reused from an earlier request (billed at the model's cached prompt price). */
  cache_read_input_tokens: z.number().int(),
  output_tokens: z.number().int(),
  /** The tier that served the message (`standard` or `priority`): in the message's usage and `message_start`'s, not in `message_delta`'s. */
  service_tier: z.enum(["standard", "priority"]).optional(),
});

export const STOP_REASONS = ["end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"] as const;
export const stopReasonSchema = z.enum(STOP_REASONS);

export const messageSchema = z.object({
  /** `msg_…`. */
  id: z.string(),
  type: z.literal("message"),
  role: z.literal("assistant"),
  content: z.array(contentBlockSchema),
  model: z.string(),
  /** Null only in a stream's `message_start`. */
  stop_reason: stopReasonSchema.nullable(),
  /** The stop sequence met, when `stop_reason` is `stop_sequence`. */
  stop_sequence: z.string().nullable(),
  usage: messageUsageSchema,
});

const index = z.number().int();

/** One event of a `stream: true` answer (each carries its `event:` line, the event's `type`). */
export const messageStreamEventSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("message_start"), message: messageSchema }),
  z.object({
    type: z.literal("content_block_start"),
    index,
    content_block: z.discriminatedUnion("type", [textBlockSchema, thinkingBlockSchema, toolUseBlockSchema]),
  }),
  z.object({
    type: z.literal("content_block_delta"),
    index,
    delta: z.discriminatedUnion("type", [
      z.object({ type: z.literal("text_delta"), text: z.string() }),
      z.object({ type: z.literal("input_json_delta"), partial_json: z.string() }),
      z.object({ type: z.literal("thinking_delta"), thinking: z.string() }),
    ]),
  }),
  z.object({ type: z.literal("content_block_stop"), index }),
  z.object({
    type: z.literal("message_delta"),
    delta: z.object({ stop_reason: stopReasonSchema, stop_sequence: z.string().nullable() }),
    /** The final usage (cumulative: the SDKs replace what `message_start` said). */
    usage: messageUsageSchema,
  }),
  z.object({ type: z.literal("message_stop") }),
  z.object({ type: z.literal("ping") }),
  z.object({ type: z.literal("error"), error: z.object({ type: z.string(), message: z.string() }) }),
]);

export const tokenCountSchema = z.object({ input_tokens: z.number().int().describe("The prompt's tokens, counted by the model's own tokenizer (an upper bound for upstreams without one).") });

export const ANTHROPIC_ERROR_TYPES = [
  "invalid_request_error",
  "authentication_error",
  "permission_error",
  "not_found_error",
  "request_too_large",
  "rate_limit_error",
  "api_error",
  "timeout_error",
  "overloaded_error",
] as const;

export const anthropicErrorSchema = z.object({
  type: z.literal("error"),
  error: z.object({ type: z.enum(ANTHROPIC_ERROR_TYPES), message: z.string() }),
  /** The request's id, as the `request-id` header says. */
  request_id: z.string().nullable(),
});

export type TextBlock = z.infer<typeof textBlockSchema>;
export type ThinkingBlock = z.infer<typeof thinkingBlockSchema>;
export type ToolUseBlock = z.infer<typeof toolUseBlockSchema>;
export type ContentBlock = z.infer<typeof contentBlockSchema>;
export type MessageUsage = z.infer<typeof messageUsageSchema>;
export type StopReason = z.infer<typeof stopReasonSchema>;
export type Message = z.infer<typeof messageSchema>;
export type MessageStreamEvent = z.infer<typeof messageStreamEventSchema>;
export type AnthropicErrorType = (typeof ANTHROPIC_ERROR_TYPES)[number];
export type AnthropicErrorBody = z.infer<typeof anthropicErrorSchema>;

/** A new message id (`msg_…`). */
export function newMessageId(): string {
  return `msg_${randomBytes(18).toString("base64url")}`;
}

/** Anthropic's id of a tool use: the engine's call id, as `toolu_…` (a client passes it back as `tool_use_id`). */
export function toolUseIdOf(callId: string): string {
  if (callId.startsWith("toolu_")) return callId;
  const safe = callId.replace(/[^A-Za-z0-9_-]/g, "");
  return `toolu_${safe === "" ? randomBytes(12).toString("hex") : safe}`;
}
