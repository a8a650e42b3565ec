/**
 * Runs the choices of one request (OpenAI's `n`) over the slots it holds: each slot takes the
 * next choice not yet started until none is left, so choices run in parallel where the request
 * got several slots and one after another otherwise. Parts come out in the order they are made
 * (interleaved across choices). Stopping early (the consumer returns, a choice fails) aborts the
 * others and waits for them, so usage is final and every slot is back when this ends.
 * Generation follows the consumer: past `READY_HIGH_WATER` parts made and not yet taken, the
 * choices wait, so a consumer that stops pulling (a stream whose client stopped reading) pauses
 * them instead of filling an unbounded buffer.
 */
import type { StreamPart } from "./engine.ts";
import type { SlotLease } from "./slot-queue.ts";

/** Parts made but not yet taken past which the choices wait for the consumer. */
export const READY_HIGH_WATER = 32;

/**
 * A choice's parts; `flow`, when given, is told when the choice waits for the consumer and when it
 * goes on (an engine that batches choices together stops waiting for a paused one).
 */
export type ChoiceParts = AsyncIterable<StreamPart> & { readonly flow?: { pause(): void; resume(): void } };

export type GenerateChoice<Slot> = (slot: Slot, choice: number, signal: AbortSignal) => ChoiceParts;

export async function* runChoices<Slot>(
  leases: readonly SlotLease<Slot>[],
  choices: number,
  signal: AbortSignal,
  generate: GenerateChoice<Slot>,
): AsyncGenerator<StreamPart> {
  const local = new AbortController();
  const stop = AbortSignal.any([signal, local.signal]);
  const ready: StreamPart[] = [];
  let failure: { error: unknown } | undefined;
  let nextChoice = 0;
  let running = leases.length;
  let wake: (() => void) | undefined;
  const notify = () => {
    wake?.();
    wake = undefined;
  };
  /** Choices waiting for the consumer to take parts (or for the stop). */
  let waiting: Array<() => void> = [];
  const makeRoom = () => {
    if (waiting.length === 0) return;
    const resumed = waiting;
    waiting = [];
    for (const resume of resumed) resume();
  };
  stop.addEventListener("abort", makeRoom, { once: true });
  const room = () =>
    new Promise<void>((resolve) => {
      waiting.push(resolve);
    });

  const work = async (lease: SlotLease<Slot>) => {
    try {
      while (nextChoice < choices) {
        const choice = nextChoice++;
        const parts = generate(lease.slot, choice, stop);
        for await (const part of parts) {
          ready.push(part);
          notify();
          if (ready.length >= READY_HIGH_WATER && !stop.aborted) {
            parts.flow?.pause();
            while (ready.length >= READY_HIGH_WATER && !stop.aborted) await room();
            parts.flow?.resume();
          }
        }
      }
    } catch (error) {
      failure ??= { error };
      local.abort(error);
    } finally {
      lease.release();
      running--;
      notify();
    }
  };
  const workers = leases.map((lease) => work(lease));

  try {
    for (;;) {
      if (failure !== undefined) throw failure.error;
      const part = ready.shift();
      if (part !== undefined) {
        if (ready.length < READY_HIGH_WATER) makeRoom();
        yield part;
        continue;
      }
      if (running === 0) return;
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
    }
  } finally {
    local.abort(new Error("generation stopped"));
    makeRoom();
    await Promise.all(workers);
  }
}
