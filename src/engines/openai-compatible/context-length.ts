/**
 * Learns a model's context length from its upstream when the model entry does not give it:
 * vLLM and SGLang list `max_model_len` in `/v1/models`; llama-server says its per-slot context in
 * `/props` (`default_generation_settings.n_ctx`); Ollama's `/api/show` gives `num_ctx` when the
 * model sets one (Ollama cuts longer prompts silently: without it, its default of 4096 is assumed
 * and the operator told to set `context_length`); OpenAI-compatible gateways (a Turnpike node,
 * OpenRouter, LiteLLM) list `context_length` or `context_window`; OpenAI itself says nothing: the entry must.
 */
import type { UpstreamKind } from "./config-schema.ts";
import type { UpstreamClient } from "./upstream-client.ts";

/** Ollama's default context when neither the entry nor the model sets one. */
export const OLLAMA_DEFAULT_CONTEXT = 4096;

export type ContextLengthProbe = {
  client: UpstreamClient;
  /** The kind, when known (else each probe is tried in turn). */
  kind: UpstreamKind | undefined;
  /** Members' base URLs ending in `/v1`, tried in order until one answers. */
  baseUrls: readonly string[];
  /** The model's name upstream. */
  model: string;
  signal: AbortSignal;
};

/** What was learnt: the length, and a note for the operator when it is a guess. */
export type ContextLengthFound = { contextLength: number; note?: string } | { contextLength: undefined; reason: string };

const positive = (value: unknown): number | undefined => (typeof value === "number" && Number.isInteger(value) && value > 0 ? value : undefined);

/** The server's root for a base URL ending in `/v1`. */
export function originOf(baseUrl: string): string {
  return baseUrl.replace(/\/+$/, "").replace(/\/v1$/, "");
}

async function fromModelsList(probe: ContextLengthProbe, baseUrl: string): Promise<number | undefined> {
  const list = (await probe.client.getJson(`${baseUrl}/models`, probe.signal)) as { data?: unknown } | undefined;
  if (!Array.isArray(list?.data)) return undefined;
  const models = list.data as { id?: unknown; max_model_len?: unknown; context_length?: unknown; context_window?: unknown }[];
  const model = models.find((entry) => entry.id === probe.model) ?? (models.length === 1 ? models[0] : undefined);
  return positive(model?.max_model_len) ?? positive(model?.context_length) ?? positive(model?.context_window);
}

async function fromLlamaServerProps(probe: ContextLengthProbe, baseUrl: string): Promise<number | undefined> {
  const props = (await probe.client.getJson(`${originOf(baseUrl)}/props`, probe.signal)) as
    | { default_generation_settings?: { n_ctx?: unknown }; n_ctx?: unknown }
    | undefined;
  return positive(props?.default_generation_settings?.n_ctx) ?? positive(props?.n_ctx);
}

async function fromOllamaShow(probe: ContextLengthProbe, baseUrl: string): Promise<ContextLengthFound | undefined> {
  const show = (await probe.client.getJson(`${originOf(baseUrl)}/api/show`, probe.signal, { model: probe.model })) as
    | { parameters?: unknown; model_info?: Record<string, unknown> }
    | undefined;
  if (show === undefined) return undefined;
  const numCtx = typeof show.parameters === "string" ? /(?:^|\n)\s*num_ctx\s+(\d+)/.exec(show.parameters)?.[1] : undefined;
  if (numCtx !== undefined) return { contextLength: Number(numCtx) };
  const trained = Object.entries(show.model_info ?? {}).find(([key]) => key.endsWith(".context_length"))?.[1];
  const assumed = Math.min(positive(trained) ?? OLLAMA_DEFAULT_CONTEXT, OLLAMA_DEFAULT_CONTEXT);
  return {
    contextLength: assumed,
    note: `Ollama does not say the context it runs this model with; assuming ${assumed} tokens (its default). Set the entry's context_length to Ollama's num_ctx (OLLAMA_CONTEXT_LENGTH): Ollama cuts longer prompts silently.`,
  };
}

/** The context length the upstreams serve the model with, from the first member that says. */
export async function detectContextLength(probe: ContextLengthProbe): Promise<ContextLengthFound> {
  for (const baseUrl of probe.baseUrls) {
    if (probe.signal.aborted) break;
    if (probe.kind === "ollama") {
      const found = await fromOllamaShow(probe, baseUrl);
      if (found !== undefined) return found;
      continue;
    }
    if (probe.kind !== "llama-server") {
      const fromList = await fromModelsList(probe, baseUrl);
      if (fromList !== undefined) return { contextLength: fromList };
    }
    if (probe.kind === "openai") continue;
    if (probe.kind === undefined || probe.kind === "llama-server") {
      const fromProps = await fromLlamaServerProps(probe, baseUrl);
      if (fromProps !== undefined) return { contextLength: fromProps };
    }
    if (probe.kind === undefined) {
      const found = await fromOllamaShow(probe, baseUrl);
      if (found !== undefined) return found;
    }
  }
  if (probe.kind === "openai") return { contextLength: undefined, reason: "the upstream does not publish the model's context length (OpenAI does not): set the model entry's context_length" };
  return { contextLength: undefined, reason: "no upstream server said the model's context length: set the model entry's context_length, or check the servers are up" };
}
