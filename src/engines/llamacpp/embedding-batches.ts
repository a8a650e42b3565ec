/**
 * Embeddings decoded together, as llama-server decodes its slots: every input waiting is put in one
 * `llama_decode` as a sequence of its own (as many as fit the batch, oldest first), and each
 * sequence's pooled vector is read after it. Inputs that arrive while a decode runs go in the next.
 *
 * This needs node-llama-cpp's binding as Turnpike patches it (`scripts/build-node-llama-cpp.sh`):
 * the stock `AddonContext::GetEmbedding` reads sequence 0's vector only, and an embedding context's
 * KV cache must be unified (one cache for all sequences) for inputs of any lengths to share a
 * batch. The patch also keeps a context's thread pool between decodes, as llama-server
 * does (the stock binding makes one per decode, whose new thread may wait for a core while the
 * other spins at the graph's barriers: 0.90-0.91x llama-server for one input at a time on two threads,
 * 0.96-0.98x with the pool kept). `sequenceEmbeddings` says whether the loaded binding has the patch;
 * without it `embeddings.ts` runs one input per decode on lanes.
 *
 * The batch is driven here through the context's native handle (node-llama-cpp's own batching
 * could split a group over several decodes, and a vector is only there after its sequence's
 * decode): `initBatch`, a sequence per input with its last token as the output, `decodeBatch` on
 * the threads node-llama-cpp's thread splitter lends the context, `getEmbedding(length, 0,
 * sequence)`, then each sequence's cells are freed. These are node-llama-cpp 3.22's internal
 * names, pinned by this file's tests.
 */
import type { LlamaContext, LlamaModel, Token } from "node-llama-cpp";

/** The native context's calls this uses (node-llama-cpp's `AddonContext`). */
type NativeContext = {
  initBatch(size: number): void;
  addToBatch(sequenceId: number, firstTokenSequenceIndex: number, tokens: Uint32Array, logitIndexes: Uint32Array): Uint32Array;
  decodeBatch(): Promise<void>;
  getEmbedding(inputTokensLength: number, maxVectorSize: number, sequenceId: number): Float64Array;
  disposeSequence(sequenceId: number): void;
  setThreads(threads: number): void;
};

type ThreadLoan = [threads: number, handle: { dispose(): void }];

/** The parts of a `LlamaContext` beyond its public API this uses. */
type ContextInternals = {
  _ctx: NativeContext;
  _reserveThreads(): void;
  _scheduleToFreeReservedThreads(): void;
  _threadSplitterConsumer?: { getAllocationToConsume(): ThreadLoan | undefined | Promise<ThreadLoan | undefined> };
};

/** Whether the model's llama.cpp binding reads any sequence's pooled vector (Turnpike's patch). */
export function sequenceEmbeddings(model: LlamaModel): boolean {
  const llama = model.llama as unknown as { _bindings?: { turnpikeEmbeddingSequences?: unknown } };
  return llama._bindings?.turnpikeEmbeddingSequences === 1;
}

export type EmbeddingBatchOptions = {
  /** Tokens one decode holds at least (every input fits one: `contextSize + 1`); rounded up to a multiple of `sequences`. */
  batchTokens: number;
  /** Inputs one decode holds at most (the context's sequences). */
  sequences: number;
  /** llama.cpp threads for the context. */
  threads: number;
};

/** Since start: decodes, inputs in them, their tokens, and the most inputs one decode held. */
export type BatchStats = { batches: number; sequences: number; tokens: number; mostInOne: number };

type Waiting = { tokens: readonly Token[]; resolve: (vector: Float64Array) => void; reject: (error: unknown) => void };

export class EmbeddingBatches {
  readonly #context: LlamaContext;
  readonly #native: NativeContext;
  readonly #options: EmbeddingBatchOptions;
  readonly #waiting: Waiting[] = [];
  readonly #stats: BatchStats = { batches: 0, sequences: 0, tokens: 0, mostInOne: 0 };
  /** The loop that decodes while inputs wait; undefined while idle. */
  #running: Promise<void> | undefined;
  #closed = false;

  private constructor(context: LlamaContext, options: EmbeddingBatchOptions) {
    this.#context = context;
    this.#native = (context as unknown as ContextInternals)._ctx;
    this.#options = options;
  }

