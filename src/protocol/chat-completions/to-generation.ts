/**
 * Chat completions → the generation request: the chat dialect's half of the generation core.
 * Linear in the body (which the schema's caps bound); no template, grammar or tokenizer runs here.
 * Throws typed API errors naming the field (`messages[3].content[1]`).
 */
import type {
  EngineContentPart,
  EngineImage,
  EngineMessage,
  GenerationRequest,
  ImageUrlPart,
  ResponseFormat,
  SamplingOptions,
  ToolCall,
  ToolChoice,
  ToolDefinition,
} from "../generation.ts";
import { VENDOR_FIELDS } from "../generation.ts";
import { InvalidRequestError, UnsupportedParameterError } from "../errors.ts";
import { imageUrlProblem, modelReadsNoImages } from "../image-url.ts";
import type { ChatCompletionRequest, ChatMessage, ResponseFormatParam } from "./request.ts";

/** Fields accepted by the schema that this release answers with a clear 400. */
export function rejectUnsupported(request: ChatCompletionRequest): void {
  const unsupported = (param: string, what: string) => {
    throw new UnsupportedParameterError(`'${param}' is not supported yet: ${what}.`, param);
  };
  if (request.functions != null) unsupported("functions", "the deprecated 'functions' field is not supported; use 'tools'");
  if (request.function_call != null) unsupported("function_call", "the deprecated 'function_call' field is not supported; use 'tool_choice'");
  if (request.audio != null) unsupported("audio", "audio output is not available");
  if (request.modalities != null && request.modalities.some((modality) => modality !== "text")) {
    unsupported("modalities", "only text output is available");
  }
}

/** The vendor fields the request sets, as sent; undefined when none. */
export function vendorFieldsOf(request: ChatCompletionRequest): Record<string, unknown> | undefined {
  let vendor: Record<string, unknown> | undefined;
  // A chat request carries every vendor field at its top level.
  for (const field of VENDOR_FIELDS) {
    const value = request[field];
    if (value != null) (vendor ??= {})[field] = value;
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
          if (!inputs.images) throw modelReadsNoImages(param, "image_url content parts");
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
        const toolCalls = (message.tool_calls ?? []).map((call): ToolCall => ({ id: call.id, name: call.function.name, arguments: call.function.arguments }));
        return { role: "assistant", content, name: message.name ?? undefined, ...(toolCalls.length > 0 ? { toolCalls } : {}) };
      }
      case "tool":
        // The schema checked that it answers a call of an earlier assistant message.
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
  const choice = request.tool_choice;
  let toolChoice: ToolChoice | undefined;
  if (choice == null) toolChoice = undefined;
  else if (typeof choice === "string") toolChoice = choice;
  else toolChoice = { name: choice.function.name };
  // The schema checked that the names are unique and that a choice names one of them.
  return {
    ...(tools.length > 0 ? { tools } : {}),
    ...(toolChoice !== undefined ? { toolChoice } : {}),
    ...(request.parallel_tool_calls != null ? { parallelToolCalls: request.parallel_tool_calls } : {}),
  };
}

/** `logit_bias` as token id → bias; keys must be token ids, values -100..100 (400 `logit_bias` otherwise). */
export function toLogitBias(logitBias: Record<string, number> | null | undefined): Map<number, number> | undefined {
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

/** OpenAI's sampling fields, as chat completions and legacy completions both send them. */
export type OpenAiSamplingFields = Pick<ChatCompletionRequest, "temperature" | "top_p" | "seed" | "frequency_penalty" | "presence_penalty" | "stop" | "logit_bias">;

/** The sampling options of OpenAI's sampling fields, with OpenAI's defaults (temperature 1, top_p 1, no penalties). */
export function toSampling(request: OpenAiSamplingFields): SamplingOptions {
  const stop = request.stop == null ? [] : typeof request.stop === "string" ? [request.stop] : request.stop;
  return {
    temperature: request.temperature ?? 1,
    topP: request.top_p ?? 1,
    seed: request.seed ?? undefined,
    frequencyPenalty: request.frequency_penalty ?? 0,
    presencePenalty: request.presence_penalty ?? 0,
    stop: stop.filter((sequence) => sequence.length > 0),
    logitBias: toLogitBias(request.logit_bias),
  };
}

/** The engine request for a validated API request. */
export function toGenerationRequest(request: ChatCompletionRequest, inputs: ModelInputs = TEXT_ONLY): GenerationRequest {
  const limits = [request.max_tokens, request.max_completion_tokens].filter((value): value is number => value != null);
  const responseFormat = toResponseFormat(request.response_format);
  return {
    messages: toEngineMessages(request.messages, inputs),
    sampling: toSampling(request),
    maxTokens: limits.length > 0 ? Math.min(...limits) : undefined,
    ...(responseFormat !== undefined ? { responseFormat } : {}),
    ...toToolOptions(request),
    choices: request.n ?? 1,
    logprobs: request.logprobs === true ? { top: request.top_logprobs ?? 0 } : undefined,
  };
}

/** Every `image_url` part's URL, with its param (`messages[2].content[1].image_url.url`). */
export function imageUrlsOf(request: ChatCompletionRequest): ImageUrlPart[] {
  const found: ImageUrlPart[] = [];
  request.messages.forEach((message, index) => {
    if (!Array.isArray(message.content)) return;
    message.content.forEach((part, partIndex) => {
      if (part.type === "image_url") found.push({ url: part.image_url.url, param: `messages[${index}].content[${partIndex}].image_url.url` });
    });
  });
  return found;
}

