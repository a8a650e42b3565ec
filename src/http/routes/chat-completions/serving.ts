/**
 * The work behind `POST /v1/chat/completions`, free of HTTP: validate, map to an engine request
 * (cheap), bound it before the engine's expensive `prepare` (see `admit.ts` for the order), and
 * turn engine parts into OpenAI completions or chunks.
 */
import { validatedInWorker } from "../../json-body/json-body-parser.ts";
import { pooledRandomBytes } from "../../../store/random.ts";
import type { Catalog, CatalogModel } from "../../../catalog/catalog.ts";
import type {
  EngineContentPart,
  EngineImage,
  EngineMessage,
  GenerationRequest,
  PreparedGeneration,
  ResponseFormat,
  ToolCall,
  ToolChoice,
  ToolDefinition,
} from "../../../engines/engine.ts";
import {
  chatCompletionRequestSchema,
  type ChatCompletionRequest,
  type ChatMessage,
  type ResponseFormatParam,
} from "../../../protocol/chat-completion-request.ts";
import { InvalidRequestError, UnsupportedParameterError } from "../../../protocol/errors.ts";
import { imageUrlProblem } from "../../../protocol/image-url.ts";
import type { ImageUrlPart } from "../../image-urls/image-url-guard.ts";
import { parseWithSchema } from "../../../protocol/parse.ts";

export type ChatCompletionJob = {
  id: string;
  /** Seconds since the epoch. */
  created: number;
  model: CatalogModel;
  stream: boolean;
  includeUsage: boolean;
  /** The reply can only be tool calls (`tool_choice` required or named): its content is null. */
  toolCallsOnly: boolean;
  /** Whether choices carry `logprobs`. */
  logprobs: boolean;
  prepared: PreparedGeneration;
};

/** Fields accepted by the schema that this release answers with a clear 400. */
function rejectUnsupported(request: ChatCompletionRequest): void {
  const unsupported = (param: string, what: string) => {
    throw new UnsupportedParameterError(`'${param}' is not supported yet: ${what}.`, param);
  };
  if (request.functions != null) unsupported("functions", "the deprecated 'functions' field is not supported; use 'tools'");
  if (request.function_call != null) unsupported("function_call", "the deprecated 'function_call' field is not supported; use 'tool_choice'");
  if (request.audio != null) unsupported("audio", "audio output is not available");
  if (request.modalities != null && request.modalities.some((modality) => modality !== "text")) {
    unsupported("modalities", "only text output is available");
  }
  if (request.stream_options != null && request.stream !== true) {
    throw new InvalidRequestError("'stream_options' is only allowed when 'stream' is true.", "stream_options");
  }
}

/** Request parameters a model may not support, each with the value that asks nothing of it. */
const CHECKED_PARAMETERS: ReadonlyArray<[keyof ChatCompletionRequest, unknown]> = [
  ["frequency_penalty", 0],
  ["presence_penalty", 0],
  ["logit_bias", undefined],
  ["logprobs", false],
  ["top_logprobs", undefined],
  ["n", 1],
  ["seed", undefined],
  ["stop", undefined],
  ["response_format", undefined],
  ["tools", undefined],
  ["tool_choice", undefined],
  ["parallel_tool_calls", undefined],
  ["temperature", undefined],
  ["top_p", undefined],
];

/** Vendor sampling fields a request may carry (see `GenerationRequest.vendor`). */
const VENDOR_PARAMETERS = ["top_k", "min_p", "repetition_penalty", "reasoning_effort", "chat_template_kwargs"] as const;

/**
 * Refuses what this model's engine would not honour (an upstream that silently ignores a field,
 * say) with a 400 naming the parameter, and collects the vendor fields it allows.
 */
function checkModelSupports(request: ChatCompletionRequest, model: CatalogModel): Record<string, unknown> | undefined {
  const { supportedParameters, vendorFields } = model.engine.capabilities();
  for (const [param, neutral] of CHECKED_PARAMETERS) {
    const value = request[param];
    if (value == null || value === neutral || (Array.isArray(value) && value.length === 0)) continue;
    if (supportedParameters.includes(param)) continue;
    throw new UnsupportedParameterError(
      `Model '${model.id}' does not support '${param}'. GET /v1/models lists each model's supported_parameters.`,
      param,
    );
  }
  let vendor: Record<string, unknown> | undefined;
  for (const param of VENDOR_PARAMETERS) {
    const value = request[param];
    if (value == null) continue;
    if (!vendorFields.includes(param)) {
      throw new UnsupportedParameterError(
        `Model '${model.id}' does not take '${param}': vendor sampling fields pass only to models whose entry allows them. GET /v1/models lists each model's supported_parameters.`,
        param,
      );
    }
    (vendor ??= {})[param] = value;
  }
  return vendor;
}

