/** The `/v1/models` wire format, with Turnpike's catalog fields after OpenAI's four. */
export type ModelObject = {
  id: string;
  object: "model";
  created: number;
  owned_by: string;
  /** Tokens one request may use: prompt plus completion. */
  context_length: number;
  modalities: { input: string[]; output: string[] };
  /** Credit units per million tokens. */
  pricing: { prompt: number; cached_prompt: number; completion: number };
  supported_parameters: string[];
  /** `ready`, `degraded` (some members of its pool are down) or `unavailable`; with the members healthy and in all. */
  status:
    | { state: "ready" | "degraded"; members_healthy: number; members_total: number }
    | { state: "loading" }
    | { state: "downloading"; progress?: number }
    | { state: "unavailable"; detail: string; members_healthy: number; members_total: number };
};

export type ModelList = { object: "list"; data: ModelObject[] };
