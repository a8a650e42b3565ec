/**
 * The in-process llama.cpp engine (node-llama-cpp). One model, one context with `parallel`
 * sequences: concurrent requests are decoded in the same batches (continuous batching);
 * further requests wait in a bounded FIFO queue. Cancellation is checked after every token.
 */
import { randomInt } from "node:crypto";
import { LlamaGrammarEvaluationState, resolveChatWrapper, type ChatWrapper, type Llama, type LlamaContext, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";
import type {
  Engine,
  EngineFinishReason,
  EngineModelInfo,
  EngineStatus,
  GenerationRequest,
  PreparedGeneration,
  RunningGeneration,
  StreamPart,
  TokenUsage,
} from "../engine.ts";
import { SlotQueue, type SlotLease } from "../slot-queue.ts";
import { ContextLengthExceededError, ModelNotReadyError } from "../../protocol/errors.ts";
import { renderChatPrompt, type RenderedPrompt } from "./chat-prompt.ts";
import { TextStream } from "./text-stream.ts";
import { GrammarFactory } from "./grammar.ts";
import { planReply, type ReplyPlan } from "./reply-plan.ts";
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
  grammars: GrammarFactory;
  queue: SlotQueue<LlamaContextSequence>;
};

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
      this.#loaded = { model, context, wrapper, grammars: new GrammarFactory(llama), queue: new SlotQueue(sequences, options.queueSize) };
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
    // Throws a 400 for a response format or tool schema the grammar cannot enforce.
    const plan = await planReply(loaded.grammars, loaded.wrapper, request);
    const prompt = renderChatPrompt(loaded.model, loaded.wrapper, request.messages, plan.functions);
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
      start: (signal) => this.#start(loaded, prompt, plan, request, maxTokens, signal),
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

  #start(loaded: Loaded, prompt: RenderedPrompt, plan: ReplyPlan, request: GenerationRequest, maxTokens: number, signal: AbortSignal): RunningGeneration {
    // Throws EngineOverloadedError synchronously when the queue is full.
    const stop = AbortSignal.any([signal, this.#closing.signal]);
    // Prefer the free sequence that already holds the longest prefix of this prompt.
    const leased = loaded.queue.acquire(stop, (sequence) => sequence.compareContextTokens(prompt.tokens).firstDifferentIndex);
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
    const usage: TokenUsage = { promptTokens: prompt.tokens.length, cachedPromptTokens: 0, completionTokens: 0 };
    const engine = this;
    const parts: AsyncIterable<StreamPart> = {
      async *[Symbol.asyncIterator]() {
        const lease = await guarded;
        started = true;
        yield* engine.#generate(loaded, lease, prompt, plan, request, maxTokens, stop, usage);
      },
    };
    return { admitted: guarded.then(() => undefined), parts, usage: () => ({ ...usage }) };
  }

  async *#generate(
    loaded: Loaded,
    lease: SlotLease<LlamaContextSequence>,
    prompt: RenderedPrompt,
    plan: ReplyPlan,
    request: GenerationRequest,
    maxTokens: number,
    signal: AbortSignal,
    usage: TokenUsage,
  ): AsyncGenerator<StreamPart> {
    const { model } = loaded;
    const sequence = lease.slot;
    try {
      const reused = await reusePrefix(sequence, prompt.tokens);
      usage.cachedPromptTokens = reused;
      const sampling = request.sampling;
      const generated: Token[] = [];
      const penalize = sampling.frequencyPenalty !== 0 || sampling.presencePenalty !== 0;
      const text = new TextStream(
        (tokens, lastTokens) => model.detokenize(tokens as Token[], plan.specialTokensAsText, lastTokens as Token[]),
        [...sampling.stop, ...prompt.stopTexts],
      );
      const reply = plan.reader();
      let reason: EngineFinishReason = "length";
      const tokens = sequence.evaluate(prompt.tokens.slice(reused), {
        temperature: sampling.temperature,
        topP: sampling.topP < 1 ? sampling.topP : undefined,
        seed: sampling.seed ?? randomInt(0, 2 ** 31),
        grammarEvaluationState: plan.grammar && new LlamaGrammarEvaluationState({ model, grammar: plan.grammar }),
        yieldEogToken: true,
        repeatPenalty: penalize
          ? {
              punishTokens: () => generated.slice(-256),
              maxPunishTokens: 256,
              penalty: 1,
              frequencyPenalty: sampling.frequencyPenalty,
              presencePenalty: sampling.presencePenalty,
            }
          : undefined,
      });
      if (signal.aborted) reason = "cancelled";
      else {
        for await (const token of tokens) {
          generated.push(token);
          usage.completionTokens = generated.length;
          if (model.isEogToken(token) || prompt.stopTokens.has(token)) {
            reason = "stop";
            break;
          }
          const step = text.push(token);
          if (step.text.length > 0) yield* reply.push(step.text);
          if (step.stopped) {
            reason = "stop";
            break;
          }
          if (signal.aborted) {
            reason = "cancelled";
            break;
          }
          if (generated.length >= maxTokens) {
            reason = "length";
            break;
          }
        }
      }
      if (reason !== "cancelled") {
        const tail = text.flush();
        if (tail.length > 0) yield* reply.push(tail);
        yield* reply.flush();
        if (text.stopped) reason = "stop";
        if (reason === "stop" && reply.calls > 0) reason = "tool_calls";
      }
      yield { type: "finish", reason, usage: { ...usage } };
    } finally {
      lease.release();
    }
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

/**
 * Keeps the part of the sequence's state that matches the new prompt (prefix caching) and
 * erases the rest. At least one prompt token is always evaluated anew, to get its logits.
 * Returns how many prompt tokens were reused.
 */
async function reusePrefix(sequence: LlamaContextSequence, promptTokens: readonly Token[]): Promise<number> {
  const { firstDifferentIndex } = sequence.compareContextTokens([...promptTokens]);
  const keep = Math.min(firstDifferentIndex, promptTokens.length - 1);
  if (sequence.nextTokenIndex > keep) {
    await sequence.eraseContextTokenRanges([{ start: keep, end: sequence.nextTokenIndex }]);
  }
  return keep;
}
