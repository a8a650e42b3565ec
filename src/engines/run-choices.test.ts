/**
 * runChoices: the choices of one request spread over the slots it holds, parts interleaved,
 * every slot back and every choice finished however the run ends.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { StreamPart } from "./engine.ts";
import { READY_HIGH_WATER, runChoices } from "./run-choices.ts";
import { SlotQueue } from "./slot-queue.ts";

const never = () => new AbortController().signal;
const usage = { promptTokens: 3, cachedPromptTokens: 0, completionTokens: 2 };

/** A choice that yields two deltas naming its slot, one tick apart, then finishes (cancelled when aborted). */
async function* twoDeltas(slot: string, choice: number, signal: AbortSignal): AsyncGenerator<StreamPart> {
  for (const text of ["a", "b"]) {
    await new Promise((resolve) => setImmediate(resolve));
    if (signal.aborted) {
      yield { type: "finish", choice, reason: "cancelled", usage };
      return;
    }
    yield { type: "text-delta", choice, text: `${slot}${text}` };
  }
  yield { type: "finish", choice, reason: "stop", usage };
}

async function leases(queue: SlotQueue<string>, count: number) {
  return Promise.all(Array.from({ length: count }, () => queue.acquire(never())));
}

describe("runChoices", () => {
  it("runs choices in parallel over several slots, interleaving their parts", async () => {
    const queue = new SlotQueue(["s0", "s1", "s2"], 0);
    const parts = [];
    for await (const part of runChoices(await leases(queue, 3), 3, never(), twoDeltas)) parts.push(part);
    const texts = parts.filter((part) => part.type === "text-delta").map((part) => `${part.choice}:${part.text}`);
    assert.deepEqual(texts.slice(0, 3), ["0:s0a", "1:s1a", "2:s2a"], "interleaved by choice");
    assert.equal(parts.filter((part) => part.type === "finish").length, 3);
    assert.equal(queue.busy, 0, "every slot is back");
  });

  it("runs the choices one after another when the request holds one slot", async () => {
    const queue = new SlotQueue(["only"], 0);
    const parts = [];
    for await (const part of runChoices(await leases(queue, 1), 3, never(), twoDeltas)) parts.push(part);
    assert.deepEqual(
      parts.map((part) => `${part.choice}:${part.type}`),
      ["0:text-delta", "0:text-delta", "0:finish", "1:text-delta", "1:text-delta", "1:finish", "2:text-delta", "2:text-delta", "2:finish"],
    );
    assert.equal(queue.busy, 0);
  });

  it("ends every choice with a cancelled finish when aborted", async () => {
    const queue = new SlotQueue(["only"], 0);
    const abort = new AbortController();
    const finishes = [];
    for await (const part of runChoices(await leases(queue, 1), 3, abort.signal, twoDeltas)) {
      if (part.type === "text-delta") abort.abort();
      else if (part.type === "finish") finishes.push(`${part.choice}:${part.reason}`);
    }
    assert.deepEqual(finishes, ["0:cancelled", "1:cancelled", "2:cancelled"]);
    assert.equal(queue.busy, 0);
  });

  it("stops the other choices and gives every slot back when the consumer stops early", async () => {
    const queue = new SlotQueue(["s0", "s1"], 0);
    for await (const _part of runChoices(await leases(queue, 2), 4, never(), twoDeltas)) break;
    assert.equal(queue.busy, 0);
  });

  it("rethrows a choice's failure after stopping the others", async () => {
    const queue = new SlotQueue(["s0", "s1"], 0);
    const failing = async function* (slot: string, choice: number, signal: AbortSignal): AsyncGenerator<StreamPart> {
      if (choice === 1) throw new Error("decode failed");
      yield* twoDeltas(slot, choice, signal);
    };
    await assert.rejects(async () => {
      for await (const _part of runChoices(await leases(queue, 2), 2, never(), failing));
    }, /decode failed/);
    assert.equal(queue.busy, 0);
  });

  it("pauses the choices while the consumer does not pull, instead of buffering what they make", async () => {
    const queue = new SlotQueue(["s0", "s1"], 0);
    let made = 0;
    /** A choice that would make 10,000 deltas, one a tick. */
    async function* endless(_slot: string, choice: number, signal: AbortSignal): AsyncGenerator<StreamPart> {
      for (let index = 0; index < 10_000; index++) {
        await new Promise((resolve) => setImmediate(resolve));
        if (signal.aborted) break;
        made++;
        yield { type: "text-delta", choice, text: "x" };
      }
      yield { type: "finish", choice, reason: signal.aborted ? "cancelled" : "length", usage };
    }
    const iterator = runChoices(await leases(queue, 2), 2, never(), endless)[Symbol.asyncIterator]();
    await iterator.next();
    // The consumer stops pulling for a while: the choices make a bounded number of parts, then wait.
    for (let tick = 0; tick < 500; tick++) await new Promise((resolve) => setImmediate(resolve));
    assert.ok(made <= READY_HIGH_WATER + 2, `made ${made} parts while nobody pulled`);
    // Pulling again resumes them.
    const before = made;
    for (let pulled = 0; pulled < 100; pulled++) await iterator.next();
    assert.ok(made >= before + 100 - READY_HIGH_WATER - 2, `made ${made - before} more after 100 pulls`);
    await iterator.return!(undefined);
    assert.equal(queue.busy, 0, "every slot is back after the consumer stopped");
  });
});