/** What the model can read besides text. */
export type ModelInputs = { images: boolean };

const TEXT_ONLY: ModelInputs = { images: false };

/**
 * Flattens content to text and collects its images; refuses parts this model cannot read and
 * malformed images, naming the part.
 */
function messageContent(message: ChatMessage, index: number, inputs: ModelInputs): { text: string; images: EngineImage[]; parts?: EngineContentPart[] } {
  const content = message.content;
  const images: EngineImage[] = [];
  if (content === null || content === undefined) return { text: "", images };
  if (typeof content === "string") return { text: content, images };
  const parts: EngineContentPart[] = [];
  const text = content
    .map((part, partIndex) => {
      const param = `messages[${index}].content[${partIndex}]`;
      switch (part.type) {
        case "text":
          parts.push({ type: "text", text: part.text });
          return part.text;
        case "refusal":
          parts.push({ type: "text", text: part.refusal });
          return part.refusal;
        case "image_url": {
          if (!inputs.images) {
            throw new InvalidRequestError(
              "This model does not accept images (image_url content parts); it reads text only. GET /v1/models lists each model's input modalities.",
              param,
              "model_does_not_support_images",
            );
          }
          const problem = imageUrlProblem(part.image_url.url);
          if (problem !== undefined) throw new InvalidRequestError(`Invalid image in '${param}': ${problem}.`, param, "invalid_image_url");
          const image: EngineImage = part.image_url.detail == null ? { url: part.image_url.url } : { url: part.image_url.url, detail: part.image_url.detail };
          images.push(image);
          parts.push({ type: "image", image });
          return "";
        }
        case "input_audio":
          throw new UnsupportedParameterError("This model does not accept audio (input_audio content parts); it reads text only.", param);
        case "file":
          throw new UnsupportedParameterError("This model does not accept files (file content parts); it reads text only.", param);
      }
    })
    .join("");
  return { text, images, parts };
}

/**
 * Maps messages to the engine's. Assistant tool calls keep their ids, and every `tool` message
 * must answer a call of an earlier assistant message (as OpenAI requires).
 */
function toEngineMessages(messages: readonly ChatMessage[], inputs: ModelInputs): EngineMessage[] {
  const callIds = new Set<string>();
  return messages.map((message, index): EngineMessage => {
    const { text: content, images, parts } = messageContent(message, index, inputs);
    // The parts as sent matter only where an image stands among them (an upstream forwards them).
    const ordered = images.length > 0 && parts !== undefined ? { parts } : {};
    switch (message.role) {
      case "system":
      case "developer":
        return { role: "system", content, name: message.name ?? undefined };
      case "user":
        return images.length > 0 ? { role: "user", content, name: message.name ?? undefined, images, ...ordered } : { role: "user", content, name: message.name ?? undefined };
      case "assistant": {
        // The schema checked that each call's arguments are a JSON text.
        const toolCalls = (message.tool_calls ?? []).map((call): ToolCall => {
          callIds.add(call.id);
          return { id: call.id, name: call.function.name, arguments: call.function.arguments };
        });
        return { role: "assistant", content, name: message.name ?? undefined, ...(toolCalls.length > 0 ? { toolCalls } : {}) };
      }
      case "tool":
        if (!callIds.has(message.tool_call_id)) {
          throw new InvalidRequestError(
            `The 'tool' message answers the tool call '${message.tool_call_id}', but no earlier assistant message made a call with that id. ` +
              "A 'tool' message must follow an assistant message whose 'tool_calls' include its 'tool_call_id'.",
            `messages[${index}].tool_call_id`,
          );
        }
        return { role: "tool", content, toolCallId: message.tool_call_id };
    }
  });
}

/** The response format for the engine (`json_schema` without a schema is any JSON object). */
function toResponseFormat(format: ResponseFormatParam | null | undefined): ResponseFormat | undefined {
  if (format == null || format.type === "text") return undefined;
  if (format.type === "json_object" || format.json_schema.schema == null) return { type: "json_object" };
  return {
    type: "json_schema",
    name: format.json_schema.name,
    schema: format.json_schema.schema,
    ...(format.json_schema.strict != null ? { strict: format.json_schema.strict } : {}),
  };
}

