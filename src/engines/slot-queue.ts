/**
 * A fixed number of slots and a bounded FIFO of waiters (llama.cpp server's queue, in small).
 * A waiter that is aborted leaves the queue; a released slot goes to the oldest waiter.
 */
import { EngineOverloadedError } from "../protocol/errors.ts";

export type SlotLease<Slot> = {
  readonly slot: Slot;
  /** Gives the slot back; safe to call more than once. */
  release(): void;
};

type Waiter<Slot> = {
  resolve: (lease: SlotLease<Slot>) => void;
  reject: (error: unknown) => void;
  signal: AbortSignal;
  onAbort: () => void;
};

export class SlotQueue<Slot> {
  readonly #free: Slot[];
  readonly #waiters: Waiter<Slot>[] = [];
  readonly #maxWaiting: number;
  readonly #capacity: number;

  /**
   * @param slots the slots to hand out (e.g. context sequences)
   * @param maxWaiting how many requests may wait for a slot; one more is refused
   */
  constructor(slots: Slot[], maxWaiting: number) {
    this.#free = [...slots];
    this.#capacity = slots.length;
    this.#maxWaiting = maxWaiting;
  }

  /** Slots in use. */
  get busy(): number {
    return this.#capacity - this.#free.length;
  }

  get waiting(): number {
    return this.#waiters.length;
  }

  get capacity(): number {
    return this.#capacity;
  }

  /**
   * Takes a free slot (the one `rank` scores highest), or joins the queue. Throws `EngineOverloadedError` synchronously when
   * no slot is free and the queue is full.
   */
  acquire(signal: AbortSignal, rank?: (slot: Slot) => number): Promise<SlotLease<Slot>> {
    if (signal.aborted) return Promise.reject(signal.reason);
    const slot = this.#takeFree(rank);
    if (slot !== undefined) return Promise.resolve(this.#lease(slot));
    if (this.#waiters.length >= this.#maxWaiting) {
      throw new EngineOverloadedError(
        `The model is busy: ${this.#capacity} requests are running and ${this.#waiters.length} are waiting. Retry shortly.`,
      );
    }
    return new Promise((resolve, reject) => {
      const waiter: Waiter<Slot> = {
        resolve,
        reject,
        signal,
        onAbort: () => {
          const index = this.#waiters.indexOf(waiter);
          if (index !== -1) this.#waiters.splice(index, 1);
          reject(signal.reason);
        },
      };
      signal.addEventListener("abort", waiter.onAbort, { once: true });
      this.#waiters.push(waiter);
    });
  }

  /**
   * Takes a free slot at once, or none: never waits, never queues. Only hands out a slot nobody is
   * waiting for (a free slot means the queue is empty). For work that can also run in slots it
   * already holds (e.g. the extra choices of a request with `n` > 1).
   */
  tryAcquire(rank?: (slot: Slot) => number): SlotLease<Slot> | undefined {
    if (this.#waiters.length > 0) return undefined;
    const slot = this.#takeFree(rank);
    return slot === undefined ? undefined : this.#lease(slot);
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

  #lease(slot: Slot): SlotLease<Slot> {
    let released = false;
    return {
      slot,
      release: () => {
        if (released) return;
        released = true;
        this.#handOver(slot);
      },
    };
  }

  #handOver(slot: Slot): void {
    const waiter = this.#waiters.shift();
    if (waiter === undefined) {
      this.#free.push(slot);
      return;
    }
    waiter.signal.removeEventListener("abort", waiter.onAbort);
    waiter.resolve(this.#lease(slot));
  }
}
