/**
 * Makes concurrent sequences share each `llama_decode`, as llama-server's slots do.
 *
 * node-llama-cpp batches whatever decodes are queued when its dispatch loop looks, and it looks
 * again as soon as a batch ends. Each sequence samples its token on a worker thread of its own, so
 * the results come back one by one; the last sequence to get its token is still on its way back
 * to the queue (a chain of promises through its generator) when the loop looks. That sequence
 * misses the batch, and the next one, and so on: with 4 streams, nearly every batch held 3 tokens
 * and the fourth went in a batch of its own. Four streams then made no more tokens a second than one.
 *
 * The barrier plugs into node-llama-cpp's public batching option `itemPrioritizationStrategy`,
 * which the loop asks before each batch. It knows how many sequences are generating and not held
 * back by their reader (`DecodeStepper`s started and not paused); while fewer decodes than that
 * are queued it answers "nothing yet" and the loop asks again after a microtask, a bounded number
 * of times (`maxDeferrals`). The sequences still on their way arrive within a few microtasks
 * (nothing on their path waits for I/O), so the batch leaves whole. A sequence that is somewhere
 * the barrier does not know of costs at most those deferrals, never a stall.
 *
 * Within a batch, decodes of generated tokens go first and prompts share what is left of the
 * batch (`batchSize`), so a long prompt joining never delays the streams already running by more
 * than one batch.
 *
 * And the batch goes to llama.cpp in the order of its sequences. node-llama-cpp's context keeps a
 * separate KV cache stream per sequence (it never sets `kv_unified`), and for such a cache
 * llama.cpp cuts a batch into micro-batches of sequences whose ids go up one by one, in batch
 * order: the tokens of sequences 3, 0, 1, 2 run as two passes over the weights ({3}, then
 * {0, 1, 2}), sequences 0, 1, 2, 3 as one. node-llama-cpp queued them in the order they arrived,
 * which changes every step; on the benchmark model a batch of 8 took 64–74 ms instead of 31. Its
 * `BatchItem` names no sequence, so the sequence's index rides in `evaluationPriority`, which
 * only a prioritization strategy reads and this one replaces (`sequenceKey`).
 */
import type { BatchItem, EvaluationPriority, PrioritizedBatchItem } from "node-llama-cpp";

/** The `evaluationPriority` that tells the barrier which sequence (by creation index) a decode is for. */
export function sequenceKey(index: number): EvaluationPriority {
  return (index + 1) as EvaluationPriority;
}

/** How many times in a row the barrier may answer "nothing yet" before a batch leaves as it is. */
export const MAX_DEFERRALS = 200;

export type DecodeBarrierStats = {
  /** Batches that left (decodes of at least one token). */
  batches: number;
  /** Token decodes in them, prompt tokens included. */
  tokens: number;
  /** Sequences in them (one per queued decode). */
  sequences: number;
  /** Times the loop was told to wait for a sequence still on its way. */
  deferrals: number;
  /** Batches that left with fewer sequences than expected, after `maxDeferrals`. */
  gaveUp: number;
};

export class DecodeBarrier {
  readonly #maxDeferrals: number;
  #expected = 0;
  #deferrals = 0;
  readonly #stats: DecodeBarrierStats = { batches: 0, tokens: 0, sequences: 0, deferrals: 0, gaveUp: 0 };

  constructor(options: { maxDeferrals?: number } = {}) {
    this.#maxDeferrals = options.maxDeferrals ?? MAX_DEFERRALS;
  }

  /** Sequences the next batch waits for. */
  get expected(): number {
    return this.#expected;
  }

  stats(): DecodeBarrierStats {
    return { ...this.#stats };
  }

  /**
   * node-llama-cpp's `batching.dispatchSchedule`: at once, not on the next turn of the event loop
   * (its default). Waiting for the sequences still on their way is `prioritize`'s job; a turn of
   * the event loop would also wait for whatever else is queued there (other requests' I/O, the
   * stream's own writes), on every token.
   */
  readonly schedule = (dispatch: () => void): void => {
    dispatch();
  };

  /** node-llama-cpp's `batching.itemPrioritizationStrategy`. */
  readonly prioritize = ({ items, size }: { readonly items: readonly BatchItem[]; readonly size: number }): PrioritizedBatchItem[] => {
    if (items.length < this.#expected) {
      if (this.#deferrals < this.#maxDeferrals) {
        this.#deferrals++;
        this.#stats.deferrals++;
        return [];
      }
      this.#stats.gaveUp++;
    }
    this.#deferrals = 0;
    const batch = decodesFirst(items, size).sort((a, b) => a.item.evaluationPriority - b.item.evaluationPriority);
    if (batch.length > 0) {
      this.#stats.batches++;
      this.#stats.sequences += batch.length;
      for (const entry of batch) this.#stats.tokens += entry.processAmount;
    }
    return batch;
  };

  /** A sequence's place in the barrier: count it while it generates and its reader keeps up. */
  stepper(): DecodeStepper {
    return new DecodeStepper((delta) => {
      this.#expected += delta;
    });
  }
}

/**
 * One generating sequence as the barrier sees it. `start` once its next decode is about to be
 * queued (after any cache work that takes the context's lock), `pause` while its reader is not
 * taking what it made, `resume`, and `stop` when it ends; each is safe to call in any state.
 */
export class DecodeStepper {
  readonly #adjust: (delta: number) => void;
  #state: "idle" | "counted" | "paused" | "stopped" = "idle";

  constructor(adjust: (delta: number) => void) {
    this.#adjust = adjust;
  }

  start(): void {
    if (this.#state !== "idle") return;
    this.#state = "counted";
    this.#adjust(1);
  }

  pause(): void {
    if (this.#state !== "counted") return;
    this.#state = "paused";
    this.#adjust(-1);
  }

  resume(): void {
    if (this.#state !== "paused") return;
    this.#state = "counted";
    this.#adjust(1);
  }

  stop(): void {
    if (this.#state === "counted") this.#adjust(-1);
    this.#state = "stopped";
  }
}

/**
 * The batch: every queued decode of a generated token (one token each) first, then the prompts,
 * sharing what is left of `size` evenly, the rest of an uneven share to the earliest queued.
 */
export function decodesFirst(items: readonly BatchItem[], size: number): PrioritizedBatchItem[] {
  const batch: PrioritizedBatchItem[] = [];
  const prompts: PrioritizedBatchItem[] = [];
  let left = size;
  for (const item of items) {
    if (item.tokens.length === 1 && left > 0) {
      batch.push({ item, processAmount: 1 });
      left--;
    } else if (item.tokens.length > 1) {
      prompts.push({ item, processAmount: 0 });
    }
  }
  // Share the rest among the prompts, in rounds, so a short prompt's unused share goes to the others.
  let open = prompts;
  while (left > 0 && open.length > 0) {
    const share = Math.max(1, Math.floor(left / open.length));
    for (const entry of open) {
      const take = Math.min(share, entry.item.tokens.length - entry.processAmount, left);
      entry.processAmount += take;
      left -= take;
      if (left === 0) break;
    }
    open = open.filter((entry) => entry.processAmount < entry.item.tokens.length);
  }
  for (const entry of prompts) if (entry.processAmount > 0) batch.push(entry);
  return batch;
}
