/** The `/v1/models` wire format, with Turnpike's catalog fields after OpenAI's four. */
import { z } from "zod";

/** Prices per million tokens in money: exact decimal strings in the currency's major unit. */
export const moneyPricesSchema = z.object({ prompt: z.string(), cached_prompt: z.string(), completion: z.string() });
export type MoneyPrices = z.infer<typeof moneyPricesSchema>;

const memberCounts = { members_healthy: z.number().int(), members_total: z.number().int() };

export const modelObjectSchema = z.object({
  id: z.string(),
  object: z.literal("model"),
  /** Seconds since the epoch. */
  created: z.number().int(),
  owned_by: z.string(),
  /** Tokens one request may use: prompt plus completion. */
  context_length: z.number().int().describe("Tokens one request may use: prompt plus completion."),
  modalities: z.object({ input: z.array(z.string()), output: z.array(z.string()) }),
  /**
   * Credit units per million tokens; with a `credit_value` setting also `currency` (ISO 4217,
   * lower case) and `money`: the same prices in that currency per million tokens, as exact
   * decimal strings in its major unit (`"0.15"` dollars). Absent without a credit value.
   */
  pricing: z
    .object({
      prompt: z.number().int(),
      cached_prompt: z.number().int(),
      completion: z.number().int(),
      currency: z.string().optional(),
      money: moneyPricesSchema.optional(),
    })
    .describe("Credit units per million tokens; with a credit value set, also `currency` and `money` (the same prices as exact decimal strings in the currency's major unit)."),
  supported_parameters: z.array(z.string()),
  /** The API endpoints that serve this model (every dialect of the generation core). */
  endpoints: z.array(z.string()).describe("The API endpoints that serve this model: each wire dialect Turnpike speaks over its generation core."),
  /** `ready`, `degraded` (some members of its pool are down) or `unavailable`; with the members healthy and in all. */
  status: z.union([
    z.object({ state: z.enum(["ready", "degraded"]), ...memberCounts }),
    z.object({ state: z.literal("loading") }),
    z.object({ state: z.literal("downloading"), progress: z.number().optional() }),
    z.object({ state: z.literal("unavailable"), detail: z.string(), ...memberCounts }),
  ]),
});
export type ModelObject = z.infer<typeof modelObjectSchema>;

/** The endpoints every generation model is served through: one per wire dialect of the generation core. */
export const GENERATION_ENDPOINTS = ["/v1/chat/completions", "/v1/responses", "/v1/messages"] as const;

/**
 * What a model serves: `chat` (chat completions, responses, messages: every message-based dialect),
 * `completions` (legacy text completions, with fill-in-the-middle where the model has FIM tokens)
 * and `embeddings`. An engine says it (an embedding GGUF serves `embeddings` only); a model entry
 * may declare it (`serves`).
 */
export const MODEL_SERVICES = ["chat", "completions", "embeddings"] as const;
export type ModelService = (typeof MODEL_SERVICES)[number];

/** llama-server's native fill-in-the-middle endpoints, listed for a model that serves completions and fills in the middle. */
export const INFILL_ENDPOINTS: readonly string[] = ["/infill", "/v1/infill"];

/** The endpoints of each service: `/v1/models` lists a model's as `endpoints`. */
export const SERVICE_ENDPOINTS: Readonly<Record<ModelService, readonly string[]>> = {
  chat: GENERATION_ENDPOINTS,
  completions: ["/v1/completions"],
  embeddings: ["/v1/embeddings"],
};

export const modelListSchema = z.object({ object: z.literal("list"), data: z.array(modelObjectSchema) });
export type ModelList = z.infer<typeof modelListSchema>;

/** A model as Anthropic's `GET /v1/models` lists it (answered to a request carrying `anthropic-version`). */
export const anthropicModelSchema = z.object({
  type: z.literal("model"),
  id: z.string(),
  /** The catalog's id: Turnpike's models have no other name. */
  display_name: z.string(),
  /** RFC 3339. */
  created_at: z.string(),
});
export type AnthropicModel = z.infer<typeof anthropicModelSchema>;

/** Anthropic's page of models: `first_id` and `last_id` page on with `after_id` / `before_id`. */
export const anthropicModelListSchema = z.object({
  data: z.array(anthropicModelSchema),
  has_more: z.boolean(),
  first_id: z.string().nullable(),
  last_id: z.string().nullable(),
});
export type AnthropicModelList = z.infer<typeof anthropicModelListSchema>;
