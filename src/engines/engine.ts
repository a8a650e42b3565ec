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
};

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
};

/** `cancelled`: the caller aborted; usage still counts what was generated before. */
export type EngineFinishReason = "stop" | "length" | "cancelled";

/** What a running generation yields. */
export type StreamPart =
  | { type: "text-delta"; text: string }
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
