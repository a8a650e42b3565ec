/**
 * The Responses API as a dialect of the generation core: validate and map the body
 * (`protocol/responses/to-generation.ts`, with the stored conversation a `previous_response_id`
 * continues), answer with the response resource or its stream of events
 * (`protocol/responses/from-generation.ts`), keep the response once settled (`settled`: the
 * stored row the terminal event and `GET` show alike), end a stream with the terminal event.
 * Its prompt is prepared by its own step (`preparePrompt`): `truncation: "auto"` fits it to the
 * context, and the engine's refusals name fields as the Responses API spells them.
 */
import { requireService, type Catalog } from "../../../catalog/catalog.ts";
import { checkSupported } from "../../../engines/parameters.ts";
import type { ChatParameter } from "../../../engines/parameters.ts";
import type { GenerationOutcome, GenerationRequest } from "../../../protocol/generation.ts";
import type { Engine, PreparedGeneration } from "../../../engines/engine.ts";
import type { PromptBound } from "../../../engines/prompt-bound.ts";
import { ApiError, ShuttingDownError, UnsupportedParameterError } from "../../../protocol/errors.ts";
import { parseWithSchema } from "../../../protocol/parse.ts";
import type { ResponseStreamEvent } from "../../../protocol/responses/events.ts";
import { ResponseAssembly, completeResponse, streamResponse, type ResponseShape } from "../../../protocol/responses/from-generation.ts";
import { responsesRequestSchema, type ResponsesRequest } from "../../../protocol/responses/request.ts";
import { echoedRequestFields, newResponseId, type ResponseError, type ResponseResource } from "../../../protocol/responses/resource.ts";
import { droppableItems, itemsOf, responsesParamOf, toGenerationRequest, type ConversationItem, type StoredInputItem } from "../../../protocol/responses/to-generation.ts";
import { validatedInWorker } from "../../json-body/json-body-parser.ts";
import { errorBody, toApiError } from "../../errors.ts";
import type { ParsedGeneration, WireDialect } from "../../generation/dialect.ts";

/** One response being answered: its assembly, its request as stored, and where it is kept. */
export type ResponseJob = {
  assembly: ResponseAssembly;
  request: ResponsesRequest;
  /** The request's own input items, each with its id: what `input_items` lists (empty for a response not kept). */
  inputItems: StoredInputItem[];
  /** Keeps the final resource (a stored response); absent for `store: false`. Set by the route once the key is known. */
  keep?: (resource: ResponseResource) => Promise<void>;
  /** The final resource, once the response ended: built once, so the reply, the stored row and the terminal event agree. */
  final?: ResponseResource;
};

/** The Responses API's spelling of the parameters the generation core checks. */
const RESPONSES_NAMES: Partial<Record<ChatParameter | string, string>> = {
  max_tokens: "max_output_tokens",
  response_format: "text.format",
  reasoning_effort: "reasoning.effort",
};

/**
 * Refuses custom tools a model's engine cannot serve (`custom_tools` in its capabilities), and
 * grammar formats it cannot enforce (`custom_tool_grammar`), naming the tool: never an
 * unconstrained call where the client asked for a grammar. An engine that enforces grammars only
 * under some tool choices (an upstream: a forced call) refuses the others itself.
 */
function checkCustomTools(modelId: string, supported: readonly string[], request: ResponsesRequest): void {
  for (const [index, tool] of (request.tools ?? []).entries()) {
    if (tool.type !== "custom") continue;
    if (!supported.includes("custom_tools")) {
      throw new UnsupportedParameterError(`Model '${modelId}' does not take custom tools ('${tool.name}'). GET /v1/models lists each model's supported_parameters.`, `tools[${index}]`);
    }
    if (tool.format?.type === "grammar" && !supported.includes("custom_tool_grammar")) {
      throw new UnsupportedParameterError(`Model '${modelId}' cannot enforce the grammar of the custom tool '${tool.name}'. GET /v1/models lists each model's supported_parameters.`, `tools[${index}].format`);
    }
  }
}

