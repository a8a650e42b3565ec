/**
 * Chat completions as a dialect of the generation core: validate and map the body
 * (`protocol/chat-completions/to-generation.ts`), answer with a completion or chunks
 * (`from-generation.ts`), end a stream with `data: [DONE]` or an error event.
 */
import { validatedInWorker } from "../../json-body/json-body-parser.ts";
import { pooledRandomBytes } from "../../../store/random.ts";
import { requireService, type Catalog } from "../../../catalog/catalog.ts";
import { checkSupported } from "../../../engines/parameters.ts";
import { chatCompletionRequestSchema, type ChatCompletionRequest } from "../../../protocol/chat-completions/request.ts";
import type { ChatCompletion } from "../../../protocol/chat-completions/response.ts";
import { completeChatCompletion, streamChatCompletion, type ChatReplyShape, type ChatStreamEvent } from "../../../protocol/chat-completions/from-generation.ts";
import { imageUrlsOf, rejectUnsupported, toGenerationRequest, vendorFieldsOf } from "../../../protocol/chat-completions/to-generation.ts";
import { parseWithSchema } from "../../../protocol/parse.ts";
import { plainChatRequest } from "../../../protocol/chat-completions/plain-request.ts";
import { servedTier } from "../../../protocol/service-tiers.ts";
import { errorBody } from "../../errors.ts";
import type { ParsedGeneration, WireDialect } from "../../generation/dialect.ts";

export type { ChatReplyShape } from "../../../protocol/chat-completions/from-generation.ts";

/**
 * Validates the body, finds the model and maps the request to the generation core. Cheap (linear
 * in the body, which the request caps bound): no schema translation, grammar, template or
 * tokenizer runs here. Throws typed API errors.
 */
export function parseChatCompletion(catalog: Catalog, body: unknown): ParsedGeneration<ChatReplyShape> {
  // A large body was validated already, off the event loop, by the body worker; the common plain
  // request is validated without zod (`plain-request.ts`), anything else by the schema.
  const request = validatedInWorker(body) ? (body as ChatCompletionRequest) : (plainChatRequest(body) ?? parseWithSchema(chatCompletionRequestSchema, body));
  const model = catalog.get(request.model);
  requireService(model, "chat");
  rejectUnsupported(request);
  const capabilities = model.engine.capabilities();
  const generationRequest = toGenerationRequest(request, { images: capabilities.inputModalities.includes("image") });
  const vendor = vendorFieldsOf(request);
  if (vendor !== undefined) generationRequest.vendor = vendor;
  checkSupported(model.id, capabilities, generationRequest);
  if (request.stream !== true) generationRequest.buffered = true;
  const choice = generationRequest.toolChoice;
  return {
    model,
    stream: request.stream === true,
    request: generationRequest,
    imageUrls: imageUrlsOf(request),
    ...(request.service_tier == null ? {} : { serviceTier: request.service_tier }),
    shape: {
      id: `chatcmpl-${pooledRandomBytes(18).toString("base64url")}`,
      created: Math.floor(Date.now() / 1000),
      model: model.id,
      choices: generationRequest.choices,
      includeUsage: request.stream_options?.include_usage === true,
      toolCallsOnly: generationRequest.tools !== undefined && (choice === "required" || typeof choice === "object"),
      logprobs: request.logprobs === true,
      serviceTier: servedTier(request.service_tier),
    },
  };
}

export const chatCompletionsDialect: WireDialect<ChatReplyShape, ChatCompletion, ChatStreamEvent> = {
  logName: "chat completion",
  parse: parseChatCompletion,
  async complete(shape, generation) {
    const { completion, outcome } = await completeChatCompletion(shape, generation);
    return { reply: completion, outcome };
  },
  stream: streamChatCompletion,
  endStream(_shape, sink, ending) {
    if (ending.kind === "done") return sink.done();
    sink.data(errorBody(ending.error));
    sink.end();
  },
};
