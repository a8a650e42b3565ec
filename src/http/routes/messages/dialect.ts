/**
 * Anthropic's Messages API as a dialect of the generation core: validate and map the body
 * (`protocol/anthropic-messages/to-generation.ts`), answer with the `message` or its stream of
 * events (`protocol/anthropic-messages/from-generation.ts`), end a stream with `message_delta` and
 * `message_stop` (or the `error` event), keep it alive with `ping` events. Its prompt is prepared
 * by its own step: the prompt's count is kept for `message_start`, and the engine fits the
 * request's `max_tokens` to the context (`fitMaxTokens`): Claude Code asks for 32,000 tokens or
 * more whatever the model, and a small model's context leaves less.
 */
import { createHash } from "node:crypto";
import { requireService, type Catalog, type CatalogModel } from "../../../catalog/catalog.ts";
import type { PreparedGeneration } from "../../../engines/engine.ts";
import { checkSupported } from "../../../engines/parameters.ts";
import type { PromptBound } from "../../../engines/prompt-bound.ts";
import { anthropicErrorBody, anthropicErrorOf } from "../../../protocol/anthropic-messages/errors.ts";
import { completeMessage, MessageAssembly, streamMessage } from "../../../protocol/anthropic-messages/from-generation.ts";
import { newMessageId, type Message, type MessageStreamEvent } from "../../../protocol/anthropic-messages/message.ts";
import { countTokensRequestSchema, messagesRequestSchema, type CountTokensRequest, type MessagesRequest } from "../../../protocol/anthropic-messages/request.ts";
import { cachedPrefixOf, imageUrlsOf, MESSAGES_PARAMETER_NAMES, toGenerationRequest } from "../../../protocol/anthropic-messages/to-generation.ts";
import { ApiError } from "../../../protocol/errors.ts";
import type { GenerationRequest } from "../../../protocol/generation.ts";
import { parseWithSchema } from "../../../protocol/parse.ts";
import { toApiError, type ErrorFormat } from "../../errors.ts";
import type { ParsedGeneration, WireDialect } from "../../generation/dialect.ts";
import { validatedInWorker } from "../../json-body/json-body-parser.ts";

/** Errors in Anthropic's shape, with the `request-id` header: the Messages routes' `errorFormat`. */
export const anthropicErrorFormat: ErrorFormat = (error, requestId) => {
  const answer = anthropicErrorOf(error);
  return { status: answer.status, headers: { ...answer.headers, "request-id": requestId }, body: anthropicErrorBody(answer, requestId) };
};

/** A generation that stopped before its end without anyone cutting it (its engine closed): an error, never a normal stop. */
function stoppedShortError(): ApiError {
  return new ApiError("The model's engine stopped this message before it finished (it was unloaded or is restarting). Retry.", "internal_error");
}

/**
 * An engine's refusal naming a field in chat completions' spelling (`tools[0].function.parameters…`),
 * named as the Messages API spells it (`tools[0].input_schema…`); others as they are.
 */
export function inMessagesSpelling(error: unknown): unknown {
  if (!(error instanceof ApiError) || error.param === null) return error;
  const param = error.param.replace(/^tools\[(\d+)\]\.function\.parameters/, "tools[$1].input_schema").replace(/^response_format.*$/, "output_format");
  if (param === error.param) return error;
  return new ApiError(error.message.split(error.param).join(param), error.code, { param, headers: error.headers, cause: error });
}

/** The model, its inputs, and the generation request of a validated creation or token count (refusing what the model cannot honour). */
export function mapMessages(catalog: Catalog, request: MessagesRequest | CountTokensRequest): { model: CatalogModel; generation: GenerationRequest } {
  const model = catalog.get(request.model);
  requireService(model, "chat");
  const capabilities = model.engine.capabilities();
  const generation = toGenerationRequest(request, { images: capabilities.inputModalities.includes("image"), vendorFields: capabilities.vendorFields });
  checkSupported(model.id, capabilities, generation, (parameter) => MESSAGES_PARAMETER_NAMES[parameter] ?? parameter);
  return { model, generation };
}

