/**
 * Builds the engine a model entry names: `path`/`hf` → the embedded llama.cpp engine,
 * `upstream` → a pool of OpenAI-compatible servers. The one place that knows every engine kind;
 * `main.ts` and the catalog see only the `Engine` interface.
 */
import type { Engine } from "./engine.ts";
import type { ModelService } from "../protocol/models.ts";
import type { LlamaCppModelOptions } from "./llamacpp/config-schema.ts";
import { LlamaCppEngine } from "./llamacpp/llamacpp-engine.ts";
import type { UpstreamModelOptions } from "./openai-compatible/config-schema.ts";
import { createUpstreamEngine } from "./openai-compatible/create.ts";

// What every engine may need from the process lives in `environment.ts`, which the engines import without a circle.
export type { EngineEnvironment } from "./environment.ts";
import { queuingOf, type EngineEnvironment } from "./environment.ts";

/**
 * A model entry as the engines read it: its id, what it reads, and each engine's own options
 * (the settings' model entries are these; `config/` composes their schema from the engines').
 */
export type EngineEntry = LlamaCppModelOptions &
  UpstreamModelOptions & {
    id: string;
    /** What the model reads; default text only. */
    input_modalities?: readonly ("text" | "image")[];
    /** What the entry declares it serves (`chat`, `completions`, `embeddings`); default: what the engine finds. */
    serves?: readonly ModelService[];
    /** The entry's embeddings options (the vector's length). */
    embeddings?: { dimensions?: number };
    /** The FIM tokens as text, for an upstream whose server builds no FIM prompt (vLLM, SGLang). */
    fim?: { prefix: string; suffix: string; middle: string };
  };

/** The engine for a model entry, not yet open (`open()` loads it or reaches its upstreams). */
export function createEngine(entry: EngineEntry, environment: EngineEnvironment): Engine {
  if (entry.upstream !== undefined) return createUpstreamEngine({ ...entry, upstream: entry.upstream }, environment);
  return new LlamaCppEngine({
    modelId: entry.id,
    source: entry.path !== undefined ? { path: entry.path } : { remote: entry.hf! },
    dataDir: environment.dataDir,
    hub: environment.hub,
    llama: environment.llama,
    contextSize: entry.context_size ?? environment.contextSize,
    parallel: entry.parallel ?? environment.parallel,
    queueSize: environment.queueSize,
    queuing: queuingOf(entry.id, environment),
    threads: environment.threads,
    ...(entry.serves === undefined ? {} : { serves: entry.serves }),
    onProgress: (progress) => environment.onProgress(entry.id, progress),
    onStatus: (status) => {
      // Clients see a reason without paths; the log names where the model comes from (a
      // download URL without credentials or query, which may hold a token).
      const source = status.state === "unavailable" ? (entry.path ?? entry.hf?.replace(/\/\/[^/@]*@/, "//").replace(/[?#].*$/, "")) : undefined;
      environment.onStatus(entry.id, status, source);
    },
  });
}
