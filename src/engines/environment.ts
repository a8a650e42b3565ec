/** What every engine may need from the process: settings, the shared llama.cpp runtime, logs. */
import type { Llama } from "node-llama-cpp";
import type { EngineStatus } from "./engine.ts";
import type { ServiceTier } from "../protocol/service-tiers.ts";
import type { QueuingOptions } from "./fair-queue.ts";
import type { DownloadProgress, HuggingFaceHub } from "./llamacpp/model-file.ts";
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
  /** Requests one account may have waiting per model (`--queue-per-account`; 0: half of `queueSize`). */
  queuePerAccount?: number;
  /** Who gets a free slot (`--queue-policy`): `fair` by default. */
  queuePolicy?: "fair" | "fifo";
  /** Told how long each request waited for a model's slot or member, in which band, and how the wait ended (metrics). */
  onQueueWait?: (modelId: string, tier: ServiceTier, waitedMs: number, outcome: "served" | "left" | "refused") => void;
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

/** Requests one account may have waiting in a queue of `queueSize`: the setting, or half the queue (at least one). */
export function perAccountQueue(queueSize: number, queuePerAccount = 0): number {
  return queuePerAccount > 0 ? Math.min(queuePerAccount, queueSize) : Math.max(1, Math.ceil(queueSize / 2));
}

/** A model's queue settings: the per-account cap, and its waits reported under the model's id. */
export function queuingOf(modelId: string, environment: EngineEnvironment): QueuingOptions {
  return {
    maxWaitingPerAccount: perAccountQueue(environment.queueSize, environment.queuePerAccount),
    policy: environment.queuePolicy ?? "fair",
    onWaited: (tier, waitedMs, outcome) => environment.onQueueWait?.(modelId, tier, waitedMs, outcome),
  };
}
