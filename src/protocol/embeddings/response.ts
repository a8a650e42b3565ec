/**
 * The answer of `POST /v1/embeddings` (OpenAI's `list` of `embedding` objects), and the two ways a
 * vector goes on the wire: numbers, or base64 of its little-endian float32 bytes (what the
 * `openai` SDKs ask for by default and decode with a `Float32Array` view).
 */
import { z } from "zod";

export const embeddingObjectSchema = z.object({
  object: z.literal("embedding"),
  /** The input's place in the request. */
  index: z.number().int(),
  embedding: z
    .union([z.array(z.number()), z.string()])
    .describe("The vector: numbers, or with `encoding_format: \"base64\"` its little-endian float32 bytes in base64."),
});
export type EmbeddingObject = z.infer<typeof embeddingObjectSchema>;

export const embeddingsUsageSchema = z.object({
  /** Tokens embedded, all inputs summed (what is billed). */
  prompt_tokens: z.number().int(),
  total_tokens: z.number().int(),
});

export const embeddingsResponseSchema = z.object({
  object: z.literal("list"),
  /** One per input, in the inputs' order. */
  data: z.array(embeddingObjectSchema),
  model: z.string(),
  usage: embeddingsUsageSchema,
});
export type EmbeddingsResponse = z.infer<typeof embeddingsResponseSchema>;

/** A vector's little-endian float32 bytes, base64-encoded. */
export function base64Vector(vector: Float32Array): string {
  const bytes = Buffer.alloc(vector.length * 4);
  for (let index = 0; index < vector.length; index++) bytes.writeFloatLE(vector[index]!, index * 4);
  return bytes.toString("base64");
}

/** The numbers of a vector, as JSON writes them (each float32 as the shortest double that reads back to it). */
export function floatVector(vector: Float32Array): number[] {
  return Array.from(vector);
}

/**
 * The first `dimensions` components of a vector, L2-normalised again (a Matryoshka model's
 * shorter embedding); the whole vector when `dimensions` is its length.
 */
export function shortenVector(vector: Float32Array, dimensions: number): Float32Array {
  if (dimensions >= vector.length) return vector;
  const cut = vector.slice(0, dimensions);
  let sum = 0;
  for (const value of cut) sum += value * value;
  const norm = Math.sqrt(sum);
  if (norm > 0) for (let index = 0; index < cut.length; index++) cut[index] = cut[index]! / norm;
  return cut;
}
