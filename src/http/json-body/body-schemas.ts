/**
 * The request schemas the body worker runs, by route: a large body of a generation route is
 * validated off the event loop (a refused one never comes back to the main thread), and the
 * route does not validate it again. A new dialect's route adds its schema here.
 */
import type { z } from "zod";
import { chatCompletionRequestSchema } from "../../protocol/chat-completions/request.ts";
import { completionRequestSchema } from "../../protocol/completions/request.ts";
import { infillRequestSchema } from "../../protocol/infill/request.ts";
import { responsesRequestSchema } from "../../protocol/responses/request.ts";
import { countTokensRequestSchema, messagesRequestSchema } from "../../protocol/anthropic-messages/request.ts";
import { embeddingsRequestSchema } from "../../protocol/embeddings/request.ts";

export const BODY_SCHEMAS: Readonly<Record<string, z.ZodType>> = {
  "/v1/chat/completions": chatCompletionRequestSchema,
  "/v1/completions": completionRequestSchema,
  "/infill": infillRequestSchema,
  "/v1/infill": infillRequestSchema,
  "/v1/responses": responsesRequestSchema,
  "/v1/messages": messagesRequestSchema,
  "/v1/messages/count_tokens": countTokensRequestSchema,
  "/v1/embeddings": embeddingsRequestSchema,
};
