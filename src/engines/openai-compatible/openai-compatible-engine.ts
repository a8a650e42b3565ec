/**
 * A model served by a pool of OpenAI-compatible servers (vLLM, SGLang, llama-server, Ollama,
 * OpenAI). The pool picks members and watches their health; this engine bounds the prompt,
 * checks the request against the kind's dialect, builds the body and runs the stream (see
 * `upstream-generation.ts` for retries, timeouts and cancellation).
 *
 * Prompts are not tokenized here: `prepare` gives a true upper bound (`promptCount: "upper-bound"`,
 * every byte a token, plus template overheads and a generous bound per image), and usage is
 * settled from what the upstream reports.
 */
import type { TemplateKwargType, UpstreamEntry, UpstreamKind, VendorField } from "./config-schema.ts";
import type {
  EmbeddingInput,
  EmbeddingRequest,
  Engine,
  EngineCapabilities,
  EngineMember,
  EngineModelInfo,
  EngineStatus,
  GenerationRequest,
  PreparedEmbeddings,
  PreparedGeneration,
  RunningGeneration,
  QueueTicket,
  TextCompletion,
} from "../engine.ts";
import { completionPromptBounds, promptBound, type PromptBound } from "../prompt-bound.ts";
import { buildCompletionBody, checkCompletionForKind, completionWire, servesFillInTheMiddle, withEcho, type FimTokenTexts } from "./completion-request.ts";
import { ContextLengthExceededError, InvalidRequestError, ModelNotReadyError, UnsupportedParameterError } from "../../protocol/errors.ts";
import { affinityKey } from "./affinity.ts";
import { detectContextLength } from "./context-length.ts";
import { credentialsSource, refusalDetail } from "./credentials.ts";
import { checkRequestForDialect, dialectFor, upstreamsOf } from "./dialects.ts";
import { planCustomTools, withCustomToolCalls } from "./custom-tool-plan.ts";
import type { UpstreamPool } from "./pool-types.ts";
import { buildRequestBody, serializeRequestBody } from "./request-body.ts";
import { upstreamWordsForLog } from "./upstream-errors.ts";
import { UpstreamClient } from "./upstream-client.ts";
import { startUpstreamGeneration, type UpstreamEventSink, type UpstreamGenerationOptions } from "./upstream-generation.ts";
import { runUpstreamEmbeddings } from "./upstream-embeddings.ts";
import { upstreamPriority } from "./priority.ts";
import { memberUrl, normalizeBaseUrl, serverRoot } from "./upstream-url.ts";
import { countPromptTokens, countsPromptsExactly } from "./tokenize.ts";

/** Tokens a model may add to an embeddings input besides its text (start, end, separator tokens). */
export const EMBEDDING_ADDED_TOKENS = 8;

/** One embeddings input's bounds (see `boundEmbeddings`). */
function embeddingInputBound(input: EmbeddingInput, contextLength: number, truncate: boolean): { atLeast: number; atMost: number; bytes: number } {
  if ("tokens" in input) {
    const sent = truncate ? Math.min(input.tokens.length, contextLength) : input.tokens.length;
    return { atLeast: sent, atMost: Math.min(contextLength, sent + EMBEDDING_ADDED_TOKENS), bytes: 0 };
  }
  const bytes = Buffer.byteLength(input.text, "utf8");
  const atLeast = Math.ceil(bytes / LONGEST_TOKEN_BYTES);
  return { atLeast: truncate ? Math.min(atLeast, contextLength) : atLeast, atMost: Math.min(contextLength, bytes + EMBEDDING_ADDED_TOKENS), bytes };
}

/**
 * Tokens one image may take, at most, in the models upstreams serve: Qwen2-VL and Qwen2.5-VL at
 * their default `max_pixels` reach 16384; LLaVA-NeXT, Gemma 3, Llama 3.2 Vision and GPT-4o stay
 * far below.
 */
export const IMAGE_TOKEN_BOUND = 16_384;

/**
 * The most bytes of text one token may span in any vocabulary an upstream uses, for the prompt's
 * lower bound (which only refuses hopeless prompts, so it must never be too high): long runs of
 * spaces or dashes make some tokens a few dozen bytes; 128 leaves room.
 */
export const LONGEST_TOKEN_BYTES = 128;

