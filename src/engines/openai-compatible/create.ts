/**
 * Builds the engine of an upstream model entry: its pool of members, the API key the settings
 * read from the environment variable the entry names (never logged), and the engine over them.
 */
import type { Engine } from "../engine.ts";
import { queuingOf, type EngineEnvironment } from "../environment.ts";
import type { UpstreamModelEntry } from "./config-schema.ts";
import { credentialsSource, refusalDetail } from "./credentials.ts";
import { OpenAiCompatibleEngine } from "./openai-compatible-engine.ts";
import { createUpstreamPool, poolOptionsFromEntry } from "./pool.ts";
import { memberName, memberUrl, normalizeBaseUrl, withoutCredentials } from "./upstream-url.ts";

/**
 * The engine for an upstream entry, not yet open. Throws at start-up when the entry's
 * `api_key_env` names a variable that is not set (the message names the variable, never a value).
 */
export function createUpstreamEngine(entry: UpstreamModelEntry, environment: EngineEnvironment): Engine {
  const upstream = entry.upstream;
  const apiKeyEnv = upstream.api_key_env;
  const apiKey = apiKeyEnv === undefined ? undefined : environment.upstreamApiKeys[apiKeyEnv];
  if (apiKeyEnv !== undefined && (apiKey === undefined || apiKey === "")) {
    throw new Error(`Model '${entry.id}': the environment variable ${apiKeyEnv} (its upstream API key) is not set.`);
  }
  const onEvent = (level: "info" | "warn" | "error", message: string, fields: Record<string, unknown>) => environment.onUpstreamEvent(entry.id, level, message, fields);
  const pool = createUpstreamPool({
    ...poolOptionsFromEntry(upstream, apiKey, entry.id),
    queueSize: environment.queueSize,
    queuing: queuingOf(entry.id, environment),
    onOutcome: (member, outcome) => environment.onUpstreamOutcome(entry.id, member.id, outcome),
    onHealthChange: (member, healthy, refusal) =>
      onEvent(
        healthy ? "info" : "warn",
        healthy
          ? `upstream ${member.id} is back`
          : refusal !== undefined
            ? `${refusalDetail(`upstream ${member.id} (${member.url})`, refusal, credentialsSource(upstream, member.baseUrl))}; requests go to the other members`
            : `upstream ${member.id} is down: requests go to the other members`,
        { member: member.id, url: member.url },
      ),
  });
  // Metrics and clients know members by name only: the log says where each one is.
  onEvent("info", `model ${entry.id}: upstream members`, {
    members: upstream.urls.map((member, index) => ({ name: memberName(entry.id, member, index), url: withoutCredentials(normalizeBaseUrl(memberUrl(member))) })),
  });
  return new OpenAiCompatibleEngine({
    modelId: entry.id,
    upstream,
    ...(entry.context_length !== undefined ? { contextLength: entry.context_length } : {}),
    ...(entry.input_modalities !== undefined ? { inputModalities: entry.input_modalities } : {}),
    ...(entry.vendor_fields !== undefined ? { vendorFields: entry.vendor_fields } : {}),
    ...(entry.chat_template_kwargs !== undefined ? { chatTemplateKwargs: entry.chat_template_kwargs } : {}),
    ...(apiKey !== undefined ? { apiKey } : {}),
    ...(entry.fim !== undefined ? { fim: entry.fim } : {}),
    ...(entry.embeddings?.dimensions !== undefined ? { embeddingDimensions: entry.embeddings.dimensions } : {}),
    pool,
    onStatus: (status) => environment.onStatus(entry.id, status, undefined),
    onEvent,
  });
}
