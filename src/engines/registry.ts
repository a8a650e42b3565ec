/**
 * Builds the engine a model entry names: `path`/`hf` → the embedded llama.cpp engine,
 * `upstream` → a pool of OpenAI-compatible servers. The one place that knows every engine kind;
 * `main.ts` and the catalog see only the `Engine` interface.
 */
import type { Llama } from "node-llama-cpp";
import type { Engine, EngineStatus } from "./engine.ts";
import type { LlamaCppModelOptions } from "./llamacpp/config-schema.ts";
import { LlamaCppEngine } from "./llamacpp/llamacpp-engine.ts";
import type { DownloadProgress, HuggingFaceHub } from "./llamacpp/model-file.ts";
import type { UpstreamModelOptions } from "./openai-compatible/config-schema.ts";
import { createUpstreamEngine } from "./openai-compatible/create.ts";
import type { MemberOutcome } from "./openai-compatible/pool-types.ts";

/** What every engine may need from the process: settings, the shared llama.cpp runtime, logs. */
export type EngineEnvironment = {
  dataDir: string;
  /** The shared llama.cpp runtime (loaded once per process, on first use). */
  llama: () => Promise<Llama>;
  /** Defaults for embedded models. */
  contextSize: number;
  parallel: number;
  queueSize: number;
  threads: number;
  /** Upstream API keys by the variable an entry names (`api_key_env`), read once with the settings; never logged. */
  upstreamApiKeys: Readonly<Record<string, string>>;
  /** Where `hf:` sources are downloaded from, and the token sent with them. */
  hub: HuggingFaceHub;
  onProgress: (modelId: string, progress: DownloadProgress) => void;
  onStatus: (modelId: string, status: EngineStatus, source: string | undefined) => void;
  /** Operator-facing events of upstream pools (a member down, an upstream refusing our key). */
  onUpstreamEvent: (modelId: string, level: "info" | "warn" | "error", message: string, fields: Record<string, unknown>) => void;
  /** How each request to an upstream member ended (for per-member metrics). */
  onUpstreamOutcome: (modelId: string, memberId: string, outcome: MemberOutcome) => void;
};

/**
 * A model entry as the engines read it: its id, what it reads, and each engine's own options
 * (the settings' model entries are these; `config/` composes their schema from the engines').
 */
export type EngineEntry = LlamaCppModelOptions &
  UpstreamModelOptions & {
    id: string;
    /** What the model reads; default text only. */
    input_modalities?: readonly ("text" | "image")[];
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
    threads: environment.threads,
    onProgress: (progress) => environment.onProgress(entry.id, progress),
    onStatus: (status) => {
      // Clients see a reason without paths; the log names where the model comes from (a
      // download URL without credentials or query, which may hold a token).
      const source = status.state === "unavailable" ? (entry.path ?? entry.hf?.replace(/\/\/[^/@]*@/, "//").replace(/[?#].*$/, "")) : undefined;
      environment.onStatus(entry.id, status, source);
    },
  });
}
