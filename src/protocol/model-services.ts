/**
 * What a model serves and the endpoints each service answers at: `/v1/models` lists a model's
 * as `endpoints`, the catalog refuses the rest, the console shows them. Dependency-free, so the
 * console bundles it as it is.
 */

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

/** The services a model's `endpoints` show it serves, in `MODEL_SERVICES` order: a service counts when any of its endpoints is listed. */
export function servicesAt(endpoints: readonly string[]): ModelService[] {
  return MODEL_SERVICES.filter((service) => SERVICE_ENDPOINTS[service].some((endpoint) => endpoints.includes(endpoint)));
}