export type OpenAiCompatibleEngineOptions = {
  modelId: string;
  upstream: UpstreamEntry;
  /** The entry's `context_length`; learnt from the upstream when absent. */
  contextLength?: number;
  /** What the model reads; default text only. */
  inputModalities?: readonly ("text" | "image")[];
  /** Vendor fields requests may pass; default: those the kind understands. */
  vendorFields?: readonly VendorField[];
  /** The `chat_template_kwargs` keys requests may pass, with their JSON types (the entry's); absent: any key. */
  chatTemplateKwargs?: Readonly<Record<string, TemplateKwargType>>;
  /** The bearer token (from `api_key_env`); never logged. */
  apiKey?: string;
  /** The entry's fill-in-the-middle token texts (`fim`), for kinds that build no FIM prompt themselves (vLLM, SGLang). */
  fim?: FimTokenTexts;
  /** The entry's `embeddings.dimensions`: the vectors' length before the first answer says it. */
  embeddingDimensions?: number;
  pool: UpstreamPool;
  /** HTTP to the members; default: a keep-alive agent built from the entry. */
  client?: UpstreamClient;
  onStatus?: (status: EngineStatus) => void;
  onEvent?: UpstreamEventSink;
};

/** The engine of a model served upstream: one pool, one keep-alive client, the kind's dialect. */
export class OpenAiCompatibleEngine implements Engine {
  readonly #options: OpenAiCompatibleEngineOptions;
  readonly #client: UpstreamClient;
  readonly #closing = new AbortController();
  #contextLength: number | undefined;
  #opened: "no" | "opening" | "open" | "failed" = "no";
  /** Tries of `open`'s work after the first (for the wait before the next). */
  #retries = 0;
  #retryTimer: NodeJS.Timeout | undefined;
  #failure = "";
  #lastStatus: EngineStatus["state"] | undefined;
  /** The vectors' length: the entry's, or learnt from the first embeddings answer. */
  #embeddingDimensions: number | undefined;

  constructor(options: OpenAiCompatibleEngineOptions) {
    this.#options = options;
    this.#contextLength = options.contextLength;
    this.#embeddingDimensions = options.embeddingDimensions;
    this.#client =
      options.client ??
      new UpstreamClient({
        connectTimeoutMs: options.upstream.connect_timeout * 1000,
        connectionsPerOrigin: options.upstream.max_in_flight,
        ...(options.apiKey !== undefined ? { apiKey: options.apiKey } : {}),
      });
  }

  /** The kind the members speak: configured, or detected by the pool. */
  get kind(): UpstreamKind | undefined {
    return this.#options.upstream.kind ?? this.#options.pool.kind;
  }

  /**
   * Detects the kind (the pool), then learns the context length. Never throws. When no upstream
   * answered (all down at start), the model is unavailable and it tries again, every 5 s doubling
   * to a minute, until one answers; the same while its kind is still unknown.
   */
  async open(): Promise<void> {
    this.#opened = "opening";
    this.#report();
    await this.#options.pool.open?.();
    await this.#learn();
  }

