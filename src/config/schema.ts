/**
 * Turnpike's settings: one schema, validated once at start, then frozen.
 * Every option has a flag, an environment variable and a default (see `options.ts`).
 */
import { z } from "zod";
import { planSchema } from "../billing/plans.ts";

/** Prices in credit units per million tokens. A model without prices costs nothing. */
export const pricingSchema = z.object({
  prompt: z.number().int().min(0).default(0),
  cached_prompt: z.number().int().min(0).optional(),
  completion: z.number().int().min(0).default(0),
});

const modelIdPattern = /^[A-Za-z0-9][A-Za-z0-9._:@/-]*$/;

export const modelEntrySchema = z
  .object({
    id: z.string().regex(modelIdPattern, "must start with a letter or digit and hold only letters, digits and . _ : @ / -"),
    /** A local GGUF file. */
    path: z.string().min(1).optional(),
    /** `hf:owner/repo/file.gguf`, or an https URL: downloaded into `<data-dir>/models` on first start. */
    hf: z.string().min(1).optional(),
    /** Tokens per sequence (prompt + completion); default: the smaller of the model's training context and `context_size`. */
    context_size: z.number().int().min(64).optional(),
    /** Sequences served at once for this model; default: the global `parallel`. */
    parallel: z.number().int().min(1).max(64).optional(),
    owned_by: z.string().optional(),
    pricing: pricingSchema.optional(),
    /** What the model reads (`/v1/models` `modalities.input`); default `["text"]`. */
    input_modalities: z.array(z.enum(["text", "image"])).min(1).optional(),
  })
  .refine((entry) => (entry.path === undefined) !== (entry.hf === undefined), {
    message: "needs exactly one of 'path' (a local GGUF file) or 'hf' (hf:owner/repo/file.gguf)",
  })
  .refine((entry) => !entry.input_modalities?.includes("image"), {
    message:
      "cannot declare 'image' input: the embedded llama.cpp engine (node-llama-cpp 3.22) cannot load vision projectors (mmproj); image input needs an upstream engine",
    path: ["input_modalities"],
  });

export type ModelEntry = z.infer<typeof modelEntrySchema>;

export const settingsSchema = z.object({
  host: z.string().min(1),
  port: z.number().int().min(0).max(65535),
  data_dir: z.string().min(1),
  /** `postgres://…` to share state between nodes; empty: SQLite in the data dir. */
  database_url: z.string().regex(/^(postgres(ql)?:\/\/.+)?$/, "must be a postgres:// URL (or empty for SQLite)"),
  /** `redis://…` to share rate limits between nodes; empty: limits kept in this process. */
  redis_url: z.string().regex(/^(rediss?:\/\/.+)?$/, "must be a redis:// URL (or empty for in-memory limits)"),
  models: z.array(modelEntrySchema),
  /** Plans on offer; only from the config file. */
  plans: z.array(planSchema).default([]),
  parallel: z.number().int().min(1).max(64),
  /** llama.cpp threads per context; 0 means "pick from the cores available". */
  threads: z.number().int().min(0).max(1024),
  context_size: z.number().int().min(64),
  /** llama.cpp backend: `auto` tries CUDA, Vulkan and Metal builds shipped with node-llama-cpp, then the CPU. */
  gpu: z.enum(["auto", "cpu", "cuda", "vulkan", "metal"]),
  /** Requests that may wait for a slot, per model; one more gets 503. */
  queue_size: z.number().int().min(0),
  /** Seconds running requests get to finish after SIGINT/SIGTERM. */
  shutdown_timeout: z.number().min(0),
  /** Seconds between SSE keep-alive comments while a stream waits for a slot. */
  keep_alive_interval: z.number().positive(),
  log_level: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]),
  /** Largest request body in bytes. */
  body_limit: z.number().int().min(1024),
});

export type Settings = z.infer<typeof settingsSchema>;

/** The model served when none is configured: small, instruct-tuned, downloaded on first start. */
export const DEFAULT_MODEL: ModelEntry = {
  id: "qwen2.5-0.5b-instruct",
  hf: "hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf",
  owned_by: "qwen",
};
