/**
 * `partBatches`: an engine's own batches where it has them, else one part a batch; stopping early
 * ends the engine's iterator either way.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { partBatches, type BatchedParts, type StreamPart } from "./generation.ts";

const text = (value: string): StreamPart => ({ type: "text-delta", choice: 0, text: value });
const finish: StreamPart = { type: "finish", choice: 0, reason: "stop", usage: { promptTokens: 1, cachedPromptTokens: 0, completionTokens: 2 } };

async function all<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const seen: T[] = [];
  for await (const item of iterable) seen.push(item);
  return seen;
}

test("parts without batches of their own come one a batch, in order", async () => {
  async function* parts(): AsyncGenerator<StreamPart> {
    yield text("a");
    yield text("b");
    yield finish;
  }
  assert.deepEqual(await all(partBatches(parts())), [[text("a")], [text("b")], [finish]]);
});

test("an engine's batches are read as they are, not part by part", async () => {
  let partByPart = false;
  const parts: BatchedParts = {
    [Symbol.asyncIterator]: () => {
      partByPart = true;
      return (async function* () {})();
    },
    batches: async function* () {
      yield [text("a"), text("b")];
      yield [finish];
    },
  };
  assert.deepEqual(await all(partBatches(parts)), [[text("a"), text("b")], [finish]]);
  assert.equal(partByPart, false);
});

test("stopping early ends the engine's iterator, batched or not", async () => {
  const ended: string[] = [];
  async function* parts(name: string): AsyncGenerator<StreamPart> {
    try {
      yield text("a");
      yield text("b");
    } finally {
      ended.push(name);
    }
  }
  for await (const _batch of partBatches(parts("plain"))) break;
  const batched: BatchedParts = {
    [Symbol.asyncIterator]: () => parts("unused"),
    batches: async function* () {
      try {
        yield [text("a")];
        yield [finish];
      } finally {
        ended.push("batched");
      }
    },
  };
  for await (const _batch of partBatches(batched)) break;
  assert.deepEqual(ended, ["plain", "batched"]);
});
