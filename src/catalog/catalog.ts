/**
 * The models on offer: id, engine, context length, modalities, pricing, capabilities, status.
 * `/v1/models` and the console read it; the chat route finds engines through it.
 */
import type { Engine, EngineStatus } from "../engines/engine.ts";
import { ModelNotFoundError } from "../protocol/errors.ts";
import type { ModelObject } from "../protocol/models.ts";

/** Credit units per million tokens. */
export type Pricing = { prompt: number; cachedPrompt: number; completion: number };

export type CatalogModel = {
  id: string;
  ownedBy: string;
  /** Seconds since the epoch, as OpenAI's `created`. */
  created: number;
  engine: Engine;
  /** Context length to report until the engine is loaded and knows its own. */
  configuredContextLength: number;
  pricing: Pricing;
  /** What the model reads: `["text"]`, or `["text", "image"]` for a vision model (image_url parts are refused otherwise). */
  inputModalities: string[];
  outputModalities: string[];
  supportedParameters: string[];
};

/** The request parameters every llama.cpp model honours today. */
export const LLAMACPP_SUPPORTED_PARAMETERS = [
  "max_tokens",
  "max_completion_tokens",
  "temperature",
  "top_p",
  "frequency_penalty",
  "presence_penalty",
  "logit_bias",
  "logprobs",
  "top_logprobs",
  "n",
  "stop",
  "seed",
  "response_format",
  "tools",
  "tool_choice",
  "parallel_tool_calls",
  "stream",
  "stream_options",
  "user",
];

export const FREE: Pricing = { prompt: 0, cachedPrompt: 0, completion: 0 };

export class Catalog {
  readonly #models: Map<string, CatalogModel>;

  constructor(models: CatalogModel[]) {
    this.#models = new Map(models.map((model) => [model.id, model]));
  }

  /** The model with this id, or a 404 `model_not_found`. */
  get(id: string): CatalogModel {
    const model = this.#models.get(id);
    if (model === undefined) throw new ModelNotFoundError(id);
    return model;
  }

  list(): CatalogModel[] {
    return [...this.#models.values()];
  }

  /** True when every model is ready to serve. */
  allReady(): boolean {
    return this.list().every((model) => model.engine.status().state === "ready");
  }

  async close(): Promise<void> {
    await Promise.all(this.list().map((model) => model.engine.close()));
  }
}

function statusText(status: EngineStatus): ModelObject["status"] {
  switch (status.state) {
    case "ready":
      return { state: "ready" };
    case "loading":
      return { state: "loading" };
    case "downloading":
      return status.progress === undefined ? { state: "downloading" } : { state: "downloading", progress: Number(status.progress.toFixed(4)) };
    case "unavailable":
      return { state: "unavailable", detail: status.detail };
  }
}

/** The `/v1/models` entry for a model. */
export function describeModel(model: CatalogModel): ModelObject {
  return {
    id: model.id,
    object: "model",
    created: model.created,
    owned_by: model.ownedBy,
    context_length: model.engine.info()?.contextLength ?? model.configuredContextLength,
    modalities: { input: model.inputModalities, output: model.outputModalities },
    pricing: { prompt: model.pricing.prompt, cached_prompt: model.pricing.cachedPrompt, completion: model.pricing.completion },
    supported_parameters: model.supportedParameters,
    status: statusText(model.engine.status()),
  };
}
