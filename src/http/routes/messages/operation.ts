/**
 * Anthropic's Messages API as `/openapi.json` describes it, beside its routes. The routes register
 * themselves (`route.ts`: the generation core's hooks on the headers, a body validated in a
 * worker, answers as JSON or SSE, errors in Anthropic's shape), so these are the declarations of
 * their documentation.
 */
import type { ApiOperation } from "../../../protocol/openapi.ts";
import { anthropicErrorOf } from "../../../protocol/anthropic-messages/errors.ts";
import { ApiError } from "../../../protocol/errors.ts";
import { GENERATION_ERROR_CODES } from "../../generation/operation-errors.ts";
import { anthropicErrorSchema, contentBlockSchema, messageSchema, messageStreamEventSchema, messageUsageSchema, tokenCountSchema } from "../../../protocol/anthropic-messages/message.ts";
import { countTokensRequestSchema, messagesRequestSchema } from "../../../protocol/anthropic-messages/request.ts";

/** Anthropic's error body, at the status Anthropic answers each code with. */
const errorShape: ApiOperation["errorShape"] = { schema: "AnthropicError", statusOf: (code) => anthropicErrorOf(new ApiError("", code)).status };

export const createMessageOperation: ApiOperation = {
  method: "post",
  path: "/v1/messages",
  tag: "Anthropic Messages",
  summary:
    "Create a message in Anthropic's Messages API format (for Claude Code and the Anthropic SDKs: the key as `x-api-key` or `Authorization: Bearer`), as JSON or as Server-Sent Events (`stream: true`). " +
    "`max_tokens` is lowered to what the model's context leaves after the prompt. Errors come in Anthropic's shape (`AnthropicError`; the status below, except `insufficient_quota`: 400, and a full queue: 529 `overloaded_error`).",
  auth: "key",
  body: messagesRequestSchema,
  example: { model: "qwen2.5-0.5b-instruct", max_tokens: 1024, system: "You are terse.", messages: [{ role: "user", content: "Say hello." }] },
  success: {
    status: 200,
    description:
      "A `message` object, or with `stream` a `text/event-stream` of named events: `message_start`, then per content block `content_block_start`, `content_block_delta`… and `content_block_stop`, `ping` while waiting, then `message_delta` and `message_stop` (or an `error` event after a failure).",
  },
  response: messageSchema,
  streamEvent: messageStreamEventSchema,
  errors: [...GENERATION_ERROR_CODES],
  errorShape,
  schemas: {
    CreateMessageRequest: messagesRequestSchema,
    Message: messageSchema,
    MessageContentBlock: contentBlockSchema,
    MessageUsage: messageUsageSchema,
    MessageStreamEvent: messageStreamEventSchema,
    AnthropicError: anthropicErrorSchema,
  },
};

export const countMessageTokensOperation: ApiOperation = {
  method: "post",
  path: "/v1/messages/count_tokens",
  tag: "Anthropic Messages",
  summary:
    "Count a message request's input tokens with the model's tokenizer, as the prompt would be built: what the message reports as `input_tokens` + `cache_read_input_tokens` (an upper bound for upstreams without a tokenizer). Not billed.",
  auth: "key",
  body: countTokensRequestSchema,
  example: { model: "qwen2.5-0.5b-instruct", messages: [{ role: "user", content: "How many tokens is this?" }] },
  success: { status: 200, description: "The count." },
  response: tokenCountSchema,
  errors: ["unsupported_parameter", "model_does_not_support_images", "invalid_image_url", "context_length_exceeded", "model_not_found", "model_not_allowed", "model_not_ready"],
  errorShape,
  schemas: { CountMessageTokensRequest: countTokensRequestSchema, MessageTokenCount: tokenCountSchema, AnthropicError: anthropicErrorSchema },
};

/** The Messages API's operations, in the document's order. */
export const MESSAGES_OPERATIONS: readonly ApiOperation[] = [createMessageOperation, countMessageTokensOperation];
