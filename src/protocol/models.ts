/** The `/v1/models` wire format, with Turnpike's catalog fields after OpenAI's four. */
export type ModelObject = {
  id: string;
  object: "model";
  created: number;
  owned_by: string;
  /** Tokens one request may use: prompt plus completion. */
  context_length: number;
  modalities: { input: string[]; output: string[] };
  /**
   * Credit units per million tokens; with a `credit_value` setting also `currency` (ISO 4217,
   * lower case) and `money`: the same prices in that currency per million tokens, as exact
   * decimal strings in its major unit (`"0.15"` dollars). Absent without a credit value.
   */
  pricing: { prompt: number; cached_prompt: number; completion: number; currency?: string; money?: MoneyPrices };
  supported_parameters: string[];
  /** `ready`, `degraded` (some members of its pool are down) or `unavailable`; with the members healthy and in all. */
  status:
    | { state: "ready" | "degraded"; members_healthy: number; members_total: number }
    | { state: "loading" }
    | { state: "downloading"; progress?: number }
    | { state: "unavailable"; detail: string; members_healthy: number; members_total: number };
};

/** Prices per million tokens in money: exact decimal strings in the currency's major unit. */
export type MoneyPrices = { prompt: string; cached_prompt: string; completion: string };

export type ModelList = { object: "list"; data: ModelObject[] };
