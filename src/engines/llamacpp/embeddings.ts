/**
 * Embeddings from the embedded llama.cpp engine: each input tokenized as llama-server tokenizes
 * `/v1/embeddings` input (special tokens parsed, the model's own BOS/EOS or CLS/SEP added), checked
 * against the context, run through a node-llama-cpp embedding context with the model's own
 * pooling, and L2-normalised (llama-server's default `embd_normalize` 2).
 *
 * Two ways to decode (`decoding`), chosen by the model and the binding loaded:
 *
 * - "batched", for a model that pools (mean, CLS, last token), with node-llama-cpp's binding as
 *   Turnpike patches it (`scripts/build-node-llama-cpp.sh`, `embedding-batches.ts`): as
 *   llama-server does, the inputs of every request running decode together, a sequence each, in
 *   one `llama_decode` with all the threads; a slot per input in flight (`parallel` slots, at
 *   most `MAX_SEQUENCES`).
 * - "lanes", with the stock binding: one input per `llama_decode`, because node-llama-cpp 3.22's
 *   native context reads the pooled vector of sequence 0 only (`AddonContext::GetEmbedding` calls
 *   `llama_get_embeddings_seq(ctx, 0)`), so a batch holding several sequences would compute every
 *   sequence's vector and hand back one. Inputs run side by side instead: "lanes", several embedding contexts of the one model
 * (min(threads, parallel, 8) of them), the thread budget split between them (the remainder to the
 * first lanes), one input per lane at a time. With `--threads 2` two inputs decode at once on a
 * thread each, where llama-server decodes one batch with two threads. With more than one lane there
 * is also a "wide" context with all the threads, for an input that would otherwise run alone (the
 * last one left of the only request running, nobody waiting): one query is not slowed to a lane's
 * share of the threads. llama.cpp threads are node-llama-cpp's to share (`getLlama`'s `maxThreads`
 * is `--threads`, `runtime.ts`): a lane that starts while the wide context decodes waits for its
 * threads, so the process never runs more than `--threads` compute threads. Each context's batch is as
 * large as the context, so an input always decodes whole (mean pooling over a sequence split across
 * two decodes would average its last part only).
 *
 * Requests queue in one bounded fair queue (`SlotQueue`, a slot per lane); a request holds its lane for
 * its inputs and spreads them over lanes that are free with nobody waiting, the vectors in the
 * inputs' order whichever lane computed them. An aborted request stops before its next input; one
 * still waiting leaves the queue.
 */
import { LlamaVocabularyType, type LlamaEmbeddingContext, type LlamaModel, type Token } from "node-llama-cpp";
import { EmbeddingBatches, sequenceEmbeddings } from "./embedding-batches.ts";
import type { EmbeddingInput, EmbeddingRequest, EmbeddingsResult, PreparedEmbeddings } from "../engine.ts";
import { tokenFloor, type PromptBound, type TokenSpans } from "../prompt-bound.ts";
import { SlotQueue, type SlotQueueOptions } from "../slot-queue.ts";
import { UNTICKETED, type QueueSnapshot, type QueueTicket } from "../fair-queue.ts";
import { ContextLengthExceededError, InvalidRequestError } from "../../protocol/errors.ts";

export type LlamaEmbedderOptions = {
  /** Tokens one input may hold, special tokens included. */
  contextSize: number;
  /** Threads for all lanes together. */
  threads: number;
  /** Most inputs to embed at once (the engine's `parallel`); lanes are min(threads, this, `MAX_LANES`). */
  parallel: number;
  /** Requests that may wait while one runs; one more is refused (`EngineOverloadedError`). */
  queueSize: number;
  /** The queue's per-account cap and wait reports. */
  queuing?: SlotQueueOptions;
  /** Tokens in the vocabulary (ids 0..vocabularySize-1). */
  vocabularySize: number;
  /** Whether the model pools each input into one vector (mean, CLS or last token): only then can inputs share a decode. */
  pooled?: boolean;
  /** How inputs decode (see the file's comment); default: "batched" for a pooled model where the binding allows it, else "lanes". */
  decoding?: EmbeddingDecoding;
  /** How many bytes of text the vocabulary's tokens span (for `bound`). */
  tokenSpans: Required<TokenSpans>;
};

