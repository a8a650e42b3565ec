/**
 * The models on offer: id, engine, context length, modalities, pricing, capabilities, status.
 * `/v1/models` and the console read it; the chat route finds engines through it.
 */
import type { Engine, EngineMember, EngineStatus } from "../engines/engine.ts";
import { EndpointNotServedError, ModelNotFoundError, ModelNotReadyError } from "../protocol/errors.ts";
import type { ModelObject, ModelService, MoneyPrices } from "../protocol/models.ts";
import { INFILL_ENDPOINTS, SERVICE_ENDPOINTS } from "../protocol/models.ts";
import type { Pricing } from "../protocol/price.ts";

/** Credit units per million tokens (the type lives with the price formula). */
export type { Pricing };

export type CatalogModel = {
  id: string;
  ownedBy: string;
  /** Seconds since the epoch, as OpenAI's `created`. */
  created: number;
  engine: Engine;
  /** Context length to report until the engine is loaded and knows its own. */
  configuredContextLength: number;
  pricing: Pricing;
  /** The same prices in money, when the operator set what a credit is worth (`credit_value`). */
  moneyPricing?: { currency: string; perMillionTokens: MoneyPrices };
  outputModalities: readonly string[];
  /** What the entry declares it serves (`serves`); undefined: what the engine says. */
  serves?: readonly ModelService[];
  /** An embedding's input tokens are priced at this (credit units per million) instead of `pricing.prompt`. */
  embeddingsPrice?: number;
  /** The `dimensions` an embeddings request may ask for below the full length (Matryoshka); undefined: only the full length. */
  matryoshka?: true | readonly number[];
};

/** What a model serves: its entry's `serves`, else its engine's, else chat and completions. */
export function servicesOf(model: CatalogModel): readonly ModelService[] {
  return model.serves ?? model.engine.capabilities().services ?? DEFAULT_SERVICES;
}

const DEFAULT_SERVICES: readonly ModelService[] = ["chat", "completions"];

/** What a service is called in a refusal. */
const SERVICE_NAMES: Record<ModelService, string> = { chat: "chat", completions: "text completions", embeddings: "embeddings" };

/**
 * Refuses (400 `model_does_not_support_endpoint`) a request to an endpoint its model does not
 * serve, naming the model and what it serves: checked at parse, before anything else runs.
 */
export function requireService(model: CatalogModel, service: ModelService): void {
  const services = servicesOf(model);
  if (services.includes(service)) return;
  // What a GGUF serves is read from it once loaded: until then a refusal could be wrong (an
  // embedding model's embeddings refused as a chat model's), so the model is not ready yet.
  const state = model.engine.status().state;
  if (model.serves === undefined && model.engine.capabilities().services === undefined && (state === "loading" || state === "downloading")) {
    throw new ModelNotReadyError(`Model '${model.id}' is loading. Retry in a moment.`, 5);
  }
  const serves = services.map((each) => `${SERVICE_NAMES[each]} (${SERVICE_ENDPOINTS[each].join(", ")})`).join("; ");
  throw new EndpointNotServedError(`Model '${model.id}' does not serve ${SERVICE_NAMES[service]}: it serves ${serves}.`);
}


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

  /** True when every model is serving (ready, or degraded: some of its upstreams down). */
  allReady(): boolean {
    return this.list().every((model) => isServing(model.engine.status()));
  }

  async close(): Promise<void> {
    await Promise.all(this.list().map((model) => model.engine.close()));
  }
}

/** Whether an engine in this state takes requests. */
export function isServing(status: EngineStatus): boolean {
  return status.state === "ready" || status.state === "degraded";
}

function statusText(status: EngineStatus, members: readonly EngineMember[]): ModelObject["status"] {
  const healthy = members.filter((member) => member.healthy).length;
  const counts = { members_healthy: healthy, members_total: members.length };
  switch (status.state) {
    case "ready":
      return { state: "ready", ...counts };
    case "degraded":
      return { state: "degraded", ...counts };
    case "loading":
      return { state: "loading" };
    case "downloading":
      return status.progress === undefined ? { state: "downloading" } : { state: "downloading", progress: Number(status.progress.toFixed(4)) };
    case "unavailable":
      return { state: "unavailable", detail: status.detail, ...counts };
  }
}

/** The `/v1/models` entry for a model. */
export function describeModel(model: CatalogModel): ModelObject {
  // Read live: an upstream's kind (and so what it supports) may be known only once it was probed.
  const capabilities = model.engine.capabilities();
  const services = servicesOf(model);
  const embeds = services.includes("embeddings");
  return {
    id: model.id,
    object: "model",
    created: model.created,
    owned_by: model.ownedBy,
    context_length: model.engine.info()?.contextLength ?? model.configuredContextLength,
    modalities: { input: [...capabilities.inputModalities], output: [...model.outputModalities] },
    pricing: {
      prompt: model.pricing.prompt,
      cached_prompt: model.pricing.cachedPrompt,
      completion: model.pricing.completion,
      ...(embeds ? { embeddings: model.embeddingsPrice ?? model.pricing.prompt } : {}),
      ...(model.moneyPricing === undefined ? {} : { currency: model.moneyPricing.currency, money: { ...model.moneyPricing.perMillionTokens } }),
    },
    // A text completion's `suffix` where the model fills in the middle.
    supported_parameters: [...capabilities.supportedParameters, ...capabilities.vendorFields, ...(capabilities.fillInTheMiddle === true ? ["suffix"] : [])],
    // llama-server's `/infill` too, where the model serves completions and fills in the middle.
    endpoints: services.flatMap((service) => (service === "completions" && capabilities.fillInTheMiddle === true ? [...SERVICE_ENDPOINTS[service], ...INFILL_ENDPOINTS] : SERVICE_ENDPOINTS[service])),
    ...(embeds ? { embeddings: { dimensions: capabilities.embeddingDimensions ?? null, matryoshka: model.matryoshka === undefined ? false : model.matryoshka === true ? true : [...model.matryoshka] } } : {}),
    status: statusText(model.engine.status(), model.engine.members()),
  };
}
