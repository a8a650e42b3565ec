/**
 * The work behind `POST /v1/chat/completions`, free of HTTP: validate, map to an engine request,
 * and turn engine parts into OpenAI completions or chunks.
 */
import { randomBytes } from "node:crypto";
import type { Catalog, CatalogModel } from "../../../catalog/catalog.ts";
import type {
  EngineMessage,
  GenerationRequest,
  PreparedGeneration,
  ResponseFormat,
  RunningGeneration,
  TokenUsage,
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
import {
  makeUsage,
  type ChatCompletion,
  type ChatCompletionChunk,
  type FinishReason,
  type ToolCallObject,
} from "../../../protocol/chat-completion-response.ts";
import { InvalidRequestError, UnsupportedParameterError } from "../../../protocol/errors.ts";
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
  prepared: PreparedGeneration;
};

/** Fields accepted by the schema that this release answers with a clear 400. */
function rejectUnsupported(request: ChatCompletionRequest): void {
  const unsupported = (param: string, what: string) => {
    throw new UnsupportedParameterError(`'${param}' is not supported yet: ${what}.`, param);
  };
  if (request.functions != null) unsupported("functions", "the deprecated 'functions' field is not supported; use 'tools'");
  if (request.function_call != null) unsupported("function_call", "the deprecated 'function_call' field is not supported; use 'tool_choice'");
  if (request.n != null && request.n > 1) unsupported("n", "only one choice (n=1) is available on this server yet");
  if (request.logprobs === true) unsupported("logprobs", "log probabilities are not available on this server yet");
  if (request.top_logprobs != null && request.top_logprobs > 0) unsupported("top_logprobs", "log probabilities are not available on this server yet");
  if (request.logit_bias != null && Object.keys(request.logit_bias).length > 0) unsupported("logit_bias", "logit bias is not available on this server yet");
  if (request.audio != null) unsupported("audio", "audio output is not available");
  if (request.modalities != null && request.modalities.some((modality) => modality !== "text")) {
    unsupported("modalities", "only text output is available");
  }
  if (request.stream_options != null && request.stream !== true) {
    throw new InvalidRequestError("'stream_options' is only allowed when 'stream' is true.", "stream_options");
  }
}

/** Flattens content to text; refuses parts this model cannot read, naming the part. */
function messageText(message: ChatMessage, index: number): string {
  const content = message.content;
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  return content
    .map((part, partIndex) => {
      const param = `messages[${index}].content[${partIndex}]`;
      switch (part.type) {
        case "text":
          return part.text;
        case "refusal":
          return part.refusal;
        case "image_url":
          throw new UnsupportedParameterError("This model does not accept images (image_url content parts); it reads text only.", param);
        case "input_audio":
          throw new UnsupportedParameterError("This model does not accept audio (input_audio content parts); it reads text only.", param);
        case "file":
          throw new UnsupportedParameterError("This model does not accept files (file content parts); it reads text only.", param);
      }
    })
    .join("");
}

/**
 * Maps messages to the engine's. Assistant tool calls keep their ids, and every `tool` message
 * must answer a call of an earlier assistant message (as OpenAI requires).
 */
