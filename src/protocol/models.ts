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
  status:
    | { state: "ready" | "loading" }
    | { state: "downloading"; progress?: number }
    | { state: "unavailable"; detail: string };
};

export type ModelList = { object: "list"; data: ModelObject[] };
