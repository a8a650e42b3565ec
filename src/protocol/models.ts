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
      /** For a model that serves embeddings: what an embedding's input tokens cost (the entry's `pricing.embeddings`, else `prompt`). */
      embeddings: z.number().int().optional(),
      currency: z.string().optional(),
      money: moneyPricesSchema.optional(),
    })
    .describe(
      "Credit units per million tokens (`embeddings`: an embedding's input tokens, for a model that serves embeddings); with a credit value set, also `currency` and `money` (the same prices as exact decimal strings in the currency's major unit).",
    ),
  supported_parameters: z.array(z.string()),
  /**
   * The API endpoints that serve this model, from what it serves: chat (`/v1/chat/completions`,
   * `/v1/responses`, `/v1/messages`), text completions (`/v1/completions`), embeddings (`/v1/embeddings`).
   */
  endpoints: z
    .array(z.string())
    .describe(
      "The API endpoints that serve this model, from what it serves: chat (`/v1/chat/completions`, `/v1/responses`, `/v1/messages`), text completions (`/v1/completions`), embeddings (`/v1/embeddings`). Another endpoint answers 400 `model_does_not_support_endpoint`.",
    ),
  /** For a model that serves embeddings: its vectors' length (null until known) and the shorter lengths `dimensions` may ask for. */
  embeddings: z
    .object({
      dimensions: z.number().int().nullable(),
      matryoshka: z.union([z.boolean(), z.array(z.number().int())]),
    })
    .optional()
    .describe(
      "For a model that serves embeddings: `dimensions`, its vectors' length (null until known: an upstream before its first answer), and `matryoshka`: whether `dimensions` may ask for fewer (true: any; a list: those; false: only the full length).",
    ),
  /** `ready`, `degraded` (some members of its pool are down) or `unavailable`; with the members healthy and in all. */
  status: z.union([
    z.object({ state: z.enum(["ready", "degraded"]), ...memberCounts }),
    z.object({ state: z.literal("loading") }),
    z.object({ state: z.literal("downloading"), progress: z.number().optional() }),
    z.object({ state: z.literal("unavailable"), detail: z.string(), ...memberCounts }),
  ]),
});
export type ModelObject = z.infer<typeof modelObjectSchema>;

/** What a model serves and each service's endpoints: in a dependency-free file the console bundles. */
export { GENERATION_ENDPOINTS, INFILL_ENDPOINTS, MODEL_SERVICES, SERVICE_ENDPOINTS, type ModelService } from "./model-services.ts";

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
