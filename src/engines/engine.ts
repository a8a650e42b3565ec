/**
 * The one interface every engine implements: the in-process llama.cpp engine today,
 * OpenAI-compatible upstreams (vLLM, SGLang, llama-server, Ollama) later.
 *
 * An engine knows nothing of HTTP, keys or billing. It turns a neutral generation request into
 * a stream of typed parts and honours an AbortSignal.
 */

export type EngineMessage = {
  role: "system" | "user" | "assistant" | "tool";
  /** Plain text; content parts are flattened by the caller. */
  content: string;
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
};

/** `cancelled`: the caller aborted; usage still counts what was generated before. */
export type EngineFinishReason = "stop" | "length" | "tool_calls" | "cancelled";

/** What a running generation yields. */
export type StreamPart =
  | { type: "text-delta"; text: string }
  /** A tool call begins: `index` counts the calls of this reply from 0. */
  | { type: "tool-call-start"; index: number; id: string; name: string }
  /** More of the call's arguments (JSON text); the deltas of one call concatenate to its arguments. */
  | { type: "tool-call-delta"; index: number; argumentsDelta: string }
  | { type: "finish"; reason: EngineFinishReason; usage: TokenUsage };

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
  /** The completion tokens this request may use at most (its own limit or what the context leaves). */
  readonly maxTokens: number;
  /**
   * Joins the engine's queue. Throws `EngineOverloadedError` at once when the queue is full,
   * so the caller can still answer 503 before it has sent anything.
   */
  start(signal: AbortSignal): RunningGeneration;
};

export type RunningGeneration = {
  /** Resolves when the request got a slot and generation begins; rejects if aborted while waiting. */
  readonly admitted: Promise<void>;
  /** The generated parts; ends after one `finish` part, or throws. Aborting ends it early with a
   * `finish` of reason `cancelled` that carries the exact usage so far. */
  readonly parts: AsyncIterable<StreamPart>;
  /** Exact counts so far; final once `parts` has ended (also when the consumer stopped early). */
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
   * Renders and tokenizes the request, checks it fits the context.
   * Throws `ModelNotReadyError` or `ContextLengthExceededError`.
   */
  prepare(request: GenerationRequest): Promise<PreparedGeneration>;
  /** Frees the model; running generations are aborted. */
  close(): Promise<void>;
}