/**
 * Validates the body, finds the model and maps the request (with `history`, the items of the
 * responses it continues, oldest first) to the generation core. Cheap: linear in the body and the
 * history, which their caps bound. Throws typed API errors naming the field (`input[3].content`).
 */
export function parseResponse(catalog: Catalog, body: unknown, history: readonly ConversationItem[] = []): ParsedGeneration<ResponseJob> {
  // A large body was validated already, off the event loop, by the body worker.
  const request = validatedInWorker(body) ? (body as ResponsesRequest) : parseWithSchema(responsesRequestSchema, body);
  const model = catalog.get(request.model);
  requireService(model, "chat");
  const capabilities = model.engine.capabilities();
  const inputs = { images: capabilities.inputModalities.includes("image") };
  const requestFor = (dropItems: number): GenerationRequest => {
    const mapped = toGenerationRequest(request, inputs, history, { dropItems });
    if (request.stream !== true) mapped.buffered = true;
    if (request.prompt_cache_key != null) mapped.affinityKey = request.prompt_cache_key;
    return mapped;
  };
  const generationRequest = requestFor(0);
  checkSupported(model.id, capabilities, generationRequest, (parameter) => RESPONSES_NAMES[parameter] ?? parameter);
  checkCustomTools(model.id, capabilities.supportedParameters, request);
  const customTools = new Set((request.tools ?? []).flatMap((tool) => (tool.type === "custom" ? [tool.name] : [])));
  const echoed = echoedRequestFields(request);
  // The resource names the model as the catalog does.
  echoed.model = model.id;
  const logprobs = (request.include ?? []).includes("message.output_text.logprobs") || (request.top_logprobs ?? 0) > 0;
  const assembly = new ResponseAssembly({ id: newResponseId(), createdAt: Math.floor(Date.now() / 1000), echoed, customTools, logprobs });
  const truncation = request.truncation === "auto" ? { droppable: droppableItems(request, history), requestFor } : undefined;
  return {
    model,
    stream: request.stream === true,
    request: generationRequest,
    imageUrls: imageUrlsOf(request),
    ...(request.service_tier == null ? {} : { serviceTier: request.service_tier }),
    // Items get their ids (random bytes each) only for a response that is kept.
    shape: { assembly, request, inputItems: request.store === false ? [] : itemsOf(request) },
    prepare: (bound) => preparePrompt(model.engine, generationRequest, bound, assembly.shape, truncation),
  };
}

function isContextLengthExceeded(error: unknown): boolean {
  return error instanceof ApiError && error.code === "context_length_exceeded";
}

/**
 * An engine's refusal naming a field in chat completions' spelling (`response_format.json_schema.schema…`,
 * `tools[0].function.parameters…`, `messages`), named as the Responses API spells it; others as they are.
 */
