/**
 * `POST /v1/chat/completions` as `/openapi.json` describes it, beside its route. The route
 * registers itself (`route.ts`: the generation core's hooks run on the headers before the body is
 * read, the body is parsed and validated in a worker, answers are JSON or SSE), so this is the
 * declaration of its documentation (see `http/operation.ts` for routes that fit `defineOperation`).
 */
import type { ApiOperation } from "../../../protocol/openapi.ts";
import { GENERATION_ERROR_CODES } from "../../generation/operation-errors.ts";
import { chatCompletionRequestSchema } from "../../../protocol/chat-completions/request.ts";
import { chatCompletionChunkSchema, chatCompletionSchema, choiceLogprobsSchema, usageSchema } from "../../../protocol/chat-completions/response.ts";

export const chatCompletionsOperation: ApiOperation = {
  method: "post",
  path: "/v1/chat/completions",
  tag: "Chat",
  summary: "Create a chat completion, as JSON or as Server-Sent Events (`stream: true`).",
  auth: "key",
  body: chatCompletionRequestSchema,
  example: {
    model: "qwen2.5-0.5b-instruct",
    messages: [
      { role: "system", content: "You are terse." },
      { role: "user", content: "Say hello." },
    ],
    max_tokens: 32,
    temperature: 0.7,
    stream: true,
    stream_options: { include_usage: true },
  },
  success: { status: 200, description: "A `chat.completion` object, or with `stream` a `text/event-stream` of `chat.completion.chunk` events ending in `data: [DONE]`." },
  response: chatCompletionSchema,
  streamEvent: chatCompletionChunkSchema,
  // The generation core's codes, with the chat dialect's own (a token id outside the vocabulary in `logit_bias`).
  errors: [...GENERATION_ERROR_CODES, "invalid_logit_bias"],
  schemas: {
    ChatCompletionRequest: chatCompletionRequestSchema,
    ChatCompletion: chatCompletionSchema,
    ChatCompletionChunk: chatCompletionChunkSchema,
    CompletionUsage: usageSchema,
    ChoiceLogprobs: choiceLogprobsSchema,
  },
};
