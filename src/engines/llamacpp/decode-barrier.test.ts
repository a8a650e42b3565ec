/**
 * The decode barrier on its own (what goes into a batch, when it waits), and on a real model:
 * concurrent generations share their batches whole.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { BatchItem, Token } from "node-llama-cpp";
import { DecodeBarrier, decodesFirst, sequenceKey } from "./decode-barrier.ts";
import type { LlamaCppEngine } from "./llamacpp-engine.ts";
import { loadTestEngine, sharedModel } from "./test-engine.ts";

const item = (tokens: number): BatchItem => ({
  tokens: Array.from({ length: tokens }, (_, index) => index as Token),
  logits: [],
  evaluationPriority: 5,
});

describe("decodesFirst", () => {
  it("puts every generated token in before any prompt, and shares the rest of the batch among prompts", () => {
    const decodes = [item(1), item(1), item(1)];
    const prompts = [item(100), item(10), item(300)];
    const batch = decodesFirst([prompts[0]!, decodes[0]!, prompts[1]!, decodes[1]!, prompts[2]!, decodes[2]!], 64);
    const amount = new Map(batch.map((entry) => [entry.item, entry.processAmount]));
    for (const decode of decodes) assert.equal(amount.get(decode), 1);
    // 61 left for three prompts: the short one takes its 10, the others share the rest.
    assert.equal(amount.get(prompts[1]!), 10);
    assert.equal(amount.get(prompts[0]!)! + amount.get(prompts[2]!)!, 51);
    assert.ok(Math.abs(amount.get(prompts[0]!)! - amount.get(prompts[2]!)!) <= 1);
    assert.equal([...amount.values()].reduce((sum, value) => sum + value, 0), 64);
  });

  it("never exceeds the batch, and leaves out what does not fit", () => {
    const items = [item(1), item(1), item(1), item(500)];
    const batch = decodesFirst(items, 2);
    assert.deepEqual(
      batch.map((entry) => entry.processAmount),
      [1, 1],
    );
    const whole = decodesFirst([item(40), item(5)], 512);
    assert.deepEqual(
      whole.map((entry) => entry.processAmount),
      [40, 5],
    );
  });
});

describe("DecodeBarrier", () => {
  it("holds a batch until every counted sequence's decode is queued, within its bound", () => {
    const barrier = new DecodeBarrier({ maxDeferrals: 3 });
    const a = barrier.stepper();
    const b = barrier.stepper();
    a.start();
    b.start();
    assert.equal(barrier.expected, 2);
    // One of two queued: wait.
    assert.deepEqual(barrier.prioritize({ items: [item(1)], size: 512 }), []);
    // Both: go, in the order of their sequences (the key in evaluationPriority), not of arrival,
    // so llama.cpp runs them as one pass.
    const [late, early] = [{ ...item(1), evaluationPriority: sequenceKey(1) }, { ...item(1), evaluationPriority: sequenceKey(0) }];
    assert.deepEqual(
      barrier.prioritize({ items: [late, early], size: 512 }).map((entry) => entry.item),
      [early, late],
    );

    // A sequence whose reader stopped taking its parts is not waited for.
    b.pause();
    assert.equal(barrier.expected, 1);
    assert.equal(barrier.prioritize({ items: [item(1)], size: 512 }).length, 1);
    b.resume();
    b.resume();
    assert.equal(barrier.expected, 2, "resuming twice counts once");

    // A sequence that never arrives costs the bounded number of deferrals, then the batch leaves.
    for (let attempt = 0; attempt < 3; attempt++) assert.deepEqual(barrier.prioritize({ items: [item(1)], size: 512 }), []);
    assert.equal(barrier.prioritize({ items: [item(1)], size: 512 }).length, 1);
    assert.equal(barrier.stats().gaveUp, 1);

    a.stop();
    b.pause();
    b.stop();
    a.stop();
    assert.equal(barrier.expected, 0, "stopping counts down once, paused or not");
    b.start();
    assert.equal(barrier.expected, 0, "a stopped stepper never counts again");
  });
});

describe("the embedded engine's batches", () => {
  let engine: LlamaCppEngine;
  before(async () => {
    engine = await loadTestEngine(sharedModel("stories260K.gguf"), { modelId: "stories", parallel: 4, queueSize: 4 });
  });
  after(async () => {
    await engine.close();
  });

  it("decodes concurrent generations together: each batch holds every running sequence's token", async () => {
    const request = (index: number) => ({
      messages: [{ role: "user" as const, content: `Story number ${index}: once upon a time` }],
      sampling: { temperature: 1, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: [], seed: index, logitBias: new Map([[2, -100]]) },
      maxTokens: 60,
      choices: 1,
    });
    const before = engine.batchStats()!;
    const generations = await Promise.all([0, 1, 2, 3].map(async (index) => (await engine.prepare(request(index))).start(new AbortController().signal)));
    const tokens = await Promise.all(
      generations.map(async (generation) => {
        for await (const _part of generation.parts);
        return generation.usage().completionTokens;
      }),
    );
    assert.deepEqual(tokens, [60, 60, 60, 60]);
    const after = engine.batchStats()!;
    const batches = after.batches - before.batches;
    const sequences = after.sequences - before.sequences;
    // 4 × 60 tokens (and the prompts): a batch per step when they go together, 4 sequences each.
    assert.ok(batches <= 65, `${batches} batches for 4 × 60 tokens`);
    assert.ok(sequences / batches >= 3.5, `${(sequences / batches).toFixed(2)} sequences a batch`);
    assert.equal(after.gaveUp - before.gaveUp, 0, "no batch left without a sequence it waited for");
  });

  it("evaluates the prompt once for parallel choices (n = 3), and their text is what one choice alone makes", async () => {
    const request = (choices: number, round: number) => ({
      messages: [{ role: "user" as const, content: `Round ${round}. Once upon a time there was a little girl named Lily who loved to play in the garden with her dog.` }],
      sampling: { temperature: 0, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: [], logitBias: new Map([[2, -100]]) },
      maxTokens: 20,
      choices,
    });
    const run = async (choices: number, round: number) => {
      const prepared = await engine.prepare(request(choices, round));
      const before = engine.batchStats()!;
      const generation = prepared.start(new AbortController().signal);
      const texts = Array.from({ length: choices }, () => "");
      for await (const part of generation.parts) if (part.type === "text-delta") texts[part.choice] += part.text;
      return { texts, promptTokens: prepared.promptTokens, decoded: engine.batchStats()!.tokens - before.tokens, usage: generation.usage() };
    };
    const alone = await run(1, 1);
    const together = await run(3, 2);
    assert.ok(together.promptTokens > 32, `a prompt long enough to share (${together.promptTokens} tokens)`);
    // The prompt once (its last token once per choice) and 20 tokens per choice, less the last
    // token sampled (never decoded), plus at most one read-ahead decode per choice.
    const shared = together.promptTokens - 1 + 3 * 20 + 3;
    assert.ok(together.decoded <= shared, `${together.decoded} tokens decoded; sharing the prompt decodes at most ${shared} (not sharing: ${3 * together.promptTokens + 3 * 19})`);
    assert.equal(together.usage.promptTokens, together.promptTokens, "the prompt is billed once");
    assert.equal(together.usage.completionTokens, 60);
    // The same prompt but its round: at temperature 0 every choice writes what one choice alone writes for it.
    const again = await run(1, 2);
    for (const text of together.texts) assert.equal(text, again.texts[0]);
    assert.ok(alone.texts[0]!.length > 0);
  });

  it("does not wait for a stream whose reader stopped taking its parts, and goes on with it once it reads again", async () => {
    const request = (index: number) => ({
      messages: [{ role: "user" as const, content: `Tale ${index}: once upon a time` }],
      sampling: { temperature: 0, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: [], logitBias: new Map([[2, -100]]) },
      maxTokens: 150,
      choices: 1,
    });
    const before = engine.batchStats()!;
    const [reading, stalled] = await Promise.all([0, 1].map(async (index) => (await engine.prepare(request(index))).start(new AbortController().signal)));
    // The stalled stream's reader takes one part and then nothing until the other stream is done:
    // its choice fills the parts buffer and pauses.
    const stalledParts = stalled!.parts[Symbol.asyncIterator]();
    await stalledParts.next();
    for await (const _part of reading!.parts);
    assert.equal(reading!.usage().completionTokens, 150);
    const during = engine.batchStats()!;
    assert.equal(during.gaveUp - before.gaveUp, 0, "no batch waited out its bound for the paused stream");
    assert.ok(stalled!.usage().completionTokens < 150, `the paused stream stopped generating (${stalled!.usage().completionTokens} tokens)`);
    // Reading again, it runs to its end.
    for (let step = await stalledParts.next(); step.done !== true; step = await stalledParts.next());
    assert.equal(stalled!.usage().completionTokens, 150);
    assert.equal(engine.batchStats()!.gaveUp - before.gaveUp, 0);
  });
});
