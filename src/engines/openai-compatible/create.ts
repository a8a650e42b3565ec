/**
 * Builds the engine of an upstream model entry: its pool of members, the API key read from the
 * environment variable the entry names (never logged), and the engine over them.
 */
import type { ModelEntry, UpstreamEntry } from "../../config/schema.ts";
import type { Engine } from "../engine.ts";
import type { EngineEnvironment } from "../registry.ts";
import { OpenAiCompatibleEngine, normalizeBaseUrl } from "./openai-compatible-engine.ts";
import type { UpstreamPool } from "./pool-types.ts";

/** What the pool is built from (the pool module's `createUpstreamPool` takes these). */
export type UpstreamPoolOptions = {
  modelId: string;
  upstream: UpstreamEntry;
  /** Members' base URLs, normalized to end in `/v1`. */
  baseUrls: string[];
  /** For health probes that need it; never logged. */
  apiKey: string | undefined;
  /** Requests that may wait for a member, per model; one more gets 503. */
  queueSize: number;
  onEvent: (level: "info" | "warn" | "error", message: string, fields: Record<string, unknown>) => void;
};

export type UpstreamPoolFactory = (options: UpstreamPoolOptions) => UpstreamPool;

/**
 * TODO(pool): the pool lands on its own branch as `./pool.ts` exporting `createUpstreamPool`;
 * once merged, make it the default here:
 *   import { createUpstreamPool } from "./pool.ts";
 *   ... createPool: UpstreamPoolFactory = createUpstreamPool
 */
const poolNotMerged: UpstreamPoolFactory = () => {
  throw new Error("upstream pools are not available in this build (the pool module is not merged yet)");
};

/**
 * The engine for an upstream entry, not yet open. Throws at start-up when the entry's
 * `api_key_env` names a variable that is not set (the message names the variable, never a value).
 */
export function createUpstreamEngine(
  entry: ModelEntry & { upstream: NonNullable<ModelEntry["upstream"]> },
  environment: EngineEnvironment,
  createPool: UpstreamPoolFactory = poolNotMerged,
): Engine {
  const upstream = entry.upstream;
  const apiKeyEnv = upstream.api_key_env;
  const apiKey = apiKeyEnv === undefined ? undefined : environment.env[apiKeyEnv];
  if (apiKeyEnv !== undefined && (apiKey === undefined || apiKey === "")) {
    throw new Error(`Model '${entry.id}': the environment variable ${apiKeyEnv} (its upstream API key) is not set.`);
  }
  const onEvent = (level: "info" | "warn" | "error", message: string, fields: Record<string, unknown>) => environment.onUpstreamEvent(entry.id, level, message, fields);
  const pool = createPool({
    modelId: entry.id,
    upstream,
    baseUrls: upstream.urls.map(normalizeBaseUrl),
    apiKey,
    queueSize: environment.queueSize,
    onEvent,
  });
  return new OpenAiCompatibleEngine({
    modelId: entry.id,
    upstream,
    ...(entry.context_length !== undefined ? { contextLength: entry.context_length } : {}),
    ...(entry.input_modalities !== undefined ? { inputModalities: entry.input_modalities } : {}),
    ...(entry.vendor_fields !== undefined ? { vendorFields: entry.vendor_fields } : {}),
    ...(apiKey !== undefined ? { apiKey } : {}),
    pool,
    onStatus: (status) => environment.onStatus(entry.id, status, undefined),
    onEvent,
  });
}
