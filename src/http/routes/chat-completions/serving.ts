/**
 * The work behind `POST /v1/chat/completions`, free of HTTP: validate, map to an engine request,
 * and turn engine parts into OpenAI completions or chunks.
 */
import { randomBytes } from "node:crypto";
import type { Catalog, CatalogModel } from "../../../catalog/catalog.ts";
import type { EngineMessage, GenerationRequest, PreparedGeneration, RunningGeneration, TokenUsage } from "../../../engines/engine.ts";
import { chatCompletionRequestSchema, type ChatCompletionRequest, type ChatMessage } from "../../../protocol/chat-completion-request.ts";
import {
  makeUsage,
  type ChatCompletion,
  type ChatCompletionChunk,
  type FinishReason,
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
  prepared: PreparedGeneration;
};

/** Fields accepted by the schema that this release answers with a clear 400. */
function rejectUnsupported(request: ChatCompletionRequest): void {
  const unsupported = (param: string, what: string) => {
    throw new UnsupportedParameterError(`'${param}' is not supported yet: ${what}.`, param);
  };
  if (request.tools != null && request.tools.length > 0) unsupported("tools", "tool calling is not available on this server yet");
  if (request.tool_choice != null && request.tool_choice !== "none") unsupported("tool_choice", "tool calling is not available on this server yet");
  if (request.parallel_tool_calls != null) unsupported("parallel_tool_calls", "tool calling is not available on this server yet");
  if (request.functions != null) unsupported("functions", "function calling is not available on this server yet");
  if (request.function_call != null) unsupported("function_call", "function calling is not available on this server yet");
  if (request.response_format != null && request.response_format.type !== "text") {
    unsupported("response_format", `response_format type '${request.response_format.type}' is not available on this server yet; only 'text' is`);
  }
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

function toEngineMessages(messages: readonly ChatMessage[]): EngineMessage[] {
  return messages.map((message, index): EngineMessage => {
    if (message.role === "assistant" && message.tool_calls != null && message.tool_calls.length > 0) {
      throw new UnsupportedParameterError("Assistant messages with 'tool_calls' are not supported yet: tool calling is not available on this server yet.", `messages[${index}].tool_calls`);
    }
    const content = messageText(message, index);
    switch (message.role) {
      case "system":
      case "developer":
        return { role: "system", content, name: message.name ?? undefined };
      case "user":
        return { role: "user", content, name: message.name ?? undefined };
      case "assistant":
        return { role: "assistant", content, name: message.name ?? undefined };
      case "tool":
        return { role: "tool", content, toolCallId: message.tool_call_id };
    }
  });
}

/** The engine request for a validated API request. */
export function toGenerationRequest(request: ChatCompletionRequest): GenerationRequest {
  const limits = [request.max_tokens, request.max_completion_tokens].filter((value): value is number => value != null);
  const stop = request.stop == null ? [] : typeof request.stop === "string" ? [request.stop] : request.stop;
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
  const prepared = await model.engine.prepare(toGenerationRequest(request));
  return {
    id: `chatcmpl-${randomBytes(18).toString("base64url")}`,
    created: Math.floor(Date.now() / 1000),
    model,
    stream: request.stream === true,
    includeUsage: request.stream_options?.include_usage === true,
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
  let outcome: CompletionOutcome | undefined;
  for await (const part of generation.parts) {
    if (part.type === "text-delta") content += part.text;
    else outcome = { finishReason: part.reason, usage: part.usage };
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
          message: { role: "assistant", content, refusal: null },
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
  yield chunk({ role: "assistant", content: "", refusal: null }, null);
  for await (const part of generation.parts) {
    if (part.type === "text-delta") {
      yield chunk({ content: part.text }, null);
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
