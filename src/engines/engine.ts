/**
 * The one interface every engine implements: the in-process llama.cpp engine today,
 * OpenAI-compatible upstreams (vLLM, SGLang, llama-server, Ollama) later.
 *
 * An engine knows nothing of HTTP, keys or billing. It turns a neutral generation request into
 * a stream of typed parts and honours an AbortSignal.
 */

import type { PromptBound } from "./prompt-bound.ts";

export type EngineMessage = {
  role: "system" | "user" | "assistant" | "tool";
  /** Plain text; text content parts are flattened by the caller. */
  content: string;
  /**
   * Images in this message, for engines whose model reads them (the caller refuses images for
   * text-only models). Where they stood among the text parts is not kept.
   */
  images?: EngineImage[];
  name?: string;
  /** For `tool` messages: the call this result answers. */
  toolCallId?: string;
  /** For `assistant` messages: the tool calls the model made in this turn. */
  toolCalls?: ToolCall[];
};

/** A call the model made: `arguments` is the JSON text of the call's arguments. */
export type ToolCall = { id: string; name: string; arguments: string };

/** A JSON Schema as the client sent it (validated and translated by the engine that uses it). */
export type JsonSchema = Record<string, unknown>;

/** A function the model may call. */
export type ToolDefinition = {
  name: string;
  description?: string;
  /** A JSON Schema of type `object`; undefined means the function takes no arguments. */
  parameters?: JsonSchema;
};

/**
 * Which tools the model may or must call: `auto` lets it choose between text and calls,
 * `required` makes it call at least one, `{name}` makes it call exactly that one.
 */
export type ToolChoice = "auto" | "none" | "required" | { name: string };

/** The shape of the reply's text: free text, any JSON object, or JSON valid against a schema. */
export type ResponseFormat =
  | { type: "text" }
  | { type: "json_object" }
  | { type: "json_schema"; name: string; schema: JsonSchema };

/** An image as the client sent it: a `data:` URL (checked to be base64 of a known image type) or an http(s) URL. */
export type EngineImage = { url: string; detail?: "auto" | "low" | "high" };

export type SamplingOptions = {
  /** 0 is greedy. */
  temperature: number;
  topP: number;
  /** Undefined: a fresh random seed per request. */
  seed?: number;
  frequencyPenalty: number;
  presencePenalty: number;
  /** Strings that end generation; they are not part of the output. */
  stop: string[];
  /**
   * Added to the logits of these token ids before sampling (OpenAI's `logit_bias`, -100..100;
   * -100 bans the token). Ids are the engine's own; it refuses ids outside its vocabulary.
   */
  logitBias?: ReadonlyMap<number, number>;
};

export type GenerationRequest = {
  messages: EngineMessage[];
  sampling: SamplingOptions;
  /**
   * The most completion tokens the caller allows; undefined means "as many as fit the context".
   */
  maxTokens?: number;
  /** Undefined: free text. */
  responseFormat?: ResponseFormat;
  /** Undefined or empty: no tools. */
  tools?: ToolDefinition[];
  /** Defaults to `auto` when tools are given. */
  toolChoice?: ToolChoice;
  /** Whether one turn may hold several calls (OpenAI's default: true). */
  parallelToolCalls?: boolean;
  /** Independent completions to generate (OpenAI's `n`); each may use `maxTokens`. */
  choices: number;
  /**
   * Report the log probability of each generated token and of the `top` likeliest alternatives
   * (0..20); undefined: no log probabilities.
   */
  logprobs?: { top: number };
};

/** `cancelled`: the caller aborted; usage still counts what was generated before. */
export type EngineFinishReason = "stop" | "length" | "tool_calls" | "cancelled";

/** One alternative token and its log probability (natural log). */
export type TokenLogprobAlternative = {
  token: string;
  logprob: number;
  /** The UTF-8 bytes of the token (a token may hold part of a character). */
  bytes: number[];
};

