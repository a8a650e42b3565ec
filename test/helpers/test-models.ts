/**
 * The small real models the embeddings and fill-in-the-middle tests need, derived at test time
 * from `../shared/models/stories260K.gguf` (real pretrained weights) with `gguf-derive.ts`:
 * never committed, made again into the temp folder when missing.
 *
 * - `embeddingModelPath()`: the same weights with `llama.pooling_type = 1` (mean), which is what
 *   makes llama.cpp, and so Turnpike and llama-server, serve a GGUF as an embedding model.
 * - `fimModelPath()`: the same weights with three control tokens added to the vocabulary
 *   (`<|fim_prefix|>`, `<|fim_suffix|>`, `<|fim_middle|>`, ids 512-514, seeded embedding rows) and
 *   named as the fill-in-the-middle tokens in the metadata (`tokenizer.ggml.fim_*_token_id`).
 * - `fimLongContextModelPath()`, `fimRepositoryModelPath()`: that FIM model with a 4,096-token
 *   training context, the second with the repository-level tokens too (`/infill`'s extra files).
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import { derivedModel } from "./gguf-derive.ts";

const here = path.dirname(fileURLToPath(import.meta.url));
export const SHARED_MODELS = path.resolve(here, "../../../shared/models");
export const STORIES_260K = path.join(SHARED_MODELS, "stories260K.gguf");

/** Mean pooling, as llama.cpp's `LLAMA_POOLING_TYPE_MEAN`. */
export const POOLING_MEAN = 1;

export function embeddingModelPath(): string {
  return derivedModel(STORIES_260K, "stories260K-embedding", {
    set: {
      "llama.pooling_type": { type: "u32", value: POOLING_MEAN },
      "general.name": { type: "string", value: "stories260K-embedding" },
    },
  });
}

/** The fill-in-the-middle tokens of `fimModelPath()`'s vocabulary, and their ids. */
export const FIM_TOKENS = { prefix: "<|fim_prefix|>", suffix: "<|fim_suffix|>", middle: "<|fim_middle|>" } as const;
export const FIM_TOKEN_IDS = { prefix: 512, suffix: 513, middle: 514 } as const;

export function fimModelPath(): string {
  return derivedModel(STORIES_260K, "stories260K-fim", {
    addTokens: [FIM_TOKENS.prefix, FIM_TOKENS.suffix, FIM_TOKENS.middle],
    set: {
      "tokenizer.ggml.fim_pre_token_id": { type: "u32", value: FIM_TOKEN_IDS.prefix },
      "tokenizer.ggml.fim_suf_token_id": { type: "u32", value: FIM_TOKEN_IDS.suffix },
      "tokenizer.ggml.fim_mid_token_id": { type: "u32", value: FIM_TOKEN_IDS.middle },
      "general.name": { type: "string", value: "stories260K-fim" },
    },
    seed: 7,
  });
}

/** The repository-level tokens of `fimRepositoryModelPath()`, and their ids (after the three FIM tokens). */
export const FIM_REPOSITORY_TOKENS = { repository: "<|fim_repo|>", fileSeparator: "<|file_sep|>" } as const;
export const FIM_REPOSITORY_TOKEN_IDS = { repository: 515, fileSeparator: 516 } as const;

/**
 * Context llama.cpp may use on the long-context FIM variants: past llama-server's default batch
 * (2048), so that `/infill`'s extra files have room (it keeps the last `context - 2048 + 2` of
 * their tokens). stories260K's own is 2048.
 */
export const FIM_LONG_CONTEXT = 4096;

/** `fimModelPath()` with a training context of `FIM_LONG_CONTEXT` tokens (`llama.context_length`). */
export function fimLongContextModelPath(): string {
  return derivedModel(STORIES_260K, "stories260K-fim-long", {
    addTokens: [FIM_TOKENS.prefix, FIM_TOKENS.suffix, FIM_TOKENS.middle],
    set: {
      "tokenizer.ggml.fim_pre_token_id": { type: "u32", value: FIM_TOKEN_IDS.prefix },
      "tokenizer.ggml.fim_suf_token_id": { type: "u32", value: FIM_TOKEN_IDS.suffix },
      "tokenizer.ggml.fim_mid_token_id": { type: "u32", value: FIM_TOKEN_IDS.middle },
      "llama.context_length": { type: "u32", value: FIM_LONG_CONTEXT },
      "general.name": { type: "string", value: "stories260K-fim-long" },
    },
    seed: 7,
  });
}

/**
 * `fimLongContextModelPath()` with llama.cpp's repository-level FIM tokens too (Qwen2.5-Coder's
 * spellings, ids 515-516): `<|fim_repo|>` named in the metadata (`tokenizer.ggml.fim_rep_token_id`),
 * and `<|file_sep|>` left for llama.cpp to find by its spelling, so that both ways are exercised.
 */
export function fimRepositoryModelPath(): string {
  return derivedModel(STORIES_260K, "stories260K-fim-repo", {
    addTokens: [FIM_TOKENS.prefix, FIM_TOKENS.suffix, FIM_TOKENS.middle, FIM_REPOSITORY_TOKENS.repository, FIM_REPOSITORY_TOKENS.fileSeparator],
    set: {
      "tokenizer.ggml.fim_pre_token_id": { type: "u32", value: FIM_TOKEN_IDS.prefix },
      "tokenizer.ggml.fim_suf_token_id": { type: "u32", value: FIM_TOKEN_IDS.suffix },
      "tokenizer.ggml.fim_mid_token_id": { type: "u32", value: FIM_TOKEN_IDS.middle },
      "tokenizer.ggml.fim_rep_token_id": { type: "u32", value: FIM_REPOSITORY_TOKEN_IDS.repository },
      "llama.context_length": { type: "u32", value: FIM_LONG_CONTEXT },
      "general.name": { type: "string", value: "stories260K-fim-repo" },
    },
    seed: 7,
  });
}