/** The tools and the tool choice; a choice that names no given tool is a 400 naming `tool_choice`. */
function toToolOptions(request: ChatCompletionRequest): Pick<GenerationRequest, "tools" | "toolChoice" | "parallelToolCalls"> {
  const tools: ToolDefinition[] = (request.tools ?? []).map((tool) => ({
    name: tool.function.name,
    ...(tool.function.description != null ? { description: tool.function.description } : {}),
    ...(tool.function.parameters != null ? { parameters: tool.function.parameters } : {}),
    ...(tool.function.strict != null ? { strict: tool.function.strict } : {}),
  }));
  const seen = new Set<string>();
  for (const [index, tool] of tools.entries()) {
    if (seen.has(tool.name)) throw new InvalidRequestError(`The function name '${tool.name}' is given twice; tool names must be unique.`, `tools[${index}].function.name`);
    seen.add(tool.name);
  }
  const choice = request.tool_choice;
  let toolChoice: ToolChoice | undefined;
  if (choice == null) toolChoice = undefined;
  else if (typeof choice === "string") toolChoice = choice;
  else toolChoice = { name: choice.function.name };
  if (toolChoice !== undefined && toolChoice !== "none" && toolChoice !== "auto" && tools.length === 0) {
    throw new InvalidRequestError("'tool_choice' requires 'tools': there is no tool to call.", "tool_choice");
  }
  if (typeof toolChoice === "object" && !seen.has(toolChoice.name)) {
    throw new InvalidRequestError(`'tool_choice' names the function '${toolChoice.name}', which is not among 'tools'.`, "tool_choice");
  }
  return {
    ...(tools.length > 0 ? { tools } : {}),
    ...(toolChoice !== undefined ? { toolChoice } : {}),
    ...(request.parallel_tool_calls != null ? { parallelToolCalls: request.parallel_tool_calls } : {}),
  };
}

/** `logit_bias` as token id → bias; keys must be token ids, values -100..100 (400 `logit_bias` otherwise). */
function toLogitBias(logitBias: Record<string, number> | null | undefined): Map<number, number> | undefined {
  if (logitBias == null) return undefined;
  const biases = new Map<number, number>();
  for (const [key, value] of Object.entries(logitBias)) {
    if (!/^\d{1,9}$/.test(key)) {
      throw new InvalidRequestError(`Invalid 'logit_bias': keys must be token ids (non-negative integers), got ${JSON.stringify(key.slice(0, 40))}.`, "logit_bias", "invalid_logit_bias");
    }
    if (!(value >= -100 && value <= 100)) {
      throw new InvalidRequestError(`Invalid 'logit_bias': the bias for token ${key} must be between -100 and 100, got ${value}.`, "logit_bias", "invalid_logit_bias");
    }
    if (value !== 0) biases.set(Number(key), value);
  }
  return biases.size > 0 ? biases : undefined;
}

/** The engine request for a validated API request. */
export function toGenerationRequest(request: ChatCompletionRequest, inputs: ModelInputs = TEXT_ONLY): GenerationRequest {
  const limits = [request.max_tokens, request.max_completion_tokens].filter((value): value is number => value != null);
  const stop = request.stop == null ? [] : typeof request.stop === "string" ? [request.stop] : request.stop;
  const responseFormat = toResponseFormat(request.response_format);
  if (request.top_logprobs != null && request.logprobs !== true) {
    throw new InvalidRequestError("'logprobs' must be set to true when 'top_logprobs' is used.", "top_logprobs");
  }
  return {
    messages: toEngineMessages(request.messages, inputs),
    sampling: {
      temperature: request.temperature ?? 1,
      topP: request.top_p ?? 1,
      seed: request.seed ?? undefined,
      frequencyPenalty: request.frequency_penalty ?? 0,
      presencePenalty: request.presence_penalty ?? 0,
      stop: stop.filter((sequence) => sequence.length > 0),
      logitBias: toLogitBias(request.logit_bias),
    },
    maxTokens: limits.length > 0 ? Math.min(...limits) : undefined,
    ...(responseFormat !== undefined ? { responseFormat } : {}),
    ...toToolOptions(request),
    choices: request.n ?? 1,
    logprobs: request.logprobs === true ? { top: request.top_logprobs ?? 0 } : undefined,
  };
}