/** A generated token with its log probability and, when asked, the likeliest alternatives. */
export type TokenLogprob = TokenLogprobAlternative & { topLogprobs: TokenLogprobAlternative[] };

/**
 * What a running generation yields. `choice` is the completion's index (0..choices-1); the parts
 * of different choices may interleave, and each choice ends with its own `finish`.
 */
export type StreamPart =
  /** `logprobs`: the tokens whose text this delta carries (when log probabilities were asked for). */
  | { type: "text-delta"; choice: number; text: string; logprobs?: TokenLogprob[] }
  /** A tool call begins: `index` counts the calls of this choice's reply from 0. */
  | { type: "tool-call-start"; choice: number; index: number; id: string; name: string }
  /** More of the call's arguments (JSON text); the deltas of one call concatenate to its arguments. */
  | { type: "tool-call-delta"; choice: number; index: number; argumentsDelta: string }
  /** `usage`: this choice's tokens (the prompt counted once per request: see `RunningGeneration.usage`). */
  | { type: "finish"; choice: number; reason: EngineFinishReason; usage: TokenUsage };

export type TokenUsage = {
  promptTokens: number;
  /** Prompt tokens whose state was reused from a previous request (prefix cache). */
  cachedPromptTokens: number;
  completionTokens: number;
};

export type EngineStatus =
  | { state: "ready" }
  | { state: "loading"; detail?: string }
  /** A download in progress; `progress` is 0..1 when the size is known. */
  | { state: "downloading"; progress?: number; detail?: string }
  | { state: "unavailable"; detail: string };

/**
 * A request that has been checked and tokenized, not yet queued. `promptTokens` and
 * `maxTokens` bound what it may cost: billing reserves them before calling `start`.
 */
export type PreparedGeneration = {
  readonly promptTokens: number;
  /** The completion tokens each choice may use at most (its own limit or what the context leaves). */
  readonly maxTokens: number;
  /** How many choices will be generated: the request may use `choices × maxTokens` completion tokens. */
  readonly choices: number;
  /**
   * Joins the engine's queue. Throws `EngineOverloadedError` at once when the queue is full,
   * so the caller can still answer 503 before it has sent anything.
   */
  start(signal: AbortSignal): RunningGeneration;
};

export type RunningGeneration = {
  /** Resolves when the request got a slot and generation begins; rejects if aborted while waiting. */
  readonly admitted: Promise<void>;
  /** The generated parts; ends after one `finish` part per choice, or throws. Aborting ends each
   * choice early with a `finish` of reason `cancelled` that carries its exact usage so far. */
  readonly parts: AsyncIterable<StreamPart>;
  /**
   * Exact counts so far for the whole request: the prompt once, the completion tokens of all
   * choices summed. Final once `parts` has ended (also when the consumer stopped early).
   */
  usage(): TokenUsage;
};

export type EngineModelInfo = {
  /** Tokens one sequence can hold: prompt plus completion. */
  contextLength: number;
};

export interface Engine {
  /** Current state; only a `ready` engine accepts `prepare`. */
  status(): EngineStatus;
  /** Known once the engine is ready. */
  info(): EngineModelInfo | undefined;
  /**
   * Renders and tokenizes the request, checks it fits the context and that the engine can honour
   * it (e.g. `logitBias` ids in the vocabulary, images only for a model that reads them).
   * Throws `ModelNotReadyError`, `ContextLengthExceededError` or `InvalidRequestError`.
   */
  prepare(request: GenerationRequest): Promise<PreparedGeneration>;
  /**
   * Bounds on the request's prompt tokens without rendering or tokenizing anything (see
   * `prompt-bound.ts`): cheap, for refusals that must come before the expensive work. `atLeast`
   * may stop counting once it reaches the context length (such a prompt cannot fit anyway).
   * Throws `ModelNotReadyError` when the engine is not ready.
   */
  boundPrompt(request: GenerationRequest): PromptBound;
  /** Frees the model; running generations are aborted. */
  close(): Promise<void>;
}