  /**
   * An embedding context of `sequences` sequences sharing one KV cache of `batchTokens` cells
   * (node-llama-cpp sizes the native context as its context size × sequences).
   */
  static async open(model: LlamaModel, asked: EmbeddingBatchOptions): Promise<EmbeddingBatches> {
    if (!sequenceEmbeddings(model)) throw new Error("this llama.cpp binding reads sequence 0's embedding only (build Turnpike's patched binding: scripts/build-node-llama-cpp.sh)");
    // A multiple of the sequences: llama.cpp reserves its worst-case graph with the batch split
    // evenly between them, and a pooled model's graph asserts (ggml_can_mul_mat) when it is not.
    const options = { ...asked, batchTokens: Math.ceil(asked.batchTokens / asked.sequences) * asked.sequences };
    const context = await model.createContext({
      contextSize: options.batchTokens / options.sequences,
      batchSize: options.batchTokens,
      sequences: options.sequences,
      threads: options.threads,
      // node-llama-cpp's embedding contexts are made with this internal option (`LlamaEmbeddingContext._create`).
      ...({ _embeddings: true } as object),
    });
    return new EmbeddingBatches(context, options);
  }

  stats(): BatchStats {
    return { ...this.#stats };
  }

  /** The pooled vector of one input (not normalised), decoded with whatever else waits. */
  embed(tokens: readonly Token[]): Promise<Float64Array> {
    if (this.#closed) return Promise.reject(new Error("engine closing"));
    if (tokens.length === 0 || tokens.length > this.#options.batchTokens) {
      return Promise.reject(new Error(`an input of ${tokens.length} tokens does not fit a batch of ${this.#options.batchTokens}`));
    }
    return new Promise((resolve, reject) => {
      this.#waiting.push({ tokens, resolve, reject });
      // The first decode starts in the next turn of the event loop: inputs given in this one join it.
      this.#running ??= new Promise<void>((started) => setImmediate(started)).then(() => this.#loop());
    });
  }

  async #loop(): Promise<void> {
    try {
      while (this.#waiting.length > 0 && !this.#closed) {
        await this.#decode(this.#take());
        // Whoever got a vector may give its next input in this turn: it joins the next decode.
        await new Promise((resolve) => setImmediate(resolve));
      }
    } finally {
      this.#running = undefined;
    }
  }

  /** The oldest inputs that fit one decode together (at least one). */
  #take(): Waiting[] {
    const { batchTokens, sequences } = this.#options;
    let tokens = 0;
    let count = 0;
    while (count < this.#waiting.length && count < sequences && tokens + this.#waiting[count]!.tokens.length <= batchTokens) {
      tokens += this.#waiting[count]!.tokens.length;
      count++;
    }
    return this.#waiting.splice(0, Math.max(1, count));
  }

  async #decode(group: Waiting[]): Promise<void> {
    const native = this.#native;
    const internals = this.#context as unknown as ContextInternals;
    const total = group.reduce((sum, item) => sum + item.tokens.length, 0);
    let loan: ThreadLoan | undefined;
    try {
      native.initBatch(total);
      group.forEach((item, sequence) => native.addToBatch(sequence, 0, Uint32Array.from(item.tokens), Uint32Array.of(item.tokens.length - 1)));
      internals._reserveThreads();
      loan = (await internals._threadSplitterConsumer?.getAllocationToConsume()) ?? undefined;
      if (loan !== undefined) native.setThreads(loan[0]);
      await native.decodeBatch();
    } catch (error) {
      for (const item of group) item.reject(error);
      this.#free(group.length);
      return;
    } finally {
      loan?.[1].dispose();
      internals._scheduleToFreeReservedThreads();
    }
    this.#stats.batches++;
    this.#stats.sequences += group.length;
    this.#stats.tokens += total;
    this.#stats.mostInOne = Math.max(this.#stats.mostInOne, group.length);
    group.forEach((item, sequence) => {
      try {
        item.resolve(native.getEmbedding(item.tokens.length, 0, sequence));
      } catch (error) {
        item.reject(error);
      }
    });
    this.#free(group.length);
  }

  /** Frees the cells of sequences 0..count-1 for the next decode. */
  #free(count: number): void {
    for (let sequence = 0; sequence < count; sequence++) {
      try {
        this.#native.disposeSequence(sequence);
      } catch {
        // Cells left used make the next decode fail: its inputs are refused with that error.
      }
    }
  }

  /** Refuses what waits, lets a running decode end, and disposes the context. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const item of this.#waiting.splice(0)) item.reject(new Error("engine closing"));
    await this.#running?.catch(() => {});
    await this.#context.dispose();
  }
}