function toEngineMessages(messages: readonly ChatMessage[]): EngineMessage[] {
  const callIds = new Set<string>();
  return messages.map((message, index): EngineMessage => {
    const content = messageText(message, index);
    switch (message.role) {
      case "system":
      case "developer":
        return { role: "system", content, name: message.name ?? undefined };
      case "user":
        return { role: "user", content, name: message.name ?? undefined };
      case "assistant": {
        const toolCalls = (message.tool_calls ?? []).map((call, callIndex): ToolCall => {
          try {
            JSON.parse(call.function.arguments);
          } catch {
            throw new InvalidRequestError(
              "The arguments of a tool call must be a JSON text.",
              `messages[${index}].tool_calls[${callIndex}].function.arguments`,
            );
          }
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
  return { type: "json_schema", name: format.json_schema.name, schema: format.json_schema.schema };
}

/** The tools and the tool choice; a choice that names no given tool is a 400 naming `tool_choice`. */
function toToolOptions(request: ChatCompletionRequest): Pick<GenerationRequest, "tools" | "toolChoice" | "parallelToolCalls"> {
  const tools: ToolDefinition[] = (request.tools ?? []).map((tool) => ({
    name: tool.function.name,
    ...(tool.function.description != null ? { description: tool.function.description } : {}),
    ...(tool.function.parameters != null ? { parameters: tool.function.parameters } : {}),
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

/** The engine request for a validated API request. */
export function toGenerationRequest(request: ChatCompletionRequest): GenerationRequest {
  const limits = [request.max_tokens, request.max_completion_tokens].filter((value): value is number => value != null);
  const stop = request.stop == null ? [] : typeof request.stop === "string" ? [request.stop] : request.stop;
  const responseFormat = toResponseFormat(request.response_format);
  return {
    messages: toEngineMessages(request.messages),
    sampling: {
      temperature: request.temperature ?? 1,
      topP: request.top_p ?? 1,
      seed: request.seed ?? undefined,
      frequencyPenalty: request.frequency_penalty ?? 0,
      presencePenalty: request.presence_penalty ?? 0,
      stop: stop.filter((sequence) => sequence.length > 0),
    },
    maxTokens: limits.length > 0 ? Math.min(...limits) : undefined,
    ...(responseFormat !== undefined ? { responseFormat } : {}),
    ...toToolOptions(request),
  };
}

/**
 * Validates the body, finds the model and prepares the generation (tokenized, checked
 * against the context). Throws typed API errors.
 */
export async function prepareChatCompletion(catalog: Catalog, body: unknown): Promise<ChatCompletionJob> {
  const request = parseWithSchema(chatCompletionRequestSchema, body);
  const model = catalog.get(request.model);
  rejectUnsupported(request);
  const generationRequest = toGenerationRequest(request);
  const prepared = await model.engine.prepare(generationRequest);
  const choice = generationRequest.toolChoice;
  return {
    id: `chatcmpl-${randomBytes(18).toString("base64url")}`,
    created: Math.floor(Date.now() / 1000),
    model,
    stream: request.stream === true,
    includeUsage: request.stream_options?.include_usage === true,
    toolCallsOnly: generationRequest.tools !== undefined && (choice === "required" || typeof choice === "object"),
    prepared,
  };
}

export type CompletionOutcome = { finishReason: FinishReason | "cancelled"; usage: TokenUsage };

/** Runs a non-streamed request to its end and builds the response. */
export async function completeChatCompletion(
  job: ChatCompletionJob,
  generation: RunningGeneration,
): Promise<{ completion: ChatCompletion; outcome: CompletionOutcome }> {
  let content = "";
  const toolCalls: ToolCallObject[] = [];
  let outcome: CompletionOutcome | undefined;
  for await (const part of generation.parts) {
    switch (part.type) {
      case "text-delta":
        content += part.text;
        break;
      case "tool-call-start":
        toolCalls[part.index] = { id: part.id, type: "function", function: { name: part.name, arguments: "" } };
        break;
      case "tool-call-delta":
        toolCalls[part.index]!.function.arguments += part.argumentsDelta;
        break;
      case "finish":
        outcome = { finishReason: part.reason, usage: part.usage };
        break;
    }
  }
  outcome ??= { finishReason: "cancelled", usage: generation.usage() };
  const usage = outcome.usage;
  return {
    outcome,
    completion: {
      id: job.id,
      object: "chat.completion",
      created: job.created,
      model: job.model.id,
      system_fingerprint: null,
      choices: [
        {
          index: 0,
          message: {
            role: "assistant",
            // Only tool calls: no content, as OpenAI answers.
            content: toolCalls.length > 0 && content === "" ? null : content,
            refusal: null,
            ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
          },
          logprobs: null,
          finish_reason: outcome.finishReason === "cancelled" ? "stop" : outcome.finishReason,
        },
      ],
      usage: makeUsage(usage.promptTokens, usage.completionTokens, usage.cachedPromptTokens),
    },
  };
}

/**
 * Turns engine parts into chunks: a first chunk with the role, content deltas, a chunk with
 * the finish reason, and (when asked) a last chunk with `choices: []` and the usage.
 * `outcome` is filled in when the engine finishes.
 */
export async function* streamChatCompletion(
  job: ChatCompletionJob,
  generation: RunningGeneration,
  outcome: { value?: CompletionOutcome },
): AsyncGenerator<ChatCompletionChunk> {
  const chunk = (delta: ChatCompletionChunk["choices"][0]["delta"], finishReason: FinishReason | null): ChatCompletionChunk => ({
    id: job.id,
    object: "chat.completion.chunk",
    created: job.created,
    model: job.model.id,
    system_fingerprint: null,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
    ...(job.includeUsage ? { usage: null } : {}),
  });
  yield chunk({ role: "assistant", content: job.toolCallsOnly ? null : "", refusal: null }, null);
  for await (const part of generation.parts) {
    if (part.type === "text-delta") {
      yield chunk({ content: part.text }, null);
      continue;
    }
    if (part.type === "tool-call-start") {
      yield chunk({ tool_calls: [{ index: part.index, id: part.id, type: "function", function: { name: part.name, arguments: "" } }] }, null);
      continue;
    }
    if (part.type === "tool-call-delta") {
      yield chunk({ tool_calls: [{ index: part.index, function: { arguments: part.argumentsDelta } }] }, null);
      continue;
    }
    outcome.value = { finishReason: part.reason, usage: part.usage };
    if (part.reason === "cancelled") return;
    yield chunk({}, part.reason);
    if (job.includeUsage) {
      yield {
        id: job.id,
        object: "chat.completion.chunk",
        created: job.created,
        model: job.model.id,
        system_fingerprint: null,
        choices: [],
        usage: makeUsage(part.usage.promptTokens, part.usage.completionTokens, part.usage.cachedPromptTokens),
      };
    }
  }
}
