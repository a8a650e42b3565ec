/**
 * SlotQueue: free slots first (the best-ranked one), then a bounded FIFO of waiters that
 * leave when aborted. No timers: every wait is settled by a release or an abort.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { EngineOverloadedError } from "../protocol/errors.ts";
import { SlotQueue, type SlotLease } from "./slot-queue.ts";

const never = () => new AbortController().signal;

/** Resolves with whether `promise` has settled after pending microtasks and one macrotask ran. */
async function isSettled(promise: Promise<unknown>): Promise<boolean> {
  let settled = false;
  promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  await new Promise((resolve) => setImmediate(resolve));
  return settled;
}

describe("SlotQueue", () => {
  it("hands out free slots at once", async () => {
    const queue = new SlotQueue(["a", "b"], 4);
    const first = await queue.acquire(never());
    const second = await queue.acquire(never());
    assert.deepEqual([first.slot, second.slot].sort(), ["a", "b"]);
    assert.equal(queue.busy, 2);
    assert.equal(queue.waiting, 0);
    assert.equal(queue.capacity, 2);
  });

  it("takes the free slot that rank scores highest", async () => {
    const queue = new SlotQueue([{ id: 1, cached: 3 }, { id: 2, cached: 9 }, { id: 3, cached: 5 }], 0);
    const lease = await queue.acquire(never(), (slot) => slot.cached);
    assert.equal(lease.slot.id, 2);
    const next = await queue.acquire(never(), (slot) => slot.cached);
    assert.equal(next.slot.id, 3);
  });

  it("takes the first free slot when rank scores them all alike", async () => {
    const queue = new SlotQueue(["a", "b", "c"], 0);
    const lease = await queue.acquire(never(), () => 0);
    assert.equal(lease.slot, "a");
  });

  it("takes a slot even when rank scores every slot -Infinity", async () => {
    const queue = new SlotQueue(["a", "b"], 0);
    const lease = await queue.acquire(never(), () => -Infinity);
    assert.equal(lease.slot, "a");
  });

  it("makes a request wait when every slot is busy and hands it the released slot", async () => {
    const queue = new SlotQueue(["only"], 4);
    const holder = await queue.acquire(never());
    const waiting = queue.acquire(never());
    assert.equal(queue.waiting, 1);
    assert.equal(await isSettled(waiting), false);
    holder.release();
    const lease = await waiting;
    assert.equal(lease.slot, "only");
    assert.equal(queue.waiting, 0);
    assert.equal(queue.busy, 1);
  });

  it("serves waiters first in, first out as slots are released", async () => {
    const queue = new SlotQueue(["x", "y"], 8);
    const holders = [await queue.acquire(never()), await queue.acquire(never())];
    const order: number[] = [];
    const waiters: Array<Promise<SlotLease<string>>> = [];
    for (let index = 0; index < 3; index++) {
      waiters.push(
        queue.acquire(never()).then((lease) => {
          order.push(index);
          return lease;
        }),
      );
    }
    holders[1]!.release();
    const first = await waiters[0]!;
    assert.equal(first.slot, "y");
    holders[0]!.release();
    const second = await waiters[1]!;
    assert.equal(second.slot, "x");
    assert.equal(await isSettled(waiters[2]!), false);
    first.release();
    await waiters[2];
    assert.deepEqual(order, [0, 1, 2]);
  });

  it("does not double-free a slot released twice", async () => {
    const queue = new SlotQueue(["only"], 4);
    const lease = await queue.acquire(never());
    lease.release();
    lease.release();
    assert.equal(queue.busy, 0);
    const again = await queue.acquire(never());
    assert.equal(queue.busy, 1);
    // A second free copy of the slot would let this one through at once.
    const waiting = queue.acquire(never());
    assert.equal(queue.waiting, 1);
    assert.equal(await isSettled(waiting), false);
    again.release();
    await waiting;
  });

  it("does not hand a slot released twice to a second waiter", async () => {
    const queue = new SlotQueue(["only"], 4);
    const lease = await queue.acquire(never());
    const first = queue.acquire(never());
    const second = queue.acquire(never());
    lease.release();
    lease.release();
    await first;
    assert.equal(await isSettled(second), false);
    assert.equal(queue.waiting, 1);
  });

  it("refuses a waiter synchronously with EngineOverloadedError when the queue is full", async () => {
    const queue = new SlotQueue(["only"], 1);
    await queue.acquire(never());
    const waiting = queue.acquire(never());
    assert.throws(
      () => queue.acquire(never()),
      (error: unknown) => {
        assert.ok(error instanceof EngineOverloadedError);
        assert.equal(error.status, 503);
        assert.equal(error.code, "engine_overloaded");
        assert.match(error.headers["retry-after"] ?? "", /^\d+$/);
        return true;
      },
    );
    assert.equal(queue.waiting, 1);
    assert.equal(await isSettled(waiting), false);
  });

  it("refuses at once when no waiting is allowed and every slot is busy", async () => {
    const queue = new SlotQueue(["only"], 0);
    await queue.acquire(never());
    assert.throws(() => queue.acquire(never()), EngineOverloadedError);
  });

  it("removes an aborted waiter from the queue and rejects it with the abort reason", async () => {
    const queue = new SlotQueue(["only"], 4);
    await queue.acquire(never());
    const controller = new AbortController();
    const waiting = queue.acquire(controller.signal);
    assert.equal(queue.waiting, 1);
    const reason = new Error("client went away");
    controller.abort(reason);
    await assert.rejects(waiting, (error) => error === reason);
    assert.equal(queue.waiting, 0);
  });

  it("does not give a released slot to a waiter that was aborted", async () => {
    const queue = new SlotQueue(["only"], 4);
    const holder = await queue.acquire(never());
    const controller = new AbortController();
    const aborted = queue.acquire(controller.signal);
    aborted.catch(() => {});
    const patient = queue.acquire(never());
    controller.abort();
    holder.release();
    const lease = await patient;
    assert.equal(lease.slot, "only");
    await assert.rejects(aborted);
  });

  it("keeps a released slot free when the only waiter was aborted", async () => {
    const queue = new SlotQueue(["only"], 4);
    const holder = await queue.acquire(never());
    const controller = new AbortController();
    const aborted = queue.acquire(controller.signal);
    controller.abort();
    await assert.rejects(aborted);
    holder.release();
    assert.equal(queue.busy, 0);
    const lease = await queue.acquire(never());
    assert.equal(lease.slot, "only");
  });

  it("makes room in a full queue when a waiter is aborted", async () => {
    const queue = new SlotQueue(["only"], 1);
    await queue.acquire(never());
    const controller = new AbortController();
    const aborted = queue.acquire(controller.signal);
    controller.abort();
    await assert.rejects(aborted);
    const waiting = queue.acquire(never());
    assert.equal(queue.waiting, 1);
    waiting.catch(() => {});
  });

  it("ignores an abort that comes after the waiter got its slot", async () => {
    const queue = new SlotQueue(["only"], 4);
    const holder = await queue.acquire(never());
    const controller = new AbortController();
    const waiting = queue.acquire(controller.signal);
    holder.release();
    const lease = await waiting;
    controller.abort();
    assert.equal(queue.busy, 1);
    lease.release();
    assert.equal(queue.busy, 0);
  });

  it("rejects an already-aborted signal without taking a slot", async () => {
    const queue = new SlotQueue(["only"], 4);
    const reason = new Error("already gone");
    await assert.rejects(queue.acquire(AbortSignal.abort(reason)), (error) => error === reason);
    assert.equal(queue.busy, 0);
    assert.equal(queue.waiting, 0);
  });

  it("rejects an already-aborted signal rather than refusing it as overloaded", async () => {
    const queue = new SlotQueue(["only"], 0);
    await queue.acquire(never());
    await assert.rejects(queue.acquire(AbortSignal.abort()), (error) => !(error instanceof EngineOverloadedError));
  });

  it("tryAcquire takes a free slot at once, the best-ranked one", () => {
    const queue = new SlotQueue([{ id: 1, cached: 3 }, { id: 2, cached: 9 }], 4);
    const lease = queue.tryAcquire((slot) => slot.cached);
    assert.equal(lease?.slot.id, 2);
    assert.equal(queue.busy, 1);
  });

  it("tryAcquire never waits: none when all slots are busy, and none while others wait", async () => {
    const queue = new SlotQueue(["a", "b"], 4);
    const first = await queue.acquire(never());
    const second = await queue.acquire(never());
    assert.equal(queue.tryAcquire(), undefined);
    const waiting = queue.acquire(never());
    assert.equal(queue.waiting, 1);
    first.release();
    // The freed slot went to the waiter, not to a later tryAcquire.
    assert.equal((await waiting).slot, "a");
    assert.equal(queue.tryAcquire(), undefined);
    second.release();
    assert.equal(queue.tryAcquire()?.slot, "b");
  });
});