  /** One try at what `open` needs to know; schedules the next when something is still unknown. */
  async #learn(): Promise<void> {
    try {
      // The kind first (probed when not configured): the context length is asked for in its dialect.
      if (this.kind === undefined) await this.#options.pool.redetect?.();
      if (this.#contextLength === undefined) {
        const found = await detectContextLength({
          client: this.#client,
          kind: this.kind,
          baseUrls: this.#options.upstream.urls.map((member) => normalizeBaseUrl(memberUrl(member))),
          model: this.#options.upstream.model ?? this.#options.modelId,
          signal: AbortSignal.any([this.#closing.signal, AbortSignal.timeout(30_000)]),
        });
        if (found.contextLength === undefined) {
          // A server that refused the key said nothing: that, not a missing length, is the news.
          this.#fail(this.#refusalWords() ?? found.reason);
          this.#tryAgainLater();
          return;
        }
        if (found.note !== undefined) this.#options.onEvent?.("warn", `model ${this.#options.modelId}: ${found.note}`, {});
        this.#contextLength = found.contextLength;
      }
      this.#opened = "open";
      // Serving with what every kind honours until a member says what it is.
      if (this.kind === undefined) this.#tryAgainLater();
    } catch (error) {
      // The error's words may name hosts and addresses: the log has them, clients a fixed reason.
      const words = upstreamWordsForLog(error instanceof Error ? error.message : String(error), this.#options.apiKey ? [this.#options.apiKey] : []);
      this.#options.onEvent?.("warn", `model ${this.#options.modelId}: asking its upstream servers what they serve failed`, { error: words });
      this.#fail("its upstream servers could not be asked what they serve (the log says why)");
      this.#tryAgainLater();
    }
    this.#report();
  }

  /**
   * What the members refusing our credentials say, by name (`model#0: 401 Unauthorized: the server
   * refused the credentials; the key comes from …`), or undefined when none refuses.
   */
  #refusalWords(): string | undefined {
    const refusals = this.#options.pool.refusals?.() ?? [];
    if (refusals.length === 0) return undefined;
    return refusals.map(({ member, status }) => refusalDetail(`upstream ${member.id}`, status, credentialsSource(this.#options.upstream, member.baseUrl))).join("; ");
  }

  /** Tries `#learn` again after 5 s, doubling to a minute per try; never once closing. */
  #tryAgainLater(): void {
    if (this.#closing.signal.aborted) return;
    const delayMs = Math.min(60_000, 5_000 * 2 ** Math.min(this.#retries++, 4));
    this.#retryTimer = setTimeout(() => void this.#learn(), delayMs);
    this.#retryTimer.unref();
  }

  #fail(reason: string): void {
    this.#opened = "failed";
    this.#failure = `Model '${this.#options.modelId}' is not available: ${reason}.`;
    this.#report();
  }

  /** Tells `onStatus` when the state changed since it last heard. */
  #report(): void {
    const status = this.status();
    if (status.state === this.#lastStatus) return;
    this.#lastStatus = status.state;
    this.#options.onStatus?.(status);
  }

  status(): EngineStatus {
    if (this.#opened === "failed") return { state: "unavailable", detail: this.#failure };
    if (this.#opened !== "open") return { state: "loading", detail: "reaching the upstream servers" };
    const state = this.#options.pool.state();
    if (state === "ready") return { state: "ready" };
    const members = this.#options.pool.members();
    const healthy = members.filter((member) => member.healthy).length;
    const refused = this.#refusalWords();
    if (state === "degraded") return { state: "degraded", detail: `${healthy} of ${members.length} upstream servers are healthy${refused === undefined ? "" : `; ${refused}`}` };
    if (refused !== undefined) return { state: "unavailable", detail: `Model '${this.#options.modelId}' is not available: ${refused}.` };
    return { state: "unavailable", detail: `Model '${this.#options.modelId}': none of its ${members.length} upstream servers is reachable at the moment.` };
  }

  info(): EngineModelInfo | undefined {
    return this.#opened === "open" && this.#contextLength !== undefined ? { contextLength: this.#contextLength } : undefined;
  }

  /**
   * What `capabilities` last made, with what it was made of (the kind, detected once, and the
   * embedding dimensions, learnt once): read twice a request, rebuilt only when those changed.
   */
  #capabilities: { kind: UpstreamKind | undefined; embeddingDimensions: number | undefined; value: EngineCapabilities } | undefined;

  capabilities(): EngineCapabilities {
    const kind = this.kind;
    const kept = this.#capabilities;
    if (kept !== undefined && kept.kind === kind && kept.embeddingDimensions === this.#embeddingDimensions) return kept.value;
    const value = this.#makeCapabilities(kind);
    this.#capabilities = { kind, embeddingDimensions: this.#embeddingDimensions, value };
    return value;
  }

  #makeCapabilities(kind: UpstreamKind | undefined): EngineCapabilities {
    const dialect = dialectFor(kind);
    return {
      // Custom tools always (as functions of `input`); their grammars where the kind takes a grammar (and the tool choice forces the tool).
      supportedParameters: [...dialect.supportedParameters, "custom_tools", ...(dialect.grammarField !== undefined ? ["custom_tool_grammar"] : [])],
      inputModalities: this.#options.inputModalities ?? ["text"],
      vendorFields: this.#options.vendorFields ?? dialect.vendorFields,
      ...(servesFillInTheMiddle(kind, this.#options.fim) ? { fillInTheMiddle: true } : {}),
      // What it serves is the entry's `serves` (default chat and completions): the catalog reads it.
      ...(this.#embeddingDimensions !== undefined ? { embeddingDimensions: this.#embeddingDimensions } : {}),
    };
  }

  members(): EngineMember[] {
    return this.#options.pool.members();
  }

  /**
   * The context length once the engine is open. The pool's health does not refuse a request here:
   * the pool does, when no member can take it (503 `upstream_unavailable`), and a member whose
   * cooldown is over takes a trial request even while the pool reads as down.
   */
  #readyContext(): number {
    this.#report();
    if (this.#opened === "open" && this.#contextLength !== undefined) return this.#contextLength;
    const status = this.status();
    if (status.state === "unavailable") throw new ModelNotReadyError(status.detail, 5);
    throw new ModelNotReadyError(`Model '${this.#options.modelId}' is starting. Retry in a moment.`, 5);
  }

  boundPrompt(request: GenerationRequest): PromptBound {
    const contextLength = this.#readyContext();
    const bound = promptBound(request, LONGEST_TOKEN_BYTES, contextLength);
    const images = request.messages.reduce((sum, message) => sum + (message.images?.length ?? 0), 0);
    return { ...bound, atMost: bound.atMost + images * IMAGE_TOKEN_BOUND };
  }

  /** With `max_tokens` (and no ceiling to fit), `prepare` counts the bound's upper end, as far as the context goes: see there. */
  chargedPrompt(request: GenerationRequest, bound: PromptBound): number | undefined {
    if (request.completion !== undefined || request.maxTokens === undefined || request.fitMaxTokens === true || this.#contextLength === undefined) return undefined;
    return Math.min(bound.atMost, this.#contextLength - 1);
  }

  async prepare(request: GenerationRequest, known?: PromptBound): Promise<PreparedGeneration> {
    if (request.completion !== undefined) return this.#prepareCompletion(request, request.completion);
    const contextLength = this.#readyContext();
    const capabilities = this.capabilities();
    const dialect = dialectFor(this.kind);
    // Custom tools first: a grammar the kind cannot enforce is refused naming the tool's format.
    const customTools = planCustomTools(request, dialect, upstreamsOf(dialect));
    checkRequestForDialect(request, dialect, capabilities.vendorFields, customTools?.mode === "grammar");
    this.#checkTemplateKwargs(request);
    const bound = known ?? this.boundPrompt(request);
    // A ceiling (`fitMaxTokens`) is lowered below to the room the prompt leaves; a demand is refused past it.
    const ceiling = request.fitMaxTokens === true ? request.maxTokens : undefined;
    if (bound.atLeast >= contextLength || (ceiling === undefined && request.maxTokens !== undefined && bound.atLeast + request.maxTokens > contextLength)) {
      const asked = request.maxTokens === undefined ? "" : ` and ${request.maxTokens} in the completion`;
      throw new ContextLengthExceededError(
        `This model's maximum context length is ${contextLength} tokens. However, your messages are at least ${bound.atLeast} tokens${asked}. ` +
          "Please reduce the length of the messages or the completion.",
      );
    }
    // The upstream refuses a prompt over its context, so no prompt it serves is longer than this.
    let promptTokens = Math.min(bound.atMost, contextLength - 1);
    let promptCount: "exact" | "upper-bound" = "upper-bound";
    const model = this.#options.upstream.model ?? this.#options.modelId;
    // The completion's limit goes into the body below, once known.
    const body = buildRequestBody(request, { dialect, model, maxTokens: 1, ...(customTools !== undefined ? { customTools } : {}) });
    if (request.maxTokens === undefined || (ceiling !== undefined && promptTokens + ceiling > contextLength)) {
      // Without max_tokens (or with a ceiling the bound may not leave room for) the completion may
      // use what the context leaves: worth the upstream's exact count (one short round trip) where
      // it has one, as the bound leaves less room.
      const exact = await this.#countPrompt(model, body, request);
      if (exact !== undefined && exact >= contextLength) {
        throw new ContextLengthExceededError(`This model's maximum context length is ${contextLength} tokens. However, your messages are ${exact} tokens. Please reduce the length of the messages.`);
      }
      if (exact !== undefined && exact <= promptTokens) {
        promptTokens = exact;
        promptCount = "exact";
      }
    }
    const room = Math.max(1, contextLength - promptTokens);
    const maxTokens = request.maxTokens === undefined ? room : ceiling !== undefined ? Math.min(ceiling, room) : request.maxTokens;
    body[dialect.maxTokensField] = maxTokens;
    // Written now, once: a body that cannot be written is this request's 400, before any member is tried.
    const text = serializeRequestBody(body);
    const affinity = this.#affinityOf(request);
    return {
      promptTokens,
      promptCount,
      maxTokens,
      choices: request.choices,
      start: (signal: AbortSignal, ticket?: QueueTicket): RunningGeneration =>
        withCustomToolCalls(
          startUpstreamGeneration(this.#generationOptions(request, dialect, { body: this.#withPriority(text, ticket), promptTokens, affinity, stopSequences: true }), signal, ticket),
          customTools,
        ),
    };
  }

  /**
   * A text completion (see `completion-request.ts`): checked against the kind, each prompt bounded
   * against the context on its own (each is its own sequence upstream), the prompt tokens an upper
   * bound until the upstream reports them.
   */
  async #prepareCompletion(request: GenerationRequest, completion: TextCompletion): Promise<PreparedGeneration> {
    const contextLength = this.#readyContext();
    const dialect = dialectFor(this.kind);
    const capabilities = this.capabilities();
    checkRequestForDialect(request, dialect, capabilities.vendorFields);
    if (completion.suffix !== undefined && capabilities.fillInTheMiddle !== true) {
      throw new UnsupportedParameterError(`Model '${this.#options.modelId}' cannot fill in the middle: 'suffix' needs a model with fill-in-the-middle tokens.`, "suffix");
    }
    const wire = completionWire(completion, this.kind);
    checkCompletionForKind(request, wire, upstreamsOf(dialect));
    const bounds = completionPromptBounds(completion, LONGEST_TOKEN_BYTES, contextLength);
    // No limit asked (`/infill`'s `n_predict` -1): what the context leaves after the longest prompt's lower bound.
    const maxTokens = request.maxTokens ?? Math.max(1, contextLength - Math.max(...bounds.map((bound) => bound.atLeast)));
    const several = bounds.length > 1;
    bounds.forEach((bound, index) => {
      if (bound.atLeast + maxTokens <= contextLength) return;
      const param = several ? `prompt[${index}]` : "prompt";
      throw new ContextLengthExceededError(
        `This model's maximum context length is ${contextLength} tokens. However, '${param}' is at least ${bound.atLeast} tokens and ${maxTokens} were asked for in the completion. Please reduce the length of the prompt or the completion.`,
        param,
      );
    });
    // The upstream refuses a prompt over its context, so none it serves is longer than this.
    const promptTokens = bounds.reduce((sum, bound) => sum + Math.min(bound.atMost, contextLength - 1), 0);
    const model = this.#options.upstream.model ?? this.#options.modelId;
    const body = buildCompletionBody(request, { dialect, model, maxTokens, wire, ...(this.#options.fim !== undefined ? { fim: this.#options.fim } : {}) });
    const text = serializeRequestBody(body);
    const first = completion.prompts[0]!;
    const affinity = this.#affinityOf({ ...request, messages: [{ role: "user", content: "text" in first ? first.text : first.tokens.slice(0, 256).join(",") }] });
    // llama-server runs several prompts as one task each, each finishing with its own usage.
    const endpoint = { wire, perTaskUsage: this.kind === "llama-server", url: (baseUrl: string) => (wire === "infill" ? `${serverRoot(baseUrl)}/infill` : `${baseUrl.replace(/\/+$/, "")}/completions`) };
    return {
      promptTokens,
      promptCount: "upper-bound",
      maxTokens,
      choices: request.choices,
      start: (signal: AbortSignal, ticket?: QueueTicket): RunningGeneration =>
        withEcho(
          startUpstreamGeneration(
            { ...this.#generationOptions(request, dialect, { body: this.#withPriority(text, ticket), promptTokens, affinity, stopSequences: wire !== "infill" }), endpoint },
            signal,
            ticket,
          ),
          completion,
        ),
    };
  }

  /**
   * Bounds on an embeddings request's tokens without tokenizing: a text input takes at least one
   * token per `LONGEST_TOKEN_BYTES` bytes, at most one per byte plus the model's added tokens, never
   * more than the context (the upstream refuses or cuts a longer one); token ids count as sent.
   */
  boundEmbeddings(request: EmbeddingRequest): PromptBound {
    const contextLength = this.#readyContext();
    let atLeast = 0;
    let atMost = 0;
    let bytes = 0;
    for (const input of request.inputs) {
      const each = embeddingInputBound(input, contextLength, request.truncate);
      atLeast += each.atLeast;
      atMost += each.atMost;
      bytes += each.bytes;
    }
    return { atLeast, atMost, bytes, verbatimBytes: bytes };
  }

  /**
   * Checks an embeddings request against the context (an input that cannot fit is refused naming
   * it, unless `truncate`: token ids are cut here, text is cut by a vLLM member
   * (`truncate_prompt_tokens`) and otherwise left to the upstream) and writes the body once. Its
   * count is an upper bound; the upstream's usage bills it.
   */
  async prepareEmbeddings(request: EmbeddingRequest): Promise<PreparedEmbeddings> {
    const contextLength = this.#readyContext();
    let promptTokens = 0;
    const inputs = request.inputs.map((input, index) => {
      const bound = embeddingInputBound(input, contextLength, request.truncate);
      if (bound.atLeast > contextLength && !request.truncate) {
        throw new ContextLengthExceededError(
          `This model's maximum context length is ${contextLength} tokens per input. However, 'input[${index}]' has at least ${bound.atLeast} tokens. Please reduce the length of 'input[${index}]'.`,
          "input",
        );
      }
      promptTokens += bound.atMost;
      return "text" in input ? input.text : input.tokens.slice(0, request.truncate ? contextLength : undefined);
    });
    const body: Record<string, unknown> = {
      model: this.#options.upstream.model ?? this.#options.modelId,
      input: inputs,
      encoding_format: "float",
      ...(request.user !== undefined ? { user: request.user } : {}),
      ...(request.truncate && this.kind === "vllm" ? { truncate_prompt_tokens: contextLength } : {}),
    };
    const text = JSON.stringify(body);
    const upstream = this.#options.upstream;
    /** The upstream's count once it answered; until then unknown, so nothing (an answer cut off is not billed). */
    let embeddedTokens = 0;
    return {
      promptTokens,
      promptCount: "upper-bound",
      embeddedTokens: () => embeddedTokens,
      run: async (signal, ticket) => {
        const result = await runUpstreamEmbeddings(
          {
            pool: this.#options.pool,
            client: this.#client,
            body: text,
            inputs: inputs.length,
            promptTokens,
            maxAttempts: upstream.max_attempts,
            // The whole answer is one "first token": an embedding has nothing before it.
            timeoutMs: upstream.first_token_timeout * 1000,
            secrets: this.#options.apiKey !== undefined && this.#options.apiKey !== "" ? [this.#options.apiKey] : [],
            onEvent: (level, message, fields) => this.#options.onEvent?.(level, message, fields),
            closing: this.#closing.signal,
          },
          signal,
          ticket,
        );
        this.#embeddingDimensions ??= result.vectors[0]?.length;
        embeddedTokens = result.usage.promptTokens;
        return result;
      },
    };
  }

  /** The request's affinity key (`affinity.ts`), only where the pool has members to choose between: hashing the prefix costs a one-member pool for nothing. */
  #affinityOf(request: GenerationRequest): string | undefined {
    this.#severalMembers ??= this.#options.pool.members().length > 1;
    return this.#severalMembers ? affinityKey(request) : undefined;
  }

  #severalMembers: boolean | undefined;

  /**
   * What a started upstream generation needs besides its endpoint (chat's, unless a text completion
   * names another): the pool, the written body, the bounds, the retries and timeouts of the entry.
   * `stopSequences`: the member's kind reports which stop sequence ended a choice in this answer.
   */
  #generationOptions(
    request: GenerationRequest,
    dialect: ReturnType<typeof dialectFor>,
    sent: { body: string; promptTokens: number; affinity: string | undefined; stopSequences: boolean },
  ): UpstreamGenerationOptions {
    const upstream = this.#options.upstream;
    return {
      pool: this.#options.pool,
      client: this.#client,
      body: sent.body,
      choices: request.choices,
      promptTokens: sent.promptTokens,
      logprobs: request.logprobs !== undefined,
      ...(dialect.stopSequenceField !== undefined && sent.stopSequences ? { stopSequenceField: dialect.stopSequenceField, stop: request.sampling.stop } : {}),
      buffered: request.buffered === true,
      ...(sent.affinity !== undefined ? { affinity: sent.affinity } : {}),
      maxAttempts: upstream.max_attempts,
      firstTokenTimeoutMs: upstream.first_token_timeout * 1000,
      idleTimeoutMs: upstream.idle_timeout * 1000,
      readUsageAfterLeave: !dialect.continuousUsage && !dialect.timingsPerToken,
      secrets: this.#options.apiKey !== undefined && this.#options.apiKey !== "" ? [this.#options.apiKey] : [],
      onEvent: (level, message, fields) => this.#options.onEvent?.(level, message, fields),
      closing: this.#closing.signal,
    };
  }

  /**
   * Holds `chat_template_kwargs` to the keys and JSON types the model's entry declares, when it
   * declares any: an undeclared key is a 400 `unsupported_parameter`, a value of another type a
   * 400 `invalid_type`, each naming the key.
   */
  #checkTemplateKwargs(request: GenerationRequest): void {
    const declared = this.#options.chatTemplateKwargs;
    const kwargs = request.vendor?.chat_template_kwargs as Record<string, unknown> | null | undefined;
    if (declared === undefined || kwargs == null) return;
    for (const [key, value] of Object.entries(kwargs)) {
      const param = `chat_template_kwargs.${key}`;
      const type = Object.hasOwn(declared, key) ? declared[key] : undefined;
      if (type === undefined) {
        const allowed = Object.keys(declared);
        throw new UnsupportedParameterError(
          `Model '${this.#options.modelId}' does not take the chat_template_kwargs key '${key}': its entry allows ${allowed.length === 0 ? "none" : allowed.map((name) => `'${name}'`).join(", ")}.`,
          param,
        );
      }
      const matches = type === "integer" ? Number.isInteger(value) : typeof value === type;
      if (!matches) throw new InvalidRequestError(`Invalid '${param}': expected ${type === "integer" ? "an integer" : `a ${type}`}.`, param, "invalid_type");
    }
  }

  /** The prompt's tokens counted by a healthy member's own template and tokenizer, when its kind can (see `tokenize.ts`). */
  async #countPrompt(model: string, body: Record<string, unknown>, request: GenerationRequest): Promise<number | undefined> {
    if (!countsPromptsExactly(this.kind)) return undefined;
    const urls = this.#options.upstream.urls.map(memberUrl);
    const healthy = this.#options.pool.members().findIndex((member) => member.healthy);
    const counted = await countPromptTokens({
      kind: this.kind,
      baseUrl: normalizeBaseUrl(urls[Math.max(0, healthy)] ?? urls[0]!),
      model,
      messages: body.messages as unknown[],
      ...(Array.isArray(body.tools) ? { tools: body.tools as unknown[] } : {}),
      ...(request.vendor?.chat_template_kwargs !== undefined ? { chatTemplateKwargs: request.vendor.chat_template_kwargs as Record<string, unknown> } : {}),
      ...(this.#options.apiKey !== undefined ? { apiKey: this.#options.apiKey } : {}),
      signal: this.#closing.signal,
    }).catch(() => undefined);
    return counted?.tokens;
  }

  /**
   * The body with the ticket's band as the upstream's `priority` field, for members started with
   * priority scheduling (`priority_scheduling`): vLLM serves lower values first, SGLang higher ones.
   * The body is the JSON object written at `prepare`: the field is appended to it.
   */
  #withPriority(body: string, ticket: QueueTicket | undefined): string {
    if (ticket === undefined || !this.#options.upstream.priority_scheduling) return body;
    const priority = upstreamPriority(this.kind, ticket.tier);
    return priority === undefined ? body : `${body.slice(0, body.lastIndexOf("}"))},"priority":${priority}}`;
  }

  async close(): Promise<void> {
    this.#closing.abort(new Error("engine closing"));
    clearTimeout(this.#retryTimer);
    this.#options.pool.close();
    await this.#client.close();
  }
}
