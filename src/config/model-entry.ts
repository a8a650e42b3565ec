/**
 * A model entry of the settings: where the model comes from (a GGUF file, a download, or a pool
 * of OpenAI-compatible servers), its limits and its prices. Each engine owns the options it
 * reads (`engines/llamacpp/config-schema.ts`, `engines/openai-compatible/config-schema.ts`);
 * this file composes them with what every model has (id, owner, prices, modalities) and the
 * checks across engines (exactly one source; images and vendor fields for upstreams only).
 */
import { z } from "zod";
import { MODEL_SERVICES } from "../protocol/models.ts";
import { llamaCppModelOptionsSchema } from "../engines/llamacpp/config-schema.ts";
import { upstreamModelOptionsSchema } from "../engines/openai-compatible/config-schema.ts";

/** Prices in credit units per million tokens. A model without prices costs nothing. */
export const pricingSchema = z.object({
  prompt: z.number().int().min(0).default(0),
  cached_prompt: z.number().int().min(0).optional(),
  completion: z.number().int().min(0).default(0),
  /** The price of an embedding's input tokens, where it differs from `prompt` (an entry can price embeddings alone). */
  embeddings: z.number().int().min(0).optional(),
});

const modelIdPattern = /^[A-Za-z0-9][A-Za-z0-9._:@/-]*$/;

export const modelEntrySchema = z
  .object({
    id: z.string().regex(modelIdPattern, "must start with a letter or digit and hold only letters, digits and . _ : @ / -"),
    /** The embedded engine's: `path` or `hf`, `context_size`, `parallel`. */
    ...llamaCppModelOptionsSchema.shape,
    /** The upstream engine's: `upstream`, `context_length`, `vendor_fields`, `chat_template_kwargs`. */
    ...upstreamModelOptionsSchema.shape,
    owned_by: z.string().optional(),
    pricing: pricingSchema.optional(),
    /** What the model reads (`/v1/models` `modalities.input`); default `["text"]`. */
    input_modalities: z.array(z.enum(["text", "image"])).min(1).optional(),
    /**
     * What the model serves (`chat`, `completions`, `embeddings`); default: what its engine says
     * (a GGUF with a pooling type or an embedding architecture serves `embeddings`; other models
     * `chat` and `completions`). Declaring `embeddings` beside `chat` turns embeddings on for a chat model.
     */
    serves: z.array(z.enum(MODEL_SERVICES)).min(1).optional(),
    /** Embeddings options: the vector's length (for an upstream, until it answered once) and the lengths `dimensions` may ask for. */
    embeddings: z
      .object({
        /** The model's own vector length. */
        dimensions: z.number().int().min(1).max(65_536).optional(),
        /**
         * Matryoshka-trained: a request's `dimensions` truncates the vector and renormalises it. `true`:
         * any length from 1 to the full one; a list: only those lengths. Absent: `dimensions` is refused
         * unless it equals the full length.
         */
        matryoshka: z.union([z.literal(true), z.array(z.number().int().min(1)).min(1)]).optional(),
      })
      .strict()
      .optional(),
    /**
     * The fill-in-the-middle tokens, as text, for an upstream model whose server builds no FIM
     * prompt itself (vLLM, SGLang): `<|fim_prefix|>` etc. A GGUF's own FIM tokens are read from the
     * file; a llama-server member uses its `/infill`.
     */
    fim: z.object({ prefix: z.string().min(1), suffix: z.string().min(1), middle: z.string().min(1) }).strict().optional(),
  })
  .refine((entry) => [entry.path, entry.hf, entry.upstream].filter((source) => source !== undefined).length === 1, {
    message: "needs exactly one of 'path' (a local GGUF file), 'hf' (hf:owner/repo/file.gguf) or 'upstream' (OpenAI-compatible servers)",
  })
  .refine((entry) => entry.upstream !== undefined || !entry.input_modalities?.includes("image"), {
    message:
      "cannot declare 'image' input: the embedded llama.cpp engine (node-llama-cpp 3.22) cannot load vision projectors (mmproj); image input needs an upstream engine",
    path: ["input_modalities"],
  })
  .refine((entry) => entry.upstream !== undefined || entry.vendor_fields === undefined || entry.vendor_fields.length === 0, {
    message: "vendor_fields is for upstream engines, whose fields pass through as sent; the embedded llama.cpp engine takes top_k (node-llama-cpp's own sampler) and no other vendor field",
    path: ["vendor_fields"],
  })
  .refine((entry) => entry.chat_template_kwargs === undefined || (entry.upstream !== undefined && (entry.vendor_fields === undefined || entry.vendor_fields.includes("chat_template_kwargs"))), {
    message: "declares chat_template_kwargs keys, but requests cannot pass chat_template_kwargs to this model (an upstream model whose vendor_fields include it)",
    path: ["chat_template_kwargs"],
  });

export type ModelEntry = z.infer<typeof modelEntrySchema>;

/** The model served when none is configured: small, instruct-tuned, downloaded on first start. */
export const DEFAULT_MODEL: ModelEntry = {
  id: "qwen2.5-0.5b-instruct",
  hf: "hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf",
  owned_by: "qwen",
};
