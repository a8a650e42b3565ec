/**
 * llama-server's `/infill` (fill-in-the-middle for editor plugins: llama.vim, llama.vscode) as a
 * dialect of the generation core: validate and map the body (`protocol/infill/to-generation.ts`),
 * answer in llama-server's shape (`from-generation.ts`), end a stream after its final event with
 * no `[DONE]` (as llama-server), or with an error event in Turnpike's usual error shape.
 *
 * `model` is optional, as editor plugins send none: absent (or blank), the catalog's one model
 * that serves text completions with fill-in-the-middle tokens and that the key (and its plan) may
 * use; a 400 naming `model` when there are several (or none). The model must serve completions and fill in the middle; its engine's
 * refusals (a vendor field it does not take, an upstream kind that cannot lay out `input_extra`)
 * name the field as the body spells it.
 */
import { validatedInWorker } from "../../json-body/json-body-parser.ts";
import { requireService, servicesOf, type Catalog, type CatalogModel } from "../../../catalog/catalog.ts";
import { checkSupported } from "../../../engines/parameters.ts";
import { InvalidRequestError, UnsupportedParameterError } from "../../../protocol/errors.ts";
import { infillRequestSchema, type InfillRequest } from "../../../protocol/infill/request.ts";
import type { InfillEvent } from "../../../protocol/infill/response.ts";
import { completeInfill, streamInfill, type InfillReplyShape } from "../../../protocol/infill/from-generation.ts";
import { toInfillGeneration } from "../../../protocol/infill/to-generation.ts";
import { parseWithSchema } from "../../../protocol/parse.ts";
import { errorBody } from "../../errors.ts";
import type { ParsedGeneration, WireDialect } from "../../generation/dialect.ts";

/** Whether a model serves `/infill`: text completions, with fill-in-the-middle tokens. */
function fillsInTheMiddle(model: CatalogModel): boolean {
  return servicesOf(model).includes("completions") && model.engine.capabilities().fillInTheMiddle === true;
}

/**
 * The model a request names, or (none named) the catalog's one model that fills in the middle
 * among those `usable` allows (the key's and its plan's models: see `route.ts`).
 */
function modelOf(catalog: Catalog, named: string | null | undefined, usable: (model: CatalogModel) => boolean): CatalogModel {
  if (named != null && named.trim() !== "") return catalog.get(named);
  const candidates = catalog.list().filter((model) => fillsInTheMiddle(model) && usable(model));
  if (candidates.length === 1) return candidates[0]!;
  if (candidates.length === 0) {
    throw new InvalidRequestError("No model on offer fills in the middle (text completions with fill-in-the-middle tokens) now; name one in 'model'. GET /v1/models lists them.", "model");
  }
  throw new InvalidRequestError(`Several models fill in the middle (${candidates.map((model) => `'${model.id}'`).join(", ")}): name one in 'model'.`, "model");
}

/** The body's names of the core's parameters, where they differ (for refusals). */
const INFILL_NAMES: Record<string, string> = { max_tokens: "n_predict" };

/**
 * Validates the body, finds the model and maps the request. Cheap (linear in the body, which the
 * request caps bound): nothing is tokenized here. Throws typed API errors.
 */
export function parseInfill(catalog: Catalog, body: unknown, usable: (model: CatalogModel) => boolean = () => true): ParsedGeneration<InfillReplyShape> {
  // A large body was validated already, off the event loop, by the body worker.
  const request = validatedInWorker(body) ? (body as InfillRequest) : parseWithSchema(infillRequestSchema, body);
  const model = modelOf(catalog, request.model, usable);
  requireService(model, "completions");
  const capabilities = model.engine.capabilities();
  if (capabilities.fillInTheMiddle !== true) {
    throw new UnsupportedParameterError(
      `Model '${model.id}' cannot fill in the middle: /infill needs a model with fill-in-the-middle tokens (<|fim_prefix|>, <|fim_suffix|>, <|fim_middle|> or its own spelling).`,
      "model",
    );
  }
  const generation = toInfillGeneration(request);
  checkSupported(model.id, capabilities, generation, (parameter) => INFILL_NAMES[parameter] ?? parameter);
  if (request.stream !== true) generation.buffered = true;
  return {
    model,
    stream: request.stream === true,
    request: generation,
    imageUrls: [],
    shape: {
      model: model.id,
      nIndent: request.n_indent ?? 0,
      maxPredictMs: request.t_max_predict_ms ?? 0,
      ...(request.response_fields != null ? { responseFields: request.response_fields } : {}),
      startedAt: performance.now(),
    },
  };
}

export const infillDialect: WireDialect<InfillReplyShape, Record<string, unknown>, InfillEvent> = {
  logName: "infill",
  parse: parseInfill,
  complete: completeInfill,
  stream: streamInfill,
  endStream(_shape, sink, ending) {
    // llama-server ends an /infill stream after its final event, with no `[DONE]` line.
    if (ending.kind === "failed") sink.data(errorBody(ending.error));
    sink.end();
  },
};