export function inResponsesSpelling(error: unknown): unknown {
  if (!(error instanceof ApiError) || error.param === null) return error;
  const param = responsesParamOf(error.param);
  if (param === error.param) return error;
  // A dotted path quoted in the message is renamed too; a bare word (`messages`) is prose there.
  const message = /[.[]/.test(error.param) ? error.message.split(error.param).join(param) : error.message;
  return new ApiError(message, error.code, { param, headers: error.headers, cause: error });
}

/**
 * Prepares a response's prompt on its engine. With `truncation: "auto"`, a prompt too long for
 * the context leaves out the fewest oldest conversation items that make it fit (`droppableItems`:
 * never the instructions nor the last user message), found by a binary search over the number
 * left out (each try tokenizes once: log2 of the items' count tries), and says how many on the
 * resource (`truncated_input_items`). Without it, or when even the shortest prompt does not fit,
 * the engine's `context_length_exceeded` stands.
 */
async function preparePrompt(
  engine: Engine,
  request: GenerationRequest,
  bound: PromptBound,
  shape: ResponseShape,
  truncation: { droppable: number; requestFor: (dropItems: number) => GenerationRequest } | undefined,
): Promise<PreparedGeneration> {
  let tooLong: unknown;
  try {
    const prepared = await engine.prepare(request, bound);
    if (truncation !== undefined) shape.truncatedInputItems = 0;
    return prepared;
  } catch (error) {
    if (truncation === undefined || truncation.droppable === 0 || !isContextLengthExceeded(error)) throw inResponsesSpelling(error);
    tooLong = error;
  }
  let low = 1;
  let high = truncation.droppable;
  let fitting: { dropped: number; prepared: PreparedGeneration } | undefined;
  while (low <= high) {
    const middle = (low + high) >>> 1;
    try {
      fitting = { dropped: middle, prepared: await engine.prepare(truncation.requestFor(middle)) };
      high = middle - 1;
    } catch (error) {
      if (!isContextLengthExceeded(error)) throw inResponsesSpelling(error);
      low = middle + 1;
    }
  }
  if (fitting === undefined) throw inResponsesSpelling(tooLong);
  shape.truncatedInputItems = fitting.dropped;
  return fitting.prepared;
}

/** Every `input_image` URL of the request's messages, with its param (`input[2].content[1].image_url`). */
function imageUrlsOf(request: ResponsesRequest) {
  const found: Array<{ url: string; param: string }> = [];
  if (!Array.isArray(request.input)) return found;
  request.input.forEach((item, index) => {
    if (item.type !== "message" || typeof item.content === "string") return;
    item.content.forEach((part, partIndex) => {
      if (part.type === "input_image" && part.image_url != null) found.push({ url: part.image_url, param: `input[${index}].content[${partIndex}].image_url` });
    });
  });
  return found;
}

/** The spec's error of a failed response, from the error that failed it. */
export function responseErrorOf(error: unknown): ResponseError {
  const apiError = toApiError(error);
  return { code: apiError.code, message: apiError.message };
}

/** The final resource of a response that ended (`failure`: the error a failed generation threw). */
function finalOf(job: ResponseJob, outcome: GenerationOutcome | undefined, failure: unknown): ResponseResource {
  job.final ??= failure === undefined ? job.assembly.finalResource(outcome) : job.assembly.finalResource(outcome, responseErrorOf(failure));
  return job.final;
}

export const responsesDialect: WireDialect<ResponseJob, ResponseResource, ResponseStreamEvent> = {
  logName: "response",
  parse: (catalog, body) => parseResponse(catalog, body),
  async complete(job, generation) {
    const outcome = await completeResponse(job.assembly, generation);
    return { reply: finalOf(job, outcome, undefined), outcome };
  },
  stream: (job, generation, outcome) => streamResponse(job.assembly, generation, outcome),
  eventName: (event) => event.type,
  async settled(job, end) {
    // A shutdown cut it: a failed response (its tokens so far are billed), not one its client cancelled.
    // A cut one (its client left, or a cancel: 499) is cancelled, whatever the engine threw as it stopped.
    const failure = end.status === 499 ? undefined : (end.failure ?? (end.status === 503 ? new ShuttingDownError() : undefined));
    const resource = finalOf(job, end.outcome, failure);
    if (job.keep !== undefined) await job.keep(resource);
  },
  endStream(job, sink, ending) {
    const assembly = job.assembly;
    if (ending.kind === "failed") {
      // The items left open end incomplete; then the error and the failed response, never a normal end; `[DONE]` last, as every Open Responses stream ends.
      const error = errorBody(ending.error).error;
      const failed = job.final?.status === "failed" ? job.final : assembly.finalResource(ending.outcome, { code: error.code, message: error.message });
      const events = [
        ...assembly.close(),
        { type: "error" as const, error: { type: error.type, code: error.code, message: error.message, param: error.param } },
        { type: "response.failed" as const, response: failed },
      ].map((event) => assembly.number(event));
      sink.many(events.map((event) => [event.type, event] as const));
      sink.done();
      return;
    }
    const resource = finalOf(job, ending.outcome, undefined);
    const type = resource.status === "completed" ? "response.completed" : resource.status === "incomplete" ? "response.incomplete" : "response.failed";
    sink.event(type, assembly.number({ type, response: resource }));
    // The Open Responses stream ends with a literal `[DONE]`, as chat completions' does.
    sink.done();
  },
};
