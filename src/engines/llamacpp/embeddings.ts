/**
 * Embeddings from the embedded llama.cpp engine: each input tokenized as llama-server tokenizes
 * `/v1/embeddings` input (special tokens parsed, the model's own BOS/EOS or CLS/SEP added), checked
 * against the context, run through one node-llama-cpp embedding context with the model's own
 * pooling, and L2-normalised (llama-server's default `embd_normalize` 2).
 *
 * One input per `llama_decode`, one after another: node-llama-cpp 3.22's native context reads the
 * pooled vector of sequence 0 only (`AddonContext::GetEmbedding` calls
 * `llama_get_embeddings_seq(ctx, 0)`), so a batch holding several sequences would compute every
 * sequence's vector and hand back one. llama-server decodes its slots' inputs together; this cannot
 * through node-llama-cpp's API. The context's batch is as large as the context, so an input always
 * decodes whole (mean pooling over a sequence split across two decodes would average its last part only).
 *
 * Requests queue in a bounded FIFO (`SlotQueue`, one slot: the context); a request holds it for all
 * its inputs, in order, as llama-server's one-slot queue runs a request's tasks before the next
 * request's. An aborted request stops before its next input; one still waiting leaves the queue.
 */
import { LlamaVocabularyType, type LlamaEmbeddingContext, type LlamaModel, type Token } from "node-llama-cpp";
import type { EmbeddingInput, EmbeddingRequest, EmbeddingsResult, PreparedEmbeddings } from "../engine.ts";
import { tokenFloor, type PromptBound, type TokenSpans } from "../prompt-bound.ts";
import { SlotQueue } from "../slot-queue.ts";
import { ContextLengthExceededError, InvalidRequestError } from "../../protocol/errors.ts";

export type LlamaEmbedderOptions = {
  /** Tokens one input may hold, special tokens included. */
  contextSize: number;
  threads: number;
  /** Requests that may wait while one runs; one more is refused (`EngineOverloadedError`). */
  queueSize: number;
  /** Tokens in the vocabulary (ids 0..vocabularySize-1). */
  vocabularySize: number;
  /** How many bytes of text the vocabulary's tokens span (for `bound`). */
  tokenSpans: Required<TokenSpans>;
};

/** Since start: `llama_decode` calls, the inputs in them, their tokens (as `EngineMember.batching`). */
export type EmbeddingStats = { batches: number; sequences: number; tokens: number };

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
  readonly #context: LlamaEmbeddingContext;
  readonly #options: LlamaEmbedderOptions;
  readonly #queue: SlotQueue<LlamaEmbeddingContext>;
  readonly #special: { first: Token | undefined; last: Token | undefined };
  readonly #stats: EmbeddingStats = { batches: 0, sequences: 0, tokens: 0 };
  readonly #closing = new AbortController();

  private constructor(model: LlamaModel, context: LlamaEmbeddingContext, options: LlamaEmbedderOptions) {
    this.#model = model;
    this.#context = context;
    this.#options = options;
    this.#queue = new SlotQueue([context], options.queueSize);
    this.#special = specialTokensOf(model);
  }

  /**
   * Makes the embedding context: one more cell than `contextSize` (node-llama-cpp refuses an input
   * that fills its context), and a batch as large, so every input decodes in one piece.
   */
  static async open(model: LlamaModel, options: LlamaEmbedderOptions): Promise<LlamaEmbedder> {
    const context = await model.createEmbeddingContext({ contextSize: options.contextSize + 1, batchSize: options.contextSize + 1, threads: options.threads });
    return new LlamaEmbedder(model, context, options);
  }

  get model(): LlamaModel {
    return this.#model;
  }

  /** Tokens one input may hold. */
  get contextSize(): number {
    return this.#options.contextSize;
  }

  /** Requests running (0 or 1), waiting, and how many run at once. */
  load(): { busy: number; waiting: number; capacity: number } {
    return { busy: this.#queue.busy, waiting: this.#queue.waiting, capacity: this.#queue.capacity };
  }

  stats(): EmbeddingStats {
    return { ...this.#stats };
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
    return { promptTokens, promptCount: "exact", run: (signal) => this.#run(sequences, promptTokens, signal) };
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

  /** Throws `EngineOverloadedError` at once when the queue is full; then embeds the inputs in order. */
  #run(sequences: Token[][], promptTokens: number, signal: AbortSignal): Promise<EmbeddingsResult> {
    const stop = AbortSignal.any([signal, this.#closing.signal]);
    const leased = this.#queue.acquire(stop);
    return leased.then(async (lease) => {
      try {
        const vectors: Float32Array[] = [];
        for (const tokens of sequences) {
          if (stop.aborted) throw stop.reason;
          const embedding = await this.#context.getEmbeddingFor(tokens);
          this.#stats.batches++;
          this.#stats.sequences++;
          this.#stats.tokens += tokens.length;
          vectors.push(normalize(embedding.vector));
        }
        return { vectors, usage: { promptTokens, source: "counted" } };
      } finally {
        lease.release();
      }
    });
  }

  async close(): Promise<void> {
    this.#closing.abort(new Error("engine closing"));
    await this.#context.dispose();
  }
}

function tooLong(name: string, limit: number, tokens: string): ContextLengthExceededError {
  return new ContextLengthExceededError(
    `This model's maximum context length is ${limit} tokens per input. However, '${name}' has ${tokens} tokens. Please reduce the length of '${name}'.`,
    "input",
  );
}