/** Since start: `llama_decode` calls, the inputs in them, their tokens (as `EngineMember.batching`). */
export type EmbeddingStats = { batches: number; sequences: number; tokens: number };

/**
 * The lanes: threads each, inputs each has embedded since start, inputs decoding now and the most that
 * decoded at once; the wide context's threads (undefined with one lane, which is then the wide one) and inputs.
 */
export type LaneStats = { threads: number[]; inputs: number[]; decoding: number; mostAtOnce: number; wide: { threads: number; inputs: number } | undefined };

/** Lanes at most, whatever the threads: each holds a context's KV and compute buffers. */
export const MAX_LANES = 8;

/** Inputs one batched decode holds at most (the batched context's sequences). */
export const MAX_SEQUENCES = 64;

/** Tokens one batched decode holds at least (llama-server's default micro-batch); more when one input may be longer. */
export const BATCH_TOKENS = 512;

export type EmbeddingDecoding = "batched" | "lanes";

/** How many lanes for a thread budget, and each one's threads (the remainder to the first lanes). */
export function laneThreads(threads: number, parallel: number): number[] {
  const lanes = Math.max(1, Math.min(threads, parallel, MAX_LANES));
  return Array.from({ length: lanes }, (_, index) => Math.floor(threads / lanes) + (index < threads % lanes ? 1 : 0));
}

/** A slot of the queue: a lane with its own context, or (batched) a place in the shared decodes. */
type Lane = { index: number; context: LlamaEmbeddingContext | undefined };

/**
 * The tokens an input gets at its start and end: the same rule node-llama-cpp's embedding context
 * applies before it evaluates (its `_prepareInput`), which is llama.cpp's `add_special` for the
 * vocabularies it knows (WPM: CLS … SEP; SPM/BPE: BOS and EOS as the GGUF asks; UGM: EOS; RWKV: none).
 */
function specialTokensOf(model: LlamaModel): { first: Token | undefined; last: Token | undefined } {
  const tokens = model.tokens;
  switch (model.vocabularyType) {
    case LlamaVocabularyType.rwkv:
      return { first: undefined, last: undefined };
    case LlamaVocabularyType.wpm:
      return { first: tokens.bos ?? undefined, last: tokens.sep ?? undefined };
    case LlamaVocabularyType.ugm:
      return { first: undefined, last: tokens.eos ?? undefined };
    default:
      return { first: tokens.shouldPrependBosToken ? (tokens.bos ?? undefined) : undefined, last: tokens.shouldAppendEosToken ? (tokens.eos ?? undefined) : undefined };
  }
}

/** L2-normalised, as llama.cpp's `common_embd_normalize(…, 2)`: a zero vector stays zero. */
export function normalize(vector: ArrayLike<number>): Float32Array {
  let sum = 0;
  for (let index = 0; index < vector.length; index++) sum += vector[index]! * vector[index]!;
  const scale = sum > 0 ? 1 / Math.sqrt(sum) : 0;
  const result = new Float32Array(vector.length);
  for (let index = 0; index < vector.length; index++) result[index] = vector[index]! * scale;
  return result;
}

export class LlamaEmbedder {
  readonly #model: LlamaModel;
  readonly #lanes: Lane[];
  /** The shared decodes (batched); undefined with lanes. */
  readonly #batches: EmbeddingBatches | undefined;
  /** All the threads, for an input alone (only with more than one lane). */
  readonly #wide: LlamaEmbeddingContext | undefined;
  readonly #options: LlamaEmbedderOptions;
  readonly #queue: SlotQueue<Lane>;
  readonly #special: { first: Token | undefined; last: Token | undefined };
  readonly #stats: EmbeddingStats = { batches: 0, sequences: 0, tokens: 0 };
  readonly #laneStats: Omit<LaneStats, "decoding">;
  #decoding = 0;
  readonly #closing = new AbortController();

