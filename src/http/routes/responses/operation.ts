/**
 * The Responses API's operations as `/openapi.json` describes them, beside their routes. The
 * routes register themselves (`route.ts`: creation runs the generation core's hooks on the
 * headers, a body validated in a worker, answers as JSON, SSE or in the background), so these are
 * the declarations of their documentation.
 */
import { z } from "zod";
import type { ApiOperation } from "../../../protocol/openapi.ts";
import { GENERATION_ERROR_CODES } from "../../generation/operation-errors.ts";
import { responsesRequestSchema } from "../../../protocol/responses/request.ts";
import {
  inputTokenCountSchema,
  responseDeletedSchema,
  responseInputItemListSchema,
  responseOutputItemSchema,
  responseResourceSchema,
  responseStreamEventSchema,
  responseUsageSchema,
} from "../../../protocol/responses/schemas.ts";


const schemas = { ResponseResource: responseResourceSchema, ResponseOutputItem: responseOutputItemSchema, ResponseUsage: responseUsageSchema };

export const createResponseOperation: ApiOperation = {
  method: "post",
  path: "/v1/responses",
  tag: "Responses",
  summary:
    "Create a response: as JSON, as Server-Sent Events (`stream: true`), or in the background (`background: true`: answered `queued` at once, polled with GET). Stored for the account unless `store: false`; `previous_response_id` continues a stored one.",
  auth: "key",
  body: responsesRequestSchema,
  example: { model: "qwen2.5-0.5b-instruct", instructions: "You are terse.", input: "Say hello.", max_output_tokens: 64, temperature: 0.7 },
  success: {
    status: 200,
    description:
      "A `response` object, or with `stream` a `text/event-stream` of named events (`response.created`, `response.in_progress`, item and part events, then `response.completed`, `response.incomplete` or `response.failed`) ending in `data: [DONE]`.",
  },
  response: responseResourceSchema,
  streamEvent: responseStreamEventSchema,
  errors: [...GENERATION_ERROR_CODES, "response_not_found", "stored_response_too_large"],
  schemas: { CreateResponseRequest: responsesRequestSchema, ...schemas, ResponseStreamEvent: responseStreamEventSchema },
};

export const countInputTokensOperation: ApiOperation = {
  method: "post",
  path: "/v1/responses/input_tokens",
  tag: "Responses",
  summary: "Count a request's input tokens with the model's tokenizer, as the prompt would be built (an upper bound for upstreams without a tokenizer). Not billed.",
  auth: "key",
  body: responsesRequestSchema,
  example: { model: "qwen2.5-0.5b-instruct", input: "How many tokens is this?" },
  success: { status: 200, description: "The count." },
  response: inputTokenCountSchema,
  errors: ["unsupported_parameter", "model_does_not_support_images", "context_length_exceeded", "model_not_found", "model_not_allowed", "model_not_ready", "response_not_found", "rate_limit_exceeded", "insufficient_quota"],
  schemas: { ResponseInputTokens: inputTokenCountSchema },
};

export const getResponseOperation: ApiOperation = {
  method: "get",
  path: "/v1/responses/{id}",
  tag: "Responses",
  summary: "A stored response of the key's account, as it stands (a background one while it runs).",
  auth: "key",
  success: { status: 200, description: "The `response` object." },
  response: responseResourceSchema,
  errors: ["response_not_found"],
  schemas,
};

export const deleteResponseOperation: ApiOperation = {
  method: "delete",
  path: "/v1/responses/{id}",
  tag: "Responses",
  summary: "Deletes a stored response (a background one still running stops).",
  auth: "key",
  success: { status: 200, description: "The deletion." },
  response: responseDeletedSchema,
  errors: ["response_not_found"],
  schemas: { ResponseDeleted: responseDeletedSchema },
};

export const listInputItemsOperation: ApiOperation = {
  method: "get",
  path: "/v1/responses/{id}/input_items",
  tag: "Responses",
  summary: "The input items of a stored response (its own, not its ancestors'), a page at a time.",
  auth: "key",
  query: z.object({
    after: z.string().optional().describe("The id of the last item of the previous page."),
    limit: z.string().optional().describe("Items per page, 1 to 100 (default 20)."),
    order: z.enum(["asc", "desc"]).optional().describe("`desc` (the default): the last input item first."),
  }),
  example: { limit: "20", order: "asc" },
  success: { status: 200, description: "A list of input items." },
  response: responseInputItemListSchema,
  errors: ["response_not_found", "invalid_cursor"],
  schemas: { ResponseInputItemList: responseInputItemListSchema },
};

export const cancelResponseOperation: ApiOperation = {
  method: "post",
  path: "/v1/responses/{id}/cancel",
  tag: "Responses",
  summary: "Stops a background response on whichever node runs it; what it generated is billed. Answers the response as it then stands.",
  auth: "key",
  success: { status: 200, description: "The `response` object (`cancelled` once it stopped)." },
  response: responseResourceSchema,
  errors: ["response_not_found", "response_not_cancellable"],
  schemas,
};

/** The Responses API's operations, in the document's order. */
export const RESPONSES_OPERATIONS: readonly ApiOperation[] = [
  createResponseOperation,
  countInputTokensOperation,
  getResponseOperation,
  deleteResponseOperation,
  listInputItemsOperation,
  cancelResponseOperation,
];
