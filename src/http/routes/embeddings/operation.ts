/**
 * `POST /v1/embeddings` as `/openapi.json` describes it, beside its route (`route.ts` registers
 * itself: the generation routes' hooks on the headers, a large body validated in a worker).
 */
import type { ApiOperation } from "../../../protocol/openapi.ts";
import { embeddingsRequestSchema } from "../../../protocol/embeddings/request.ts";
import { embeddingObjectSchema, embeddingsResponseSchema, embeddingsUsageSchema } from "../../../protocol/embeddings/response.ts";
import { ADMISSION_ERROR_CODES } from "../../generation/operation-errors.ts";

export const embeddingsOperation: ApiOperation = {
  method: "post",
  path: "/v1/embeddings",
  tag: "Embeddings",
  summary:
    "Embed text or token ids with a model that serves embeddings (its `endpoints` in `/v1/models` list `/v1/embeddings`): one L2-normalised vector per input, in the inputs' order. " +
    "Billed for the input tokens at the model's embeddings price (its prompt price unless its entry sets `pricing.embeddings`).",
  auth: "key",
  body: embeddingsRequestSchema,
  example: { model: "nomic-embed-text-v1.5", input: ["The food was delicious.", "The waiter was friendly."], encoding_format: "float" },
  success: { status: 200, description: "A `list` of `embedding` objects, with the tokens embedded as `usage`." },
  response: embeddingsResponseSchema,
  errors: ["invalid_request_error", "max_tokens_per_request", ...ADMISSION_ERROR_CODES],  schemas: { CreateEmbeddingRequest: embeddingsRequestSchema, CreateEmbeddingResponse: embeddingsResponseSchema, Embedding: embeddingObjectSchema, EmbeddingUsage: embeddingsUsageSchema },
};
