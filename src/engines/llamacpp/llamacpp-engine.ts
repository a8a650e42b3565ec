/**
 * The in-process llama.cpp engine (node-llama-cpp). One model, one context with `parallel`
 * sequences: concurrent requests are decoded in the same batches (continuous batching);
 * further requests wait in a bounded FIFO queue. Cancellation is checked after every token.
 */
import { resolveChatWrapper, type ChatWrapper, type Llama, type LlamaContext, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";
import type {
  Engine,
  EngineModelInfo,
  EngineStatus,
  GenerationRequest,
  PreparedGeneration,
  RunningGeneration,
  StreamPart,
  TokenUsage,
} from "../engine.ts";
import { SlotQueue } from "../slot-queue.ts";
import { runChoices } from "../run-choices.ts";
import { ContextLengthExceededError, InvalidRequestError, ModelNotReadyError } from "../../protocol/errors.ts";
import { renderChatPrompt, type RenderedPrompt } from "./chat-prompt.ts";
import { generateChoice } from "./generate-choice.ts";
import { tokenDescriber, type DescribeToken } from "./token-logprobs.ts";
import { resolveModelFile, type DownloadProgress, type ModelFileSource } from "./model-file.ts";

export type LlamaCppEngineOptions = {
  modelId: string;
  source: ModelFileSource;
  dataDir: string;
  /** Gives the shared llama.cpp runtime (loaded once per process). */
  llama: () => Promise<Llama>;
  /** Largest context per sequence; capped at the model's training context. */
  contextSize: number;
  parallel: number;
  queueSize: number;
  threads: number;
  onProgress?: (progress: DownloadProgress) => void;
  /** Told when the status changes (for logs). */
  onStatus?: (status: EngineStatus) => void;
};

type Loaded = {
  model: LlamaModel;
  context: LlamaContext;
  wrapper: ChatWrapper;
  queue: SlotQueue<LlamaContextSequence>;
  /** Tokens in the model's vocabulary (ids 0..vocabularySize-1). */
  vocabularySize: number;
  /** Made on first use of log probabilities. */
  describeToken?: DescribeToken;
};

/** The vocabulary's token pieces as the GGUF stores them (`<0xE2>` for byte tokens), when it has them. */
function vocabularyPieces(model: LlamaModel): readonly string[] | undefined {
  const tokens: unknown = (model.fileInfo.metadata as { tokenizer?: { ggml?: { tokens?: unknown } } }).tokenizer?.ggml?.tokens;
  return Array.isArray(tokens) && tokens.every((piece) => typeof piece === "string") ? tokens : undefined;
}

/** Counts the vocabulary (ids are 0..size-1). */
function countVocabulary(model: LlamaModel): number {
  let count = 0;
  for (const _token of model.iterateAllTokens()) count++;
  return count;
}

/** What an operator reads when a model cannot be loaded: the reason and what to do instead. */
function unavailableDetail(modelId: string, reason: string): string {
  return (
    `Model '${modelId}' is not available: ${reason}. ` +
    "Serve a local GGUF file instead: turnpike serve --model /path/to/model.gguf (or set TURNPIKE_MODELS)."
  );
}

export class LlamaCppEngine implements Engine {
  readonly #options: LlamaCppEngineOptions;
  #status: EngineStatus = { state: "loading" };
  #loaded: Loaded | undefined;
  readonly #closing = new AbortController();

  constructor(options: LlamaCppEngineOptions) {
    this.#options = options;
  }

  status(): EngineStatus {
    return this.#status;
  }

  info(): EngineModelInfo | undefined {
    if (this.#loaded === undefined) return undefined;
    return { contextLength: this.#loaded.context.contextSize };
  }

  #setStatus(status: EngineStatus): void {
    this.#status = status;
    this.#options.onStatus?.(status);
  }

  /** Downloads (if needed) and loads the model. Never throws: failure leaves the engine `unavailable`. */
  async load(): Promise<void> {
    const options = this.#options;
    try {
      if ("remote" in options.source) this.#setStatus({ state: "downloading", detail: options.source.remote });
      const file = await resolveModelFile(options.source, options.dataDir, {
        signal: this.#closing.signal,
        onProgress: (progress) => {
          const fraction = progress.totalBytes > 0 ? progress.downloadedBytes / progress.totalBytes : undefined;
          this.#status = { state: "downloading", progress: fraction, detail: "remote" in options.source ? options.source.remote : undefined };
          options.onProgress?.(progress);
        },
      });
      this.#setStatus({ state: "loading", detail: file });
      const llama = await options.llama();
      const model = await llama.loadModel({ modelPath: file });
      const contextSize = Math.min(options.contextSize, model.trainContextSize || options.contextSize);
      const context = await model.createContext({
        contextSize,
        sequences: options.parallel,
        threads: options.threads,
      });
      const sequences = Array.from({ length: options.parallel }, () => context.getSequence());
      const wrapper = resolveChatWrapper(model);
      this.#loaded = { model, context, wrapper, queue: new SlotQueue(sequences, options.queueSize), vocabularySize: countVocabulary(model) };
      this.#setStatus({ state: "ready" });
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      this.#setStatus({ state: "unavailable", detail: unavailableDetail(options.modelId, reason) });
    }
  }

  /** The chat wrapper in use (for logs and tests). */
  chatWrapperName(): string | undefined {
    return this.#loaded?.wrapper.wrapperName;
  }

  /** Slots busy and requests waiting (for metrics). */
  queueStats(): { busy: number; waiting: number; capacity: number } | undefined {
    const queue = this.#loaded?.queue;
    return queue && { busy: queue.busy, waiting: queue.waiting, capacity: queue.capacity };
  }

  async prepare(request: GenerationRequest): Promise<PreparedGeneration> {
    const loaded = this.#loaded;
    if (loaded === undefined || this.#status.state !== "ready") throw this.#notReadyError();
    checkRequest(request, loaded.vocabularySize);
    const prompt = renderChatPrompt(loaded.model, loaded.wrapper, request.messages);
    const contextLength = loaded.context.contextSize;
    const promptTokens = prompt.tokens.length;
    const room = contextLength - promptTokens;
    if (room < 1 || (request.maxTokens !== undefined && request.maxTokens > room)) {
      const asked = request.maxTokens === undefined ? "" : `, ${request.maxTokens} in the completion`;
      throw new ContextLengthExceededError(
        `This model's maximum context length is ${contextLength} tokens. However, you requested ` +
          `${promptTokens + (request.maxTokens ?? 1)} tokens (${promptTokens} in the messages${asked}). ` +
          "Please reduce the length of the messages or the completion.",
      );
    }
    const maxTokens = request.maxTokens ?? room;
    return {
      promptTokens,
      maxTokens,
      choices: request.choices,
      start: (signal) => this.#start(loaded, prompt, request, maxTokens, signal),
    };
  }

  #notReadyError(): ModelNotReadyError {
    const status = this.#status;
    switch (status.state) {
      case "downloading": {
        const percent = status.progress === undefined ? "" : ` (${Math.floor(status.progress * 100)}%)`;
        return new ModelNotReadyError(`Model '${this.#options.modelId}' is still downloading${percent}. Retry when GET /ready answers 200.`, 30);
      }
      case "loading":
        return new ModelNotReadyError(`Model '${this.#options.modelId}' is loading. Retry in a moment.`, 5);
      case "unavailable":
        return new ModelNotReadyError(status.detail);
      case "ready":
        return new ModelNotReadyError(`Model '${this.#options.modelId}' is shutting down.`);
    }
  }

  #start(loaded: Loaded, prompt: RenderedPrompt, request: GenerationRequest, maxTokens: number, signal: AbortSignal): RunningGeneration {
    // Throws EngineOverloadedError synchronously when the queue is full.
    const stop = AbortSignal.any([signal, this.#closing.signal]);
    const rank = (sequence: LlamaContextSequence) => sequence.compareContextTokens(prompt.tokens).firstDifferentIndex;
    // Prefer the free sequence that already holds the longest prefix of this prompt.
    const leased = loaded.queue.acquire(stop, rank);
    let started = false;
    const guarded = leased.then((lease) => {
      // A lease nobody will consume (aborted before generation began) goes straight back.
      const releaseIfIdle = () => {
        if (!started) lease.release();
      };
      if (stop.aborted) releaseIfIdle();
      else stop.addEventListener("abort", releaseIfIdle, { once: true });
      return lease;
    });
    guarded.catch(() => {});
    const choiceUsages: TokenUsage[] = Array.from({ length: request.choices }, () => ({
      promptTokens: prompt.tokens.length,
      cachedPromptTokens: 0,
      completionTokens: 0,
    }));
    const describeToken = this.#describeToken(loaded);
    const parts: AsyncIterable<StreamPart> = {
      async *[Symbol.asyncIterator]() {
        const first = await guarded;
        started = true;
        // Extra choices run in parallel only in slots that are free now (never waiting while
        // holding one, so requests cannot deadlock); the rest follow one another in these slots.
        const leases = [first];
        while (leases.length < request.choices) {
          const extra = loaded.queue.tryAcquire(rank);
          if (extra === undefined) break;
          leases.push(extra);
        }
        yield* runChoices(leases, request.choices, stop, (sequence, choice, choiceSignal) =>
          generateChoice({
            model: loaded.model,
            sequence,
            prompt,
            request,
            choice,
            maxTokens,
            signal: choiceSignal,
            describeToken,
            usage: choiceUsages[choice]!,
          }),
        );
      },
    };
    // The prompt counts once (as OpenAI bills `n`), its cached part as the first choice found it.
    const usage = (): TokenUsage => ({
      promptTokens: prompt.tokens.length,
      cachedPromptTokens: choiceUsages[0]!.cachedPromptTokens,
      completionTokens: choiceUsages.reduce((sum, choice) => sum + choice.completionTokens, 0),
    });
    return { admitted: guarded.then(() => undefined), parts, usage };
  }

  /** Token text and bytes for log probabilities (byte-fallback tokens read from the vocabulary). */
  #describeToken(loaded: Loaded): DescribeToken {
    loaded.describeToken ??= tokenDescriber(
      (tokens, lastTokens) => loaded.model.detokenize(tokens as Token[], false, lastTokens as Token[]),
      vocabularyPieces(loaded.model),
    );
    return loaded.describeToken;
  }

  async close(): Promise<void> {
    this.#closing.abort(new Error("engine closing"));
    const loaded = this.#loaded;
    this.#loaded = undefined;
    if (loaded === undefined) return;
    await loaded.context.dispose();
    await loaded.model.dispose();
  }
}

/** What this engine cannot honour, refused before anything is queued (400 naming the field). */
function checkRequest(request: GenerationRequest, vocabularySize: number): void {
  request.messages.forEach((message, index) => {
    if (message.images !== undefined && message.images.length > 0) {
      throw new InvalidRequestError(
        "This model does not accept images: node-llama-cpp 3.22 cannot load vision projectors (mmproj), so models served by the embedded llama.cpp engine read text only.",
        `messages[${index}].content`,
        "model_does_not_support_images",
      );
    }
  });
  for (const token of request.sampling.logitBias?.keys() ?? []) {
    if (!Number.isInteger(token) || token < 0 || token >= vocabularySize) {
      throw new InvalidRequestError(
        `Invalid 'logit_bias': token id ${token} is not in this model's vocabulary (ids 0 to ${vocabularySize - 1}).`,
        "logit_bias",
        "invalid_logit_bias",
      );
    }
  }
}