/** Prepares the prompt on its engine, naming fields as the Messages API does in its refusals; the prompt's count is kept for `message_start`. */
async function preparePrompt(model: CatalogModel, request: GenerationRequest, bound: PromptBound, assembly: MessageAssembly): Promise<PreparedGeneration> {
  try {
    const prepared = await model.engine.prepare(request, bound);
    assembly.shape.promptTokens = prepared.promptTokens;
    return prepared;
  } catch (error) {
    throw inMessagesSpelling(error);
  }
}

/** Validates a creation's body, finds the model and maps the request. Cheap: linear in the body. */
export function parseMessages(catalog: Catalog, body: unknown): ParsedGeneration<MessageAssembly> {
  // A large body was validated already, off the event loop, by the body worker.
  const request = validatedInWorker(body) ? (body as MessagesRequest) : parseWithSchema(messagesRequestSchema, body);
  const { model, generation } = mapMessages(catalog, request);
  // `cache_control` breakpoints: requests repeating the first one's prefix go to the upstream member holding it.
  const cached = cachedPrefixOf(request);
  if (cached !== undefined) generation.affinityKey = `cache_control:${createHash("sha256").update(JSON.stringify(cached)).digest("hex")}`;
  const stream = request.stream === true;
  if (!stream) generation.buffered = true;
  // `auto` and `standard_only` both ask for the default tier.
  const assembly = new MessageAssembly({ id: newMessageId(), model: model.id, serviceTier: "default" });
  return {
    model,
    stream,
    request: generation,
    imageUrls: imageUrlsOf(request),
    shape: assembly,
    prepare: (bound) => preparePrompt(model, generation, bound, assembly),
  };
}

/** Validates a token count's body (large ones in the body worker). */
export function parseCountTokens(body: unknown): CountTokensRequest {
  return validatedInWorker(body) ? (body as CountTokensRequest) : parseWithSchema(countTokensRequestSchema, body);
}

/** Prepares a token count's prompt as a creation prepares it (the same refusals, in the Messages spelling). */
export async function countPromptTokens(model: CatalogModel, request: GenerationRequest, bound?: PromptBound): Promise<number> {
  try {
    return (await model.engine.prepare(request, bound)).promptTokens;
  } catch (error) {
    throw inMessagesSpelling(error);
  }
}

export const messagesDialect: WireDialect<MessageAssembly, Message, MessageStreamEvent> = {
  logName: "message",
  parse: parseMessages,
  async complete(assembly, generation) {
    const outcome = await completeMessage(assembly, generation);
    const stop = assembly.stop(outcome);
    if (stop.reason === undefined) throw stoppedShortError();
    return { reply: assembly.message(stop.reason, stop.sequence, outcome.usage), outcome };
  },
  stream: streamMessage,
  eventName: (event) => event.type,
  keepAliveEvent: { name: "ping", payload: { type: "ping" } },
  endStream(assembly, sink, ending) {
    const stop = ending.kind === "done" ? assembly.stop(ending.outcome) : undefined;
    if (ending.kind === "failed" || stop?.reason === undefined || ending.outcome === undefined) {
      // After whatever was sent, the error event and nothing more (no `message_stop`).
      const error = anthropicErrorOf(toApiError(ending.kind === "failed" ? ending.error : stoppedShortError()));
      sink.event("error", { type: "error", error: { type: error.type, message: error.message } });
      sink.end();
      return;
    }
    const { usage } = ending.outcome;
    const events: MessageStreamEvent[] = [...(assembly.started ? [] : [assembly.messageStart(usage)]), ...assembly.close(), ...assembly.messageEnd(stop.reason, stop.sequence, usage)];
    sink.many(events.map((event) => [event.type, event] as const));
    sink.end();
  },
};
