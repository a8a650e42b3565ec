/**
 * `POST /v1/completions` as `/openapi.json` describes it, beside its route (which registers
 * itself, as chat's does: the generation core's hooks run on the headers before the body is read).
 */
import type { ApiOperation } from "../../../protocol/openapi.ts";
import { GENERATION_ERROR_CODES } from "../../generation/operation-errors.ts";
import { completionRequestSchema } from "../../../protocol/completions/request.ts";
import { completionChunkSchema, completionSchema, legacyLogprobsSchema } from "../../../protocol/completions/response.ts";

export const completionsOperation: ApiOperation = {
  method: "post",
  path: "/v1/completions",
  tag: "Completions",
  summary:
    "Create a text completion (no chat template), as JSON or as Server-Sent Events (`stream: true`). With `suffix`, fill in the middle between the prompt and the suffix (models with FIM tokens only).",
  auth: "key",
  body: completionRequestSchema,
  example: {
    model: "qwen2.5-coder-1.5b",
    prompt: "def fibonacci(n):\n    ",
    suffix: "\n    return a\n",
    max_tokens: 64,
    temperature: 0,
    stop: ["\n\n"],
  },
  success: { status: 200, description: "A `text_completion` object, or with `stream` a `text/event-stream` of `text_completion` chunks ending in `data: [DONE]`." },
  response: completionSchema,
  streamEvent: completionChunkSchema,
  // The generation core's codes, with this dialect's own (a token id outside the vocabulary in `logit_bias`; a model that serves no completions).
  errors: [...GENERATION_ERROR_CODES, "invalid_logit_bias"],
  schemas: {
    CompletionRequest: completionRequestSchema,
    Completion: completionSchema,
    CompletionChunk: completionChunkSchema,
    LegacyLogprobs: legacyLogprobsSchema,
  },
};
