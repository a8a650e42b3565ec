/**
 * Admission of one embeddings request, in the generation routes' order (`admitInOrder`): parse
 * (the schema's caps, the model, whether it serves embeddings, `dimensions` against what the
 * model allows), permission, rate limits on the engine's cheap lower bound, the quota pre-check,
 * the engine's `prepareEmbeddings` (tokenized and checked: each input within the context), the
 * exact charge, and the hold. The hold reserves the inputs' tokens at the embeddings price (the
 * entry's `pricing.embeddings`, else its prompt price) and no completion.
 */
import { requireService, type Catalog, type CatalogModel } from "../../../catalog/catalog.ts";
import type { EmbeddingRequest, Engine, PreparedEmbeddings } from "../../../engines/engine.ts";
import { EndpointNotServedError, InvalidRequestError, TooManyTokensError } from "../../../protocol/errors.ts";
import { embeddingInputsOf, embeddingsRequestSchema, EMBEDDING_LIMITS, type EmbeddingsRequest } from "../../../protocol/embeddings/request.ts";
import { parseWithSchema } from "../../../protocol/parse.ts";
import type { Admission } from "../../../billing/metering.ts";
import type { QueueTicket } from "../../../engines/fair-queue.ts";
import type { LimitAdmission } from "../../../limits/request-limits.ts";
import { validatedInWorker } from "../../json-body/json-body-parser.ts";
import { admitInOrder, type AdmitDependencies, type AdmitRequest } from "../../generation/admit.ts";

/** An engine that embeds (`prepareEmbeddings` and `boundEmbeddings` present). */
type EmbeddingEngine = Engine & Required<Pick<Engine, "prepareEmbeddings" | "boundEmbeddings">>;

/** A request validated and mapped: cheap work, nothing tokenized yet. */
export type ParsedEmbeddings = {
  model: CatalogModel;
  engine: EmbeddingEngine;
  request: EmbeddingRequest;
  /** The vector length asked for; undefined: the model's own. */
  dimensions: number | undefined;
  encoding: "float" | "base64";
};

/** An admitted request: what it answers with, and the engine's prepared work. */
export type EmbeddingsJob = ParsedEmbeddings & { prepared: PreparedEmbeddings };

export type AdmittedEmbeddings = {
  job: EmbeddingsJob;
  /** The rate-limit charge: `finish` it with the tokens used when the request ends. */
  limited: LimitAdmission;
  /** The hold: `settle` it when the request ends. */
  admission: Admission;
  /** Whose share it draws on (the default band: embeddings have no `service_tier`): handed to the engine with `run`. */
  ticket: QueueTicket;
};

/**
 * The model as the embeddings request is billed: its input tokens at the embeddings price (the
 * entry's `pricing.embeddings`, else the prompt price), nothing cached, no completion.
 */
export function billedForEmbeddings(model: CatalogModel): CatalogModel {
  const price = model.embeddingsPrice ?? model.pricing.prompt;
  return { ...model, pricing: { prompt: price, cachedPrompt: price, completion: 0 } };
}

/**
 * Refuses (400 naming `dimensions`) a length the model cannot give: more than its own, or less on
 * a model whose entry does not declare it Matryoshka-trained (or does not list that length).
 * `full` undefined: the model's length is not known yet (an upstream before its first answer), and
 * only what can be judged without it is.
 */
export function checkDimensions(model: CatalogModel, dimensions: number | undefined, full: number | undefined): void {
  if (dimensions === undefined || full === undefined || dimensions === full) return;
  if (dimensions > full) {
    throw new InvalidRequestError(`Invalid 'dimensions': model '${model.id}' makes vectors of ${full} dimensions; ask for ${full} or fewer.`, "dimensions");
  }
  const allowed = model.matryoshka;
  if (allowed === true || (allowed !== undefined && allowed.includes(dimensions))) return;
  const lengths = allowed === undefined ? `only ${full} (its entry does not declare it Matryoshka-trained: \`embeddings.matryoshka\`)` : [...allowed.filter((length) => length < full), full].join(", ");
  throw new InvalidRequestError(`Invalid 'dimensions': model '${model.id}' cannot shorten its vectors to ${dimensions} dimensions; it gives ${lengths}.`, "dimensions");
}

/** Validates the body, finds the model and checks it embeds: cheap, throws typed API errors. */
export function parseEmbeddings(catalog: Catalog, body: unknown): ParsedEmbeddings {
  // A large body was validated already, off the event loop, by the body worker.
  const request = validatedInWorker(body) ? (body as EmbeddingsRequest) : parseWithSchema(embeddingsRequestSchema, body);
  const model = catalog.get(request.model);
  requireService(model, "embeddings");
  const engine = model.engine;
  if (engine.prepareEmbeddings === undefined || engine.boundEmbeddings === undefined) {
    throw new EndpointNotServedError(`Model '${model.id}' does not serve embeddings: its entry declares them, but its engine cannot embed.`);
  }
  const dimensions = request.dimensions ?? undefined;
  checkDimensions(model, dimensions, engine.capabilities().embeddingDimensions);
  return {
    model,
    engine: engine as EmbeddingEngine,
    request: { inputs: embeddingInputsOf(request.input), truncate: request.truncate === true, ...(request.user == null ? {} : { user: request.user }) },
    dimensions,
    encoding: request.encoding_format ?? "float",
  };
}

/** Admits an embeddings request (see the file's comment) or throws the typed API error of the first check that refuses it. */
export async function admitEmbeddings(dependencies: Pick<AdmitDependencies, "catalog" | "metering" | "limits" | "flexMaxWaitMs">, input: AdmitRequest): Promise<AdmittedEmbeddings> {
  const parsed = parseEmbeddings(dependencies.catalog, input.body);
  const limit = EMBEDDING_LIMITS.tokensPerRequest;
  const { work, limited, admission, ticket } = await admitInOrder(dependencies, input, {
    model: billedForEmbeddings(parsed.model),
    least: () => {
      const bound = parsed.engine.boundEmbeddings(parsed.request);
      if (bound.atLeast > limit) throw new TooManyTokensError(bound.atLeast, limit, false);
      return { tokens: bound.atLeast, promptTokens: bound.atLeast, completionTokens: 0 };
    },
    prepare: async (): Promise<EmbeddingsJob> => {
      const prepared = await parsed.engine.prepareEmbeddings(parsed.request);
      // An upper bound (an upstream's: every byte a token) says nothing of the true count: the upstream's usage bills it.
      if (prepared.promptCount === "exact" && prepared.promptTokens > limit) throw new TooManyTokensError(prepared.promptTokens, limit, true);
      return { ...parsed, prepared };
    },
    charge: (job) => ({ tokens: job.prepared.promptTokens, promptTokens: job.prepared.promptTokens, maxTokens: 0, choices: 1, stream: false }),
  });
  return { job: work, limited, admission, ticket };
}
