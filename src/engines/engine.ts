/**
 * The one interface every engine implements: the in-process llama.cpp engine and the
 * OpenAI-compatible upstreams (vLLM, SGLang, llama-server, Ollama, OpenAI) behind a pool.
 *
 * An engine knows nothing of HTTP, keys or billing. It turns a neutral generation request into
 * a stream of typed parts and honours an AbortSignal. What it can do (context, parameters,
 * modalities) and how busy it is (members) it says itself; billing relies on `prepare` giving a
 * true upper bound of what the request may cost.
 */

import type { PromptBound } from "./prompt-bound.ts";

export type EngineMessage = {
  role: "system" | "user" | "assistant" | "tool";
  /** Plain text; text content parts are flattened by the caller. */
  content: string;
  /**
   * Images in this message, for engines whose model reads them (the caller refuses images for
   * text-only models). Where they stood among the text parts: see `parts`.
   */
  images?: EngineImage[];
  /**
   * The content parts in the order they were sent (text and images), when the message had
   * content parts; an engine that forwards messages (an upstream) sends these as they were.
   */
  parts?: EngineContentPart[];
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
  /** OpenAI's strict mode: the arguments must follow the schema exactly. */
  strict?: boolean;
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
  | { type: "json_schema"; name: string; schema: JsonSchema; strict?: boolean };

/** One content part of a message, as sent: text, or an image. */
export type EngineContentPart = { type: "text"; text: string } | { type: "image"; image: EngineImage };

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
  /**
   * Engine-specific sampling fields passed through as sent (`top_k`, `min_p`, `repetition_penalty`,
   * `reasoning_effort`, `chat_template_kwargs`), only those the model's entry allows (the caller
   * refuses the others). Engines that cannot honour one refuse the request.
   */
  vendor?: Readonly<Record<string, unknown>>;
  /**
   * The caller sends the client nothing until the reply is whole (a non-streamed request): an
   * engine may then retry on another member even after generation began, discarding what the
   * failed attempt made. Otherwise retries end with the first part yielded.
   */
  buffered?: boolean;
};

/**
 * `cancelled`: the caller aborted; usage still counts what was generated before.
 * `content_filter`: an upstream withheld the rest.
 */
export type EngineFinishReason = "stop" | "length" | "tool_calls" | "content_filter" | "cancelled";

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
  /** The model's reasoning (a thinking model's text before its answer), sent as `reasoning_content`. */
  | { type: "reasoning-delta"; choice: number; text: string }
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
  /** Completion tokens, reasoning included. */
  completionTokens: number;
  /** The part of `completionTokens` spent on reasoning (0 or absent when the model did not reason). */
  reasoningTokens?: number;
};

/**
 * Where usage came from: `counted` by this process (the embedded engine), `upstream` as the
 * upstream reported it, `estimated` from what was seen (a stream cut before the upstream said).
 */
export type UsageSource = "counted" | "upstream" | "estimated";

/** A request's usage and where it came from. */
export type GenerationUsage = TokenUsage & { source: UsageSource };

export type EngineStatus =
  | { state: "ready" }
  /** Serving, but some members of its pool are down. */
  | { state: "degraded"; detail?: string }
  | { state: "loading"; detail?: string }
  /** A download in progress; `progress` is 0..1 when the size is known. */
  | { state: "downloading"; progress?: number; detail?: string }
  | { state: "unavailable"; detail: string };

/**
 * A request that has been checked and tokenized, not yet queued. `promptTokens` and
 * `maxTokens` bound what it may cost: billing reserves them before calling `start`.
 */
export type PreparedGeneration = {
  /** The prompt's tokens: exact, or an upper bound (see `promptCount`). */
  readonly promptTokens: number;
  /** `exact` when tokenized by the model's own tokenizer; `upper-bound` when bounded from above. */
  readonly promptCount: "exact" | "upper-bound";
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
  usage(): GenerationUsage;
};

export type EngineModelInfo = {
  /** Tokens one sequence can hold: prompt plus completion. */
  contextLength: number;
};

/** Every chat request parameter an engine may honour (the embedded engine honours them all; upstream kinds some). */
export const CHAT_PARAMETERS = [
  "max_tokens",
  "max_completion_tokens",
  "temperature",
  "top_p",
  "frequency_penalty",
  "presence_penalty",
  "logit_bias",
  "logprobs",
  "top_logprobs",
  "n",
  "stop",
  "seed",
  "response_format",
  "tools",
  "tool_choice",
  "parallel_tool_calls",
  "stream",
  "stream_options",
  "user",
] as const;

export type ChatParameter = (typeof CHAT_PARAMETERS)[number];

/** What a model served by an engine can do, for `/v1/models` and the request checks. */
export type EngineCapabilities = {
  /** Request parameters it honours (a request using another gets a 400 naming it). */
  supportedParameters: readonly string[];
  /** What it reads besides text. */
  inputModalities: readonly ("text" | "image")[];
  /** Vendor sampling fields it passes through (see `GenerationRequest.vendor`). */
  vendorFields: readonly string[];
};

/** One member of an engine's pool (the embedded engine is one member): how busy and whether healthy. */
export type EngineMember = {
  /** Stable, free of credentials and addresses (an upstream member's name, or `embedded`): a metrics label. */
  id: string;
  /** Requests running on it. */
  busy: number;
  /** Requests it may run at once. */
  capacity: number;
  /** Requests waiting for it (or for the pool). */
  waiting: number;
  healthy: boolean;
  /**
   * Since start, for an engine that makes its own batches (the embedded one): `llama_decode` calls,
   * the sequences in them (÷ batches: how many streams share one), the tokens (prompts included).
   */
  batching?: { batches: number; sequences: number; tokens: number };
};

export interface Engine {
  /** Loads the model or reaches the upstreams. Never throws: failure leaves the engine `unavailable`. */
  open(): Promise<void>;
  /** Current state; only a `ready` or `degraded` engine accepts `prepare`. */
  status(): EngineStatus;
  /** Known once the engine is ready. */
  info(): EngineModelInfo | undefined;
  /** What the model can do; fixed once the engine is open. */
  capabilities(): EngineCapabilities;
  /** The members of its pool, for `/v1/models`, metrics and routing decisions. */
  members(): EngineMember[];
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
