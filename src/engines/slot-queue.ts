/**
 * A fixed number of slots and a bounded queue of waiters (llama.cpp server's queue, in small),
 * served in the fair queue's order (`fair-queue.ts`: bands, then the least served account, then
 * arrival). A free slot is taken at once by whoever asks; a released slot goes to the waiter the
 * queue picks; a waiter that is aborted leaves the queue.
 */
import { FairQueue, NOTHING_SERVED, settledWaiting, UNTICKETED, type Grant, type QueuingOptions, type QueueSnapshot, type QueueTicket, type Served, type Waiting } from "./fair-queue.ts";

export type SlotLease<Slot> = {
  readonly slot: Slot;
  /** Gives the slot back; safe to call more than once. */
  release(): void;
};

/** Whose request asks for a slot, and what it has been served so far (for the fair queue). */
export type SlotClaim = {
  ticket: QueueTicket;
  served: Served;
};

export type SlotQueueOptions = QueuingOptions;

type Meta<Slot> = { rank: ((slot: Slot) => number) | undefined };


export class SlotQueue<Slot> {
  readonly #free: Slot[];
  readonly #queue: FairQueue<Meta<Slot>>;
  readonly #capacity: number;

  /**
   * @param slots the slots to hand out (e.g. context sequences)
   * @param maxWaiting how many requests may wait for a slot; one more is refused
   */
  constructor(slots: Slot[], maxWaiting: number, options: SlotQueueOptions = {}) {
    this.#free = [...slots];
    this.#capacity = slots.length;
    this.#queue = new FairQueue({
      ...options,
      maxWaiting,
      describeRunning: () => `${this.#capacity} requests are running`,
    });
  }

  /** Slots in use. */
  get busy(): number {
    return this.#capacity - this.#free.length;
  }

  get waiting(): number {
    return this.#queue.waiting;
  }

  get capacity(): number {
    return this.#capacity;
  }

  /** Waiting per band, the oldest waits, the accounts served most lately. */
  snapshot(): QueueSnapshot {
    return this.#queue.snapshot();
  }

  /**
   * Takes a free slot (the one `rank` scores highest), or joins the queue. Throws synchronously
   * when no slot is free and the queue refuses: `EngineOverloadedError` (full), or
   * `QueueShareExceededError` (the claim's account has its most waiting). The promise's
   * `position()` says where a waiter stands (0 once it has its slot).
   */
  acquire(signal: AbortSignal, rank?: (slot: Slot) => number, claim?: SlotClaim): Waiting<SlotLease<Slot>> {
    const ticket = claim?.ticket ?? UNTICKETED;
    const served = claim?.served ?? NOTHING_SERVED;
    if (signal.aborted) return settledWaiting(Promise.reject(signal.reason));
    const slot = this.#takeFree(rank);
    if (slot !== undefined) return settledWaiting(Promise.resolve(this.#lease(slot, this.#queue.begin(ticket, served))));
    return this.#queue.join<SlotLease<Slot>>(ticket, signal, { rank }, served);
  }

  /**
   * Takes a free slot at once, or none: never waits, never queues. Only hands out a slot nobody is
   * waiting for (a free slot means the queue is empty). For work that can also run in slots it
   * already holds (e.g. the extra choices of a request with `n` > 1: its first slot's claim counts what it is served).
   */
  tryAcquire(rank?: (slot: Slot) => number, ticket: QueueTicket = UNTICKETED): SlotLease<Slot> | undefined {
    if (this.#queue.waiting > 0) return undefined;
    const slot = this.#takeFree(rank);
    return slot === undefined ? undefined : this.#lease(slot, this.#queue.begin(ticket, NOTHING_SERVED));
  }

  /** The free slot that ranks highest (e.g. shares the longest cached prefix), else the first. */
  #takeFree(rank?: (slot: Slot) => number): Slot | undefined {
    if (this.#free.length === 0) return undefined;
    let best = 0;
    if (rank !== undefined) {
      let bestScore = -Infinity;
      this.#free.forEach((slot, index) => {
        const score = rank(slot);
        if (score > bestScore) {
          bestScore = score;
          best = index;
        }
      });
    }
    return this.#free.splice(best, 1)[0];
  }

  #lease(slot: Slot, grant: Grant): SlotLease<Slot> {
    let released = false;
    return {
      slot,
      release: () => {
        if (released) return;
        released = true;
        grant.end();
        this.#free.push(slot);
        this.#queue.serve(
          (meta) => this.#takeFree(meta.rank),
          (free, next) => this.#lease(free, next),
        );
      },
    };
  }
}