  private constructor(
    model: LlamaModel,
    contexts: (LlamaEmbeddingContext | undefined)[],
    wide: LlamaEmbeddingContext | undefined,
    threads: number[],
    options: LlamaEmbedderOptions,
    batches?: EmbeddingBatches,
  ) {
    this.#model = model;
    this.#lanes = contexts.map((context, index) => ({ index, context }));
    this.#batches = batches;
    this.#wide = wide;
    this.#options = options;
    this.#queue = new SlotQueue(this.#lanes, options.queueSize, options.queuing);
    this.#special = specialTokensOf(model);
    this.#laneStats = { threads, inputs: threads.map(() => 0), mostAtOnce: 0, wide: wide === undefined ? undefined : { threads: options.threads, inputs: 0 } };
  }

  /**
   * Makes the lanes' embedding contexts: one more cell than `contextSize` (node-llama-cpp refuses
   * an input that fills its context), and a batch as large, so every input decodes in one piece.
   */
  static async open(model: LlamaModel, options: LlamaEmbedderOptions): Promise<LlamaEmbedder> {
    const decoding = options.decoding ?? (options.pooled === true && sequenceEmbeddings(model) ? "batched" : "lanes");
    if (decoding === "batched") {
      const slots = Math.max(1, Math.min(options.parallel, MAX_SEQUENCES));
      const batchTokens = Math.max(options.contextSize + 1, BATCH_TOKENS);
      const batches = await EmbeddingBatches.open(model, { batchTokens, sequences: slots, threads: options.threads });
      return new LlamaEmbedder(model, Array.from({ length: slots }, () => undefined), undefined, [options.threads], options, batches);
    }
    const threads = laneThreads(options.threads, options.parallel);
    const contexts: LlamaEmbeddingContext[] = [];
    const create = async (each: number) => {
      const context = await model.createEmbeddingContext({ contextSize: options.contextSize + 1, batchSize: options.contextSize + 1, threads: each });
      contexts.push(context);
      return context;
    };
    try {
      for (const each of threads) await create(each);
      const wide = threads.length > 1 ? await create(options.threads) : undefined;
      return new LlamaEmbedder(model, contexts.slice(0, threads.length), wide, threads, options);
    } catch (error) {
      await Promise.all(contexts.map((context) => context.dispose()));
      throw error;
    }
  }

  get model(): LlamaModel {
    return this.#model;
  }

  /** Tokens one input may hold. */
  get contextSize(): number {
    return this.#options.contextSize;
  }

