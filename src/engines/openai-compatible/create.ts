/**
 * Builds the engine of an upstream model entry. Placeholder until the OpenAI-compatible engine
 * lands: such an entry is refused at start-up with a clear message.
 */
import type { ModelEntry } from "../../config/schema.ts";
import type { Engine } from "../engine.ts";
import type { EngineEnvironment } from "../registry.ts";

export function createUpstreamEngine(entry: ModelEntry & { upstream: NonNullable<ModelEntry["upstream"]> }, _environment: EngineEnvironment): Engine {
  throw new Error(`Model '${entry.id}': upstream engines are not available in this build.`);
}