/** A validated request mapped to the engine's form: cheap work, bounded by the request caps. Nothing rendered or tokenized yet. */
export type ParsedChatCompletion = Omit<ChatCompletionJob, "prepared"> & {
  request: GenerationRequest;
  /** The request's image URLs (data URLs too), each with its place, for the image URL policy: admission checks them before anything goes upstream. */
  imageUrls: ImageUrlPart[];
};

/** Every `image_url` part's URL, with its param (`messages[2].content[1].image_url.url`). */
function imageUrlsOf(request: ChatCompletionRequest): ImageUrlPart[] {
  const found: ImageUrlPart[] = [];
  request.messages.forEach((message, index) => {
    if (!Array.isArray(message.content)) return;
    message.content.forEach((part, partIndex) => {
      if (part.type === "image_url") found.push({ url: part.image_url.url, param: `messages[${index}].content[${partIndex}].image_url.url` });
    });
  });
  return found;
}

/**
 * Validates the body, finds the model and maps the request to the engine's form. Cheap (linear
 * in the body, which the request caps bound): no schema translation, grammar, template or
 * tokenizer runs here. Throws typed API errors.
 */
export function parseChatCompletion(catalog: Catalog, body: unknown): ParsedChatCompletion {
  // A large body was validated already, off the event loop, by the body worker.
  const request = validatedInWorker(body) ? (body as ChatCompletionRequest) : parseWithSchema(chatCompletionRequestSchema, body);
  const model = catalog.get(request.model);
  rejectUnsupported(request);
  const vendor = checkModelSupports(request, model);
  const generationRequest = toGenerationRequest(request, { images: model.engine.capabilities().inputModalities.includes("image") });
  if (vendor !== undefined) generationRequest.vendor = vendor;
  if (request.stream !== true) generationRequest.buffered = true;
  const choice = generationRequest.toolChoice;
  return {
    id: `chatcmpl-${pooledRandomBytes(18).toString("base64url")}`,
    created: Math.floor(Date.now() / 1000),
    model,
    stream: request.stream === true,
    includeUsage: request.stream_options?.include_usage === true,
    toolCallsOnly: generationRequest.tools !== undefined && (choice === "required" || typeof choice === "object"),
    logprobs: request.logprobs === true,
    request: generationRequest,
    imageUrls: imageUrlsOf(request),
  };
}

/**
 * What a request will cost at least, known before its prompt is rendered or tokenized (from the
 * engine's cheap `boundPrompt`): the refusals that must come before the expensive work use it.
 */
export type CheapBound = {
  /** The prompt has at least this many tokens. */
  promptTokens: number;
  /** Completion tokens the hold will reserve at least (all choices): `n × max_tokens`, or what the context leaves. */
  completionTokens: number;
  /** Prompt + reserved completion tokens at least: the lower bound of what rate limits will charge. */
  tokens: number;
};

/**
 * Lower bounds of what `prepare` will count, from the engine's bounds on the prompt. With
 * `max_tokens` given, each choice reserves it; without, each reserves what the context leaves
 * after the prompt, which is least for the longest prompt that still fits.
 * Throws `ModelNotReadyError` (503) when the model is not ready.
 */
export function cheapBound(parsed: ParsedChatCompletion): CheapBound {
  const { request, model } = parsed;
  const bound = model.engine.boundPrompt(request);
  const contextLength = model.engine.info()?.contextLength;
  let perChoice: number;
  let promptForLimits = bound.atLeast;
  if (request.maxTokens !== undefined) perChoice = request.maxTokens;
  else if (contextLength === undefined) perChoice = 1;
  else {
    const longest = Math.max(bound.atLeast, Math.min(bound.atMost, contextLength - 1));
    perChoice = Math.max(1, contextLength - longest);
    promptForLimits = longest;
  }
  const completionTokens = perChoice * request.choices;
  return { promptTokens: bound.atLeast, completionTokens, tokens: promptForLimits + completionTokens };
}

/** Renders and tokenizes the request (the engine's `prepare`: schema translation, grammar, template). */
export async function prepareParsed(parsed: ParsedChatCompletion): Promise<ChatCompletionJob> {
  const { request, imageUrls: _checkedAtAdmission, ...job } = parsed;
  return { ...job, prepared: await parsed.model.engine.prepare(request) };
}

