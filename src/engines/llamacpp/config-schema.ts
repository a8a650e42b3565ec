/**
 * The options of a model entry the embedded llama.cpp engine reads: where its GGUF file comes
 * from and how many tokens and sequences it serves. The engine owns them; the settings
 * (`config/model-entry.ts`) compose them into a model entry with the upstream engine's.
 */
import { z } from "zod";

export const llamaCppModelOptionsSchema = z.object({
  /** A local GGUF file. */
  path: z.string().min(1).optional(),
  /** `hf:owner/repo/file.gguf`, or an https URL: downloaded into `<data-dir>/models` on first start. */
  hf: z.string().min(1).optional(),
  /** Tokens per sequence (prompt + completion); default: the smaller of the model's training context and `context_size`. */
  context_size: z.number().int().min(64).optional(),
  /** Sequences served at once for this model; default: the global `parallel`. */
  parallel: z.number().int().min(1).max(64).optional(),
});

export type LlamaCppModelOptions = z.infer<typeof llamaCppModelOptionsSchema>;
