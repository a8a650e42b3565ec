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
import type { QueueSnapshot, QueueTicket } from "./fair-queue.ts";
export type { QueueSnapshot, QueueTicket } from "./fair-queue.ts";
import type { ModelService } from "../protocol/models.ts";

// The generation request and its parts live with the wire formats that map to them.
import type { GenerationRequest, GenerationUsage, StreamPart, UsageSource } from "../protocol/generation.ts";
export type {
  EngineMessage,
  ToolCall,
  JsonSchema,
  ToolDefinition,
  CustomToolFormat,
  ToolChoice,
  ResponseFormat,
  EngineContentPart,
  EngineImage,
  CompletionPrompt,
  TextCompletion,
  SamplingOptions,
  GenerationRequest,
  EngineFinishReason,
  TokenLogprobAlternative,
  TokenLogprob,
  StreamPart,
  TokenUsage,
  UsageSource,
  GenerationUsage,
} from "../protocol/generation.ts";

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
   * Joins the engine's queue, under `ticket` (whose share it draws on and in which band it waits:
   * `fair-queue.ts`; none: the default band of one shared account). Throws at once when the queue
   * refuses it, so the caller can still answer before it has sent anything: `EngineOverloadedError`
   * (full, 503), `QueueShareExceededError` (the account has its most waiting, 429).
   */
  start(signal: AbortSignal, ticket?: QueueTicket): RunningGeneration;
};

export type RunningGeneration = {
  /**
   * Resolves when the request got a slot and generation begins; rejects if aborted while waiting,
   * or with `ResourceUnavailableError` (429) when its ticket's wait limit (`flex`) passed first.
   */
  readonly admitted: Promise<void>;
  /** While it waits: its place in the queue (1: next); 0 once admitted (or when the engine cannot tell). */
  position?(): number;
  /** The generated parts; ends after one `finish` part per choice, or throws. Aborting ends each
   * choice early with a `finish` of reason `cancelled` that carries its exact usage so far. */
  readonly parts: AsyncIterable<StreamPart>;
  /** The same parts in the groups the engine made them, where it groups them (`GenerationOutput.batches`); read one or the other. */
  readonly batches?: AsyncIterable<readonly StreamPart[]>;
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

// The parameters an engine may honour, and which of them a request uses: one list, in `parameters.ts`.
export { CHAT_PARAMETERS, type ChatParameter } from "./parameters.ts";

/** What a model served by an engine can do, for `/v1/models` and the request checks. */
export type EngineCapabilities = {
  /**
   * What it serves (`chat`, `completions`, `embeddings`), as the engine knows it once open (an
   * embedding GGUF: `embeddings` only); the model entry's `serves` overrides it. Undefined until
   * known: chat and completions.
   */
  services?: readonly ModelService[];
  /** Fill-in-the-middle (a legacy completion's `suffix`): the model has FIM tokens (or its entry names them). */
  fillInTheMiddle?: boolean;
  /** For a model that serves embeddings: the vector's length, once known. */
  embeddingDimensions?: number;
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
  /** The queue's bands, oldest waits and top shares, on the member that holds the queue (the first of a pool); computed when asked. */
  queue?: () => QueueSnapshot;
  /**
   * Since start, for an engine that makes its own batches (the embedded one): `llama_decode` calls,
   * the sequences in them (÷ batches: how many streams share one), the tokens (prompts included).
   */
  batching?: { batches: number; sequences: number; tokens: number };
};

/** One input of an embeddings request: text, or token ids of the model's vocabulary. */
export type EmbeddingInput = { text: string } | { tokens: number[] };

export type EmbeddingRequest = {
  inputs: EmbeddingInput[];
  /** An input longer than the model's context is cut to fit (from its end) instead of refused. */
  truncate: boolean;
  /** Passed to an upstream as OpenAI's `user`. */
  user?: string;
};

/** An embeddings request tokenized and checked, not yet run: `promptTokens` bounds what it costs. */
export type PreparedEmbeddings = {
  /** Every input's tokens, summed: exact, or an upper bound (see `promptCount`). */
  readonly promptTokens: number;
  readonly promptCount: "exact" | "upper-bound";
  /**
   * Runs it: one vector per input, in the inputs' order, each of the model's full length and
   * L2-normalised (the caller truncates to `dimensions` and normalises again). Throws
   * `EngineOverloadedError` at once when the queue is full; rejects with the signal's reason when aborted.
   */
  run(signal: AbortSignal, ticket?: QueueTicket): Promise<EmbeddingsResult>;
  /**
   * Tokens embedded so far (the inputs whose vectors were made): what a request cut or failed before
   * its end is billed, as a cut generation is billed for what it generated. Final once `run` settled.
   * An engine that cannot tell (an upstream, until it answered) says 0.
   */
  embeddedTokens(): number;
};

export type EmbeddingsResult = {
  vectors: Float32Array[];
  /** Tokens embedded, all inputs summed (what is billed). */
  usage: { promptTokens: number; source: UsageSource };
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
   * Throws `ModelNotReadyError`, `ContextLengthExceededError` or `InvalidRequestError`. `bound`: this
   * request's `boundPrompt`, when the caller computed it already (admission does, once per request).
   */
  prepare(request: GenerationRequest, bound?: PromptBound): Promise<PreparedGeneration>;
  /**
   * Bounds on the request's prompt tokens without rendering or tokenizing anything (see
   * `prompt-bound.ts`): cheap, for refusals that must come before the expensive work. `atLeast`
   * may stop counting once it reaches the context length (such a prompt cannot fit anyway).
   * Throws `ModelNotReadyError` when the engine is not ready.
   */
  boundPrompt(request: GenerationRequest): PromptBound;
  /**
   * The prompt tokens `prepare` will count for the request, when its `bound` alone decides them
   * (an engine that charges the bound's upper end, with nothing to make it exact): admission then
   * charges the rate limits their whole charge at once, one round trip instead of two. Undefined
   * (or absent) when `prepare` counts the prompt itself.
   */
  chargedPrompt?(request: GenerationRequest, bound: PromptBound): number | undefined;
  /**
   * Tokenizes and checks an embeddings request (each input within the context, or cut to it with
   * `truncate`; token ids in the vocabulary). Throws `ModelNotReadyError`, `ContextLengthExceededError`
   * (naming the input's index) or `InvalidRequestError`. Absent: the engine cannot embed.
   */
  prepareEmbeddings?(request: EmbeddingRequest): Promise<PreparedEmbeddings>;
  /**
   * Bounds on an embeddings request's tokens without tokenizing (as `boundPrompt`): for the cheap
   * refusals (rate limits, quota) before `prepareEmbeddings`. Present exactly when `prepareEmbeddings` is.
   */
  boundEmbeddings?(request: EmbeddingRequest): PromptBound;
  /** Frees the model; running generations are aborted. */
  close(): Promise<void>;
}