  /** Lanes in use, requests waiting, and how many lanes there are. */
  load(): { busy: number; waiting: number; capacity: number } {
    return { busy: this.#queue.busy, waiting: this.#queue.waiting, capacity: this.#queue.capacity };
  }

  /** The queue's tiers, oldest waits and top shares. */
  queue(): QueueSnapshot {
    return this.#queue.snapshot();
  }

  stats(): EmbeddingStats {
    if (this.#batches === undefined) return { ...this.#stats };
    const { batches, sequences, tokens } = this.#batches.stats();
    return { batches, sequences, tokens };
  }

  /** How inputs decode here. */
  get decoding(): EmbeddingDecoding {
    return this.#batches === undefined ? "lanes" : "batched";
  }

  /** The most inputs one batched decode held (0 with lanes). */
  get mostInOneDecode(): number {
    return this.#batches?.stats().mostInOne ?? 0;
  }

  laneStats(): LaneStats {
    const { threads, inputs, mostAtOnce, wide } = this.#laneStats;
    return { threads: [...threads], inputs: [...inputs], decoding: this.#decoding, mostAtOnce, wide: wide === undefined ? undefined : { ...wide } };
  }

  /**
   * Bounds on the request's tokens without tokenizing: a text of n bytes takes at most n + 1 tokens
   * (SentencePiece's leading space) and at least what its bytes' widest tokens allow
   * (`tokenFloor`); token inputs are counted, with the special tokens they may be given. With
   * `truncate` no input counts past the context.
   */
  bound(request: EmbeddingRequest): PromptBound {
    const limit = this.#options.contextSize;
    const specials = (this.#special.first === undefined ? 0 : 1) + (this.#special.last === undefined ? 0 : 1);
    let atLeast = 0;
    let atMost = 0;
    let bytes = 0;
    for (const input of request.inputs) {
      let low: number;
      let high: number;
      if ("tokens" in input) {
        low = input.tokens.length;
        high = input.tokens.length + specials;
      } else {
        const length = Buffer.byteLength(input.text, "utf8");
        bytes += length;
        low = tokenFloor([input.text], this.#options.tokenSpans, limit + 1);
        high = length + 1 + specials;
      }
      atLeast += request.truncate ? Math.min(low, limit) : low;
      atMost += request.truncate ? Math.min(high, limit) : high;
    }
    return { atLeast, atMost, bytes, verbatimBytes: bytes };
  }

  /** Tokenizes and checks every input (see `Engine.prepareEmbeddings`); nothing is queued yet. */
  prepare(request: EmbeddingRequest): PreparedEmbeddings {
    if (request.inputs.length === 0) throw new InvalidRequestError("Invalid 'input': it must hold at least one input.", "input");
    const sequences = request.inputs.map((input, index) => this.#tokenize(input, index, request.truncate));
    const promptTokens = sequences.reduce((sum, tokens) => sum + tokens.length, 0);
    const progress = { tokens: 0 };
    return { promptTokens, promptCount: "exact", run: (signal, ticket) => this.#run(sequences, promptTokens, signal, progress, ticket), embeddedTokens: () => progress.tokens };
  }

  /**
   * One input's tokens as they will be embedded: text tokenized with special tokens parsed, the
   * model's start and end tokens added where missing; refused when empty, holding an id outside the
   * vocabulary, or longer than the context (unless `truncate`, which keeps its first tokens and its end token).
   */
  #tokenize(input: EmbeddingInput, index: number, truncate: boolean): Token[] {
    const limit = this.#options.contextSize;
    const name = `input[${index}]`;
    let tokens: Token[];
    if ("tokens" in input) {
      if (input.tokens.length === 0) throw new InvalidRequestError(`Invalid '${name}': an input must not be empty.`, "input");
      const size = this.#options.vocabularySize;
      for (const token of input.tokens) {
        if (!Number.isInteger(token) || token < 0 || token >= size) {
          throw new InvalidRequestError(`Invalid '${name}': token id ${token} is not in this model's vocabulary (ids 0 to ${size - 1}).`, "input");
        }
      }
      tokens = this.#withSpecialTokens(input.tokens as Token[]);
    } else {
      if (input.text === "") throw new InvalidRequestError(`Invalid '${name}': an input must not be empty.`, "input");
      // Refused before tokenizing when it cannot fit whatever its tokens; with `truncate` only a
      // prefix long enough for the context is tokenized (each token spans at most `longest` bytes,
      // each UTF-16 unit at least one byte), so megabytes of text cost no more than the context.
      if (!truncate) {
        const atLeast = tokenFloor([input.text], this.#options.tokenSpans, limit + 1);
        if (atLeast > limit) throw tooLong(name, limit, `at least ${atLeast}`);
      }
      let text = input.text;
      const enough = (limit + 16) * this.#options.tokenSpans.longest;
      if (truncate && text.length > enough) {
        const cut = /[\uD800-\uDBFF]/.test(text[enough - 1]!) ? enough - 1 : enough;
        text = text.slice(0, cut);
      }
      tokens = this.#withSpecialTokens(this.#model.tokenize(text, true));
    }
    if (tokens.length <= limit) return tokens;
    if (!truncate) throw tooLong(name, limit, String(tokens.length));
    const last = this.#special.last;
    return last !== undefined && tokens.at(-1) === last ? [...tokens.slice(0, limit - 1), last] : tokens.slice(0, limit);
  }

  #withSpecialTokens(tokens: readonly Token[]): Token[] {
    const { first, last } = this.#special;
    const result = [...tokens];
    if (first !== undefined && result[0] !== first) result.unshift(first);
    if (last !== undefined && result.at(-1) !== last) result.push(last);
    return result;
  }

  /**
   * Throws `EngineOverloadedError` at once when the queue is full; then embeds the inputs on the
   * lane it got and on any other lane free with nobody waiting (looked for again after each input),
   * counting each input's tokens into `progress` once its vector is made.
   */
  #run(sequences: Token[][], promptTokens: number, signal: AbortSignal, progress: { tokens: number }, ticket: QueueTicket = UNTICKETED): Promise<EmbeddingsResult> {
    const stop = AbortSignal.any([signal, this.#closing.signal]);
    // The fair queue charges the account each input's tokens as its vector is made.
    const leased = this.#queue.acquire(stop, undefined, { ticket, served: () => progress.tokens });
    return leased.then(async (first) => {
      const leases = [first];
      const vectors: Float32Array[] = new Array(sequences.length);
      // Identical inputs are embedded once and share the vector: in a batched decode two copies at
      // other places of the batch would differ in their last bits, and the work is done once.
      const copies = new Map<string, number[]>();
      for (const [index, tokens] of sequences.entries()) {
        const key = tokens.join(",");
        const found = copies.get(key);
        if (found === undefined) copies.set(key, [index]);
        else found.push(index);
      }
      const distinct = [...copies.values()];
      // Each worker's outcome, caught where it starts (a failure waits for the others, never unhandled).
      const workers: Promise<{ failed: false } | { failed: true; error: unknown }>[] = [];
      const start = (lane: Lane) => workers.push(work(lane).then(() => ({ failed: false as const }), (error: unknown) => ({ failed: true as const, error })));
      let next = 0;
      let failure: { error: unknown } | undefined;
      const spread = () => {
        // A worker starts at once (takes its input synchronously), so this stops when none is left.
        while (next < distinct.length) {
          const lease = this.#queue.tryAcquire(undefined, ticket);
          if (lease === undefined) return;
          leases.push(lease);
          start(lease.slot);
        }
      };
      const work = async (lane: Lane): Promise<void> => {
        while (next < distinct.length) {
          if (stop.aborted) throw stop.reason;
          const indexes = distinct[next++]!;
          const tokens = sequences[indexes[0]!]!;
          // Alone: the last input of the only request running, nothing decoding, nobody waiting.
          const alone = next === distinct.length && this.#decoding === 0 && this.#queue.busy === 1 && this.#queue.waiting === 0;
          const vector = await this.#embed(lane, tokens, alone);
          indexes.forEach((index, copy) => (vectors[index] = copy === 0 ? vector : vector.slice()));
          // Made: billed (every copy) even if the request is cut before its other inputs.
          progress.tokens += tokens.length * indexes.length;
          spread();
        }
      };
      start(first.slot);
      spread();
      try {
        // Every worker finished (none still decoding on a lane given back; one may start another
        // while this waits), then the first failure.
        for (let done = 0; done < workers.length; done++) {
          const outcome = await workers[done]!;
          if (outcome.failed) failure ??= outcome;
        }
        if (failure !== undefined) throw failure.error;
        return { vectors, usage: { promptTokens, source: "counted" as const } };
      } finally {
        for (const lease of leases) lease.release();
      }
    });
  }

  /** One input on its lane, or on the wide context when it is `alone` (and there is one); batched, in the next shared decode. */
  async #embed(lane: Lane, tokens: Token[], alone: boolean): Promise<Float32Array> {
    const wide = alone ? this.#wide : undefined;
    this.#decoding++;
    this.#laneStats.mostAtOnce = Math.max(this.#laneStats.mostAtOnce, this.#decoding);
    try {
      if (this.#batches !== undefined) {
        const vector = normalize(await this.#batches.embed(tokens));
        this.#laneStats.inputs[0]!++;
        return vector;
      }
      const embedding = await (wide ?? lane.context!).getEmbeddingFor(tokens);
      this.#stats.batches++;
      this.#stats.sequences++;
      this.#stats.tokens += tokens.length;
      if (wide === undefined) this.#laneStats.inputs[lane.index]!++;
      else this.#laneStats.wide!.inputs++;
      return normalize(embedding.vector);
    } finally {
      this.#decoding--;
    }
  }

  async close(): Promise<void> {
    this.#closing.abort(new Error("engine closing"));
    await Promise.all([...this.#lanes.map((lane) => lane.context?.dispose()), this.#wide?.dispose(), this.#batches?.close()]);
  }
}

function tooLong(name: string, limit: number, tokens: string): ContextLengthExceededError {
  return new ContextLengthExceededError(
    `This model's maximum context length is ${limit} tokens per input. However, '${name}' has ${tokens} tokens. Please reduce the length of '${name}'.`,
    "input",
  );
}
