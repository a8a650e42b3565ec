/**
 * Embeddings from the embedded engine, on stories260K with mean pooling (`embeddingModelPath()`)
 * and on plain stories260K: which GGUF is an embedding model, vectors (deterministic, unit length,
 * in the inputs' order, token inputs equal to their text), the refusals (too long, out of the
 * vocabulary, empty), truncation, the queue (full: refused at once; FIFO) and aborts; the lanes
 * (with two threads, two inputs on two contexts at once, the same vectors whichever lane computes them);
 * batched decodes with Turnpike's patched binding (several requests' inputs in one decode, each
 * with the vector it gets alone; CI installs the binding, elsewhere those tests are skipped).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { LlamaModel, Token } from "node-llama-cpp";
import type { EmbeddingInput, EmbeddingRequest } from "../engine.ts";
import { ApiError, EngineOverloadedError } from "../../protocol/errors.ts";
import { embeddingModelPath, STORIES_260K } from "../../../test/helpers/test-models.ts";
import { measureVocabulary, type LlamaCppEngine } from "./llamacpp-engine.ts";
import { laneThreads, LlamaEmbedder, MAX_LANES } from "./embeddings.ts";
import { EmbeddingBatches, sequenceEmbeddings } from "./embedding-batches.ts";
import { embeddingKind, POOLING } from "./embedding-model.ts";
import { createRuntimeLoader, patchedBindingInstalled } from "./runtime.ts";
import { loadTestEngine } from "./test-engine.ts";
import { cosine } from "../../../test/helpers/vectors.ts";

const chatRequest = {
  messages: [{ role: "user" as const, content: "Hi" }],
  sampling: { temperature: 0, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: [] },
  maxTokens: 4,
  choices: 1,
};

function request(inputs: EmbeddingInput[], truncate = false): EmbeddingRequest {
  return { inputs, truncate };
}

function texts(...values: string[]): EmbeddingInput[] {
  return values.map((text) => ({ text }));
}

async function embed(engine: LlamaCppEngine, inputs: EmbeddingInput[], truncate = false): Promise<Float32Array[]> {
  const prepared = await engine.prepareEmbeddings(request(inputs, truncate));
  const result = await prepared.run(new AbortController().signal);
  assert.deepEqual(result.usage, { promptTokens: prepared.promptTokens, source: "counted" });
  return result.vectors;
}

function norm(vector: Float32Array): number {
  return Math.hypot(...vector);
}

/** Rejects with an `ApiError` of this code whose message holds `text`. */
async function rejectsWith(promise: Promise<unknown> | (() => unknown), code: string, text: string | RegExp, param?: string): Promise<void> {
  await assert.rejects(async () => (typeof promise === "function" ? promise() : promise), (error: unknown) => {
    assert.ok(error instanceof ApiError, String(error));
    assert.equal(error.code, code);
    assert.match(error.message, typeof text === "string" ? new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")) : text);
    if (param !== undefined) assert.equal(error.param, param);
    return true;
  });
}

const story = "Once upon a time there was a little cat who liked to play in the garden.";

describe("embedding model detection", () => {
  it("reads pooling, encoder architectures and causal attention from the metadata", () => {
    assert.deepEqual(embeddingKind({ general: { architecture: "llama" }, llama: { embedding_length: 64, pooling_type: POOLING.mean } }, 1), { kind: "embedding", pooling: 1, dimensions: 64 });
    assert.deepEqual(embeddingKind({ general: { architecture: "llama" }, llama: { embedding_length: 64 } }, 64), { kind: "generative", dimensions: 64 });
    assert.deepEqual(embeddingKind({ general: { architecture: "llama" }, llama: { embedding_length: 64, pooling_type: POOLING.none } }, 64), { kind: "generative", dimensions: 64 });
    assert.deepEqual(embeddingKind({ general: { architecture: "bert" }, bert: { embedding_length: 384 } }, 384), { kind: "embedding", pooling: 0, dimensions: 384 });
    assert.deepEqual(
      embeddingKind({ general: { architecture: "qwen3" }, qwen3: { embedding_length: 1024, embedding_length_out: 768, attention: { causal: false } } }, 1024),
      { kind: "embedding", pooling: 0, dimensions: 768 },
    );
    assert.deepEqual(embeddingKind({ general: { architecture: "bert" }, bert: { embedding_length: 384, pooling_type: POOLING.rank } }, 384), { kind: "reranker" });
  });
});

describe("the llama.cpp engine serving an embedding GGUF", () => {
  let engine: LlamaCppEngine;
  let model: LlamaModel;
  before(async () => {
    engine = await loadTestEngine(embeddingModelPath(), { modelId: "embed", contextSize: 32, queueSize: 1 });
    const llama = await createRuntimeLoader({ threads: 1, gpu: "cpu" })();
    model = await llama.loadModel({ modelPath: embeddingModelPath(), vocabOnly: true });
  });
  after(async () => {
    await engine.close();
    await model.dispose();
  });

  it("serves embeddings only, with the model's vector length, and refuses a generation", async () => {
    const capabilities = engine.capabilities();
    assert.deepEqual(capabilities.services, ["embeddings"]);
    assert.equal(capabilities.embeddingDimensions, 64);
    assert.deepEqual(capabilities.supportedParameters, [], "no chat parameters");
    assert.equal(engine.info()?.contextLength, 32);
    await rejectsWith(engine.prepare(chatRequest), "model_does_not_support_endpoint", "serves embeddings (POST /v1/embeddings) only");
    await rejectsWith(async () => engine.boundPrompt(chatRequest), "model_does_not_support_endpoint", "embeddings (POST /v1/embeddings) only");
    assert.equal(engine.members()[0]!.capacity, 1);
  });

  it("gives identical inputs identical unit vectors, in the inputs' order", async () => {
    const [a1, b, a2] = await embed(engine, texts(story, "The dog ran away.", story));
    const [alone] = await embed(engine, texts(story));
    assert.equal(a1!.length, 64);
    for (const vector of [a1!, b!, a2!]) assert.ok(Math.abs(norm(vector) - 1) < 1e-5, `norm ${norm(vector)}`);
    assert.deepEqual(a1, a2);
    assert.deepEqual(a1, alone);
    assert.ok(cosine(a1!, b!) < 0.9999, "different texts give different vectors");
  });

  it("embeds token inputs as their text: the model's BOS added where missing, counted", async () => {
    const tokens = [...model.tokenize(story, true)];
    assert.notEqual(tokens[0], model.tokens.bos, "tokenize adds no BOS itself");
    const withBos = [model.tokens.bos!, ...tokens];
    const prepared = await engine.prepareEmbeddings(request([{ text: story }, { tokens }, { tokens: withBos }]));
    assert.equal(prepared.promptTokens, 3 * withBos.length, "each input is the text's tokens and one BOS");
    const [text, bare, bos] = (await prepared.run(new AbortController().signal)).vectors;
    assert.deepEqual(bare, text);
    assert.deepEqual(bos, text);
  });

  it("refuses an input longer than the context, naming it, and cuts it to fit with truncate", async () => {
    const long = "the cat sat on the mat and ".repeat(6);
    const tokens = [model.tokens.bos!, ...model.tokenize(long, true)];
    assert.ok(tokens.length > 32, `${tokens.length} tokens`);
    await rejectsWith(engine.prepareEmbeddings(request(texts("short", long))), "context_length_exceeded", `'input[1]' has ${tokens.length} tokens`, "input");
    await rejectsWith(engine.prepareEmbeddings(request([{ text: "short" }, { tokens }])), "context_length_exceeded", "'input[1]'", "input");
    // Megabytes of text are refused without tokenizing them (at least so many tokens whatever they are).
    await rejectsWith(engine.prepareEmbeddings(request(texts("x".repeat(4_000_000)))), "context_length_exceeded", /'input\[0\]' has at least \d+ tokens/);

    const prepared = await engine.prepareEmbeddings(request(texts("short", long), true));
    const short = (await engine.prepareEmbeddings(request(texts("short")))).promptTokens;
    assert.equal(prepared.promptTokens, short + 32);
    const [, cut] = (await prepared.run(new AbortController().signal)).vectors;
    const [first32] = await embed(engine, [{ tokens: tokens.slice(0, 32) }]);
    assert.deepEqual(cut, first32, "truncation keeps the first 32 tokens");
    const [huge] = await embed(engine, texts("the cat ".repeat(500_000)), true);
    assert.equal(huge!.length, 64);
  });

  it("refuses token ids outside the vocabulary and empty inputs with a 400 naming the input", async () => {
    for (const bad of [512, -1, 1.5]) {
      await rejectsWith(engine.prepareEmbeddings(request([{ text: "fine" }, { tokens: [1, 2, bad] }])), "invalid_request_error", `'input[1]': token id ${bad} is not in this model's vocabulary (ids 0 to 511)`, "input");
    }
    await rejectsWith(engine.prepareEmbeddings(request(texts("fine", "", "fine"))), "invalid_request_error", "'input[1]': an input must not be empty");
    await rejectsWith(engine.prepareEmbeddings(request([{ tokens: [] }])), "invalid_request_error", "'input[0]': an input must not be empty");
    await rejectsWith(engine.prepareEmbeddings(request([])), "invalid_request_error", "at least one input");
  });

  it("bounds a request's tokens without tokenizing", async () => {
    const inputs: EmbeddingInput[] = [{ text: story }, { tokens: [5, 6, 7] }, { text: "A dog." }];
    const bound = engine.boundEmbeddings(request(inputs));
    const exact = (await engine.prepareEmbeddings(request(inputs))).promptTokens;
    assert.ok(bound.atLeast <= exact && exact <= bound.atMost, `${bound.atLeast} ≤ ${exact} ≤ ${bound.atMost}`);
    assert.ok(bound.atLeast > 0);
    assert.equal(bound.bytes, Buffer.byteLength(story) + Buffer.byteLength("A dog."));
    const truncated = engine.boundEmbeddings(request(texts("x".repeat(10_000)), true));
    assert.ok(truncated.atMost <= 32 && truncated.atLeast <= 32);
  });

  it("runs queued requests in order, refuses one past the queue at once, and counts one input per decode", async () => {
    const before = engine.members()[0]!.batching!;
    const inputs = [texts(story, "A dog."), texts("The sun is hot."), texts("Birds sing.")];
    const expected: Float32Array[][] = [];
    for (const each of inputs) expected.push(await embed(engine, each));
    const prepared = await Promise.all(inputs.map((each) => engine.prepareEmbeddings(request(each))));
    const signal = new AbortController().signal;
    const done: number[] = [];
    const running = prepared[0]!.run(signal).then((result) => (done.push(0), result));
    const waiting = prepared[1]!.run(signal).then((result) => (done.push(1), result));
    assert.equal(engine.members()[0]!.waiting, 1);
    // One runs, one waits (queue size 1): a third is refused before it returns a promise.
    assert.throws(() => prepared[2]!.run(signal), EngineOverloadedError);
    const results = await Promise.all([running, waiting]);
    assert.deepEqual(done, [0, 1]);
    assert.deepEqual(results[0]!.vectors, expected[0]);
    assert.deepEqual(results[1]!.vectors, expected[1]);
    const after = engine.members()[0]!.batching!;
    const tokens = prepared.slice(0, 2).reduce((sum, each) => sum + each.promptTokens, 0) * 2 + prepared[2]!.promptTokens;
    // One slot (`parallel` 1): each decode holds one input, batched or on lanes.
    assert.deepEqual({ batches: after.batches - before.batches, sequences: after.sequences - before.sequences, tokens: after.tokens - before.tokens }, { batches: 7, sequences: 7, tokens });
  });

  it("drops an aborted request's inputs: waiting, it leaves the queue; running, it stops before its next input", async () => {
    const many = texts(...Array.from({ length: 200 }, (_, index) => `Story number ${index} about a cat.`));
    const first = new AbortController();
    const second = new AbortController();
    const before = engine.members()[0]!.batching!.sequences;
    const running = (await engine.prepareEmbeddings(request(many))).run(first.signal);
    const queued = (await engine.prepareEmbeddings(request(many))).run(second.signal);
    second.abort(new Error("client went away while queued"));
    await assert.rejects(queued, /client went away while queued/);
    assert.equal(engine.members()[0]!.waiting, 0);
    // Abort the running one once it has embedded something.
    while (engine.members()[0]!.batching!.sequences === before) await new Promise((resolve) => setImmediate(resolve));
    first.abort(new Error("client went away"));
    await assert.rejects(running, /client went away/);
    const embedded = engine.members()[0]!.batching!.sequences - before;
    assert.ok(embedded >= 1 && embedded < 200, `${embedded} inputs embedded`);
    assert.equal(engine.members()[0]!.busy, 0, "the context is free again");
    const [vector] = await embed(engine, texts(story));
    assert.equal(vector!.length, 64);
  });
});

describe("the llama.cpp engine serving a generative GGUF", () => {
  it("serves chat and completions, embeddings too when its entry says so, and only embeddings when that is all it says", async () => {
    const plain = await loadTestEngine(STORIES_260K, { modelId: "stories" });
    try {
      assert.deepEqual(plain.capabilities().services, ["chat", "completions"]);
      assert.equal(plain.capabilities().embeddingDimensions, undefined);
      await rejectsWith(plain.prepareEmbeddings(request(texts(story))), "model_does_not_support_endpoint", "does not serve embeddings");
    } finally {
      await plain.close();
    }
    const both = await loadTestEngine(STORIES_260K, { modelId: "stories", serves: ["chat", "completions", "embeddings"] });
    try {
      assert.deepEqual(both.capabilities().services, ["chat", "completions", "embeddings"]);
      assert.equal(both.capabilities().embeddingDimensions, 64);
      const [a, b] = await embed(both, texts(story, story));
      assert.deepEqual(a, b);
      assert.ok(Math.abs(norm(a!) - 1) < 1e-5);
      // It still generates.
      const generation = (await both.prepare(chatRequest)).start(new AbortController().signal);
      let finished = false;
      for await (const part of generation.parts) if (part.type === "finish") finished = true;
      assert.ok(finished);
    } finally {
      await both.close();
    }
    const embedsOnly = await loadTestEngine(STORIES_260K, { modelId: "stories", serves: ["embeddings"] });
    try {
      assert.deepEqual(embedsOnly.capabilities().services, ["embeddings"]);
      await rejectsWith(embedsOnly.prepare(chatRequest), "model_does_not_support_endpoint", "serves embeddings (POST /v1/embeddings) only");
      const [vector] = await embed(embedsOnly, texts(story));
      assert.equal(vector!.length, 64);
    } finally {
      await embedsOnly.close();
    }
  });
});

describe("embedding lanes", () => {
  it("splits the threads between min(threads, parallel, 8) lanes, the remainder to the first", () => {
    assert.deepEqual(laneThreads(1, 4), [1]);
    assert.deepEqual(laneThreads(2, 4), [1, 1]);
    assert.deepEqual(laneThreads(2, 1), [2]);
    assert.deepEqual(laneThreads(5, 2), [3, 2]);
    assert.deepEqual(laneThreads(7, 3), [3, 2, 2]);
    assert.equal(laneThreads(32, 64).length, MAX_LANES);
    assert.equal(laneThreads(32, 64).reduce((sum, each) => sum + each, 0), 32);
  });

  let model: LlamaModel;
  let embedder: LlamaEmbedder;
  let single: LlamaEmbedder;
  before(async () => {
    // A runtime with two threads (its `maxThreads` caps all contexts together): room for both lanes.
    const llama = await createRuntimeLoader({ threads: 2, gpu: "cpu" })();
    model = await llama.loadModel({ modelPath: embeddingModelPath() });
    const options = { contextSize: 32, queueSize: 4, ...measureVocabulary(model) };
    embedder = await LlamaEmbedder.open(model, { ...options, threads: 2, parallel: 4 });
    single = await LlamaEmbedder.open(model, { ...options, threads: 1, parallel: 4 });
  });
  after(async () => {
    await embedder.close();
    await single.close();
    await model.dispose();
  });

  const run = (target: LlamaEmbedder, inputs: EmbeddingInput[]) => target.prepare(request(inputs)).run(new AbortController().signal);
  /** Until `count` inputs are decoding: a few microtasks (a decode ends only in a later turn of the event loop). */
  async function decoding(count: number): Promise<void> {
    for (let turn = 0; turn < 20 && embedder.laneStats().decoding < count; turn++) await Promise.resolve();
    assert.equal(embedder.laneStats().decoding, count);
  }

  it("with two threads runs one request's two inputs on two lanes of a thread each, at once", async () => {
    assert.deepEqual(embedder.laneStats().threads, [1, 1]);
    assert.deepEqual(embedder.laneStats().wide?.threads, 2);
    assert.deepEqual(single.laneStats().threads, [1]);
    assert.equal(single.laneStats().wide, undefined, "one lane is the wide one");
    const before = embedder.laneStats();
    const running = run(embedder, texts(story, "The dog ran away."));
    await decoding(2);
    assert.deepEqual(embedder.load(), { busy: 2, waiting: 0, capacity: 2 }, "the request took the second lane too");
    const { vectors } = await running;
    assert.equal(vectors.length, 2);
    const stats = embedder.laneStats();
    assert.deepEqual(stats.inputs.map((count, lane) => count - before.inputs[lane]!), [1, 1], "one input on each lane");
    assert.equal(stats.wide!.inputs, before.wide!.inputs, "none on the wide context");
    assert.equal(stats.mostAtOnce, 2, "both decodes were in flight together");
    assert.deepEqual(embedder.load(), { busy: 0, waiting: 0, capacity: 2 });
  });

  it("runs an input alone on the wide context with all the threads, and a request arriving meanwhile on a lane", async () => {
    const before = embedder.laneStats();
    const first = run(embedder, texts(story));
    await decoding(1);
    const second = run(embedder, texts("The dog ran away."));
    assert.deepEqual(embedder.load(), { busy: 2, waiting: 0, capacity: 2 });
    await Promise.all([first, second]);
    const stats = embedder.laneStats();
    assert.equal(stats.wide!.inputs - before.wide!.inputs, 1, "the first, alone, on the wide context");
    assert.deepEqual(stats.inputs.map((count, lane) => count - before.inputs[lane]!), [0, 1], "the second on the second lane");
  });

  it("spreads one request's inputs over free lanes, in the inputs' order, and every context gives the same vectors", async () => {
    const inputs = texts(story, "The dog ran away.", "Birds sing.", story, "The sun is hot.");
    const expected = (await run(single, inputs)).vectors;
    const before = embedder.laneStats().inputs;
    const { vectors } = await run(embedder, inputs);
    const spread = embedder.laneStats().inputs.map((count, lane) => count - before[lane]!);
    assert.ok(spread.every((count) => count >= 1), `inputs per lane ${spread}`);
    assert.equal(spread[0]! + spread[1]!, 4, "the repeated input is embedded once");
    assert.deepEqual(vectors, expected, "the same vectors as one lane of one thread, in order");
    // The same text on the wide context (two threads) and on the second lane at once: identical vectors.
    const wideBefore = embedder.laneStats().wide!.inputs;
    const a = run(embedder, texts(story));
    await decoding(1);
    const [onWide, onLane] = await Promise.all([a, run(embedder, texts(story))]);
    assert.equal(embedder.laneStats().wide!.inputs - wideBefore, 1);
    assert.deepEqual(onWide.vectors, onLane.vectors);
    assert.deepEqual(onLane.vectors[0], expected[0]);
  });

  it("stops a request spread over both lanes when it is aborted, and gives both lanes back", async () => {
    const controller = new AbortController();
    const before = embedder.stats().sequences;
    const running = embedder.prepare(request(texts(...Array.from({ length: 200 }, (_, index) => `Story number ${index} about a dog.`)))).run(controller.signal);
    await decoding(2);
    while (embedder.stats().sequences === before) await new Promise((resolve) => setImmediate(resolve));
    controller.abort(new Error("client went away"));
    await assert.rejects(running, /client went away/);
    const embedded = embedder.stats().sequences - before;
    assert.ok(embedded >= 1 && embedded < 200, `${embedded} inputs embedded`);
    assert.deepEqual(embedder.load(), { busy: 0, waiting: 0, capacity: 2 });
    assert.equal(embedder.laneStats().decoding, 0);
  });

  it("queues a third request behind two running ones and runs it on the first lane given back", async () => {
    const prepared = [texts(story), texts("A dog."), texts("Birds sing.")].map((inputs) => embedder.prepare(request(inputs)));
    const signal = new AbortController().signal;
    const runs = prepared.map((each) => each.run(signal));
    assert.deepEqual(embedder.load(), { busy: 2, waiting: 1, capacity: 2 });
    const results = await Promise.all(runs);
    assert.equal(results.length, 3);
    assert.deepEqual(results[2]!.vectors, (await run(single, texts("Birds sing."))).vectors);
  });
});

describe("batched embedding decodes (Turnpike's patched binding)", () => {
  it("are used only with a binding that says it reads any sequence's vector", () => {
    const modelOf = (bindings: object) => ({ llama: { _bindings: bindings } }) as unknown as LlamaModel;
    assert.equal(sequenceEmbeddings(modelOf({})), false);
    assert.equal(sequenceEmbeddings(modelOf({ turnpikeEmbeddingSequences: 1 })), true);
  });

  it("is what CI runs on: the patched binding is installed (scripts/build-node-llama-cpp.sh)", { skip: process.env.CI !== "true" && "CI only" }, () => {
    assert.ok(patchedBindingInstalled(), ".ci/run installs it before npm test");
  });

  const installed = patchedBindingInstalled();
  describe("with the patched binding", { skip: !installed && "the patched binding is not installed here (scripts/build-node-llama-cpp.sh; CI installs it)" }, () => {
    let model: LlamaModel;
    let batched: LlamaEmbedder;
    let lanes: LlamaEmbedder;
    /** What llama.cpp said through the runtime's log (its warnings and errors that reach the operator). */
    const said: string[] = [];
    before(async () => {
      const llama = await createRuntimeLoader({ threads: 2, gpu: "cpu", log: (level, message) => said.push(`${level}: ${message}`) })();
      model = await llama.loadModel({ modelPath: embeddingModelPath() });
      const options = { contextSize: 32, queueSize: 16, ...measureVocabulary(model) };
      batched = await LlamaEmbedder.open(model, { ...options, threads: 2, parallel: 4, pooled: true });
      lanes = await LlamaEmbedder.open(model, { ...options, threads: 1, parallel: 1, decoding: "lanes" });
    });
    after(async () => {
      await batched?.close();
      await lanes?.close();
      await model?.dispose();
    });

    const run = (target: LlamaEmbedder, inputs: EmbeddingInput[]) => target.prepare(request(inputs)).run(new AbortController().signal);
    /** Each vector points where the one-input decode's does (a batch of other shapes may differ in the last bits). */
    function sameVectors(actual: Float32Array[], expected: Float32Array[]): void {
      assert.equal(actual.length, expected.length);
      actual.forEach((vector, index) => assert.ok(cosine(vector, expected[index]!) > 0.99999, `input ${index}: cosine ${cosine(vector, expected[index]!)}`));
    }
    const sentences = [story, "A dog.", "Birds sing in the tall green trees every single morning.", "Hot sun.", "The cat sat on the mat.", "Rain."];

    it("loads on the CPU and decodes a pooled model's inputs in batches", () => {
      assert.ok(sequenceEmbeddings(model));
      assert.equal(batched.decoding, "batched");
      assert.equal(lanes.decoding, "lanes");
      assert.deepEqual(batched.load(), { busy: 0, waiting: 0, capacity: 4 }, "a slot per input in flight (parallel)");
    });

    it("decodes concurrent requests' inputs of different lengths together, each with the vector it gets alone", async () => {
      const inputs = sentences.slice(0, 4);
      const expected: Float32Array[] = [];
      for (const text of inputs) expected.push((await run(lanes, texts(text))).vectors[0]!);
      const before = batched.stats();
      const results = await Promise.all(inputs.map((text) => run(batched, texts(text))));
      const after = batched.stats();
      assert.equal(after.batches - before.batches, 1, "one decode for the four requests");
      assert.equal(after.sequences - before.sequences, 4);
      assert.ok(batched.mostInOneDecode >= 4);
      sameVectors(
        results.map((result) => result.vectors[0]!),
        expected,
      );
    });

    it("spreads one request's inputs over its free slots: decodes hold several, the vectors in the inputs' order", async () => {
      const inputs = texts(...Array.from({ length: 10 }, (_, index) => `${sentences[index % sentences.length]!} (${index})`));
      const expected = (await run(lanes, inputs)).vectors;
      const before = batched.stats();
      const { vectors } = await run(batched, inputs);
      const after = batched.stats();
      assert.equal(after.sequences - before.sequences, 10);
      assert.ok(after.batches - before.batches <= 5, `${after.batches - before.batches} decodes for 10 inputs on 4 slots`);
      sameVectors(vectors, expected);
    });

    it("embeds a request's identical inputs once, giving each the same vector and billing each", async () => {
      const before = batched.stats();
      const prepared = batched.prepare(request(texts(story, "A dog.", story, story)));
      const { vectors, usage } = await prepared.run(new AbortController().signal);
      assert.equal(batched.stats().sequences - before.sequences, 2);
      assert.deepEqual(vectors[0], vectors[2]);
      assert.deepEqual(vectors[0], vectors[3]);
      assert.notEqual(vectors[0], vectors[2], "copies, not one array shared");
      assert.equal(usage.promptTokens, prepared.promptTokens);
      assert.equal(prepared.embeddedTokens(), prepared.promptTokens, "every copy's tokens counted as made");
      // The same text twice in one decode (two requests), at other places of the batch: the same
      // direction; the sums run in another order, so the last bits may differ.
      const [a, b] = await Promise.all([run(batched, texts(story)), run(batched, texts(story))]);
      sameVectors(a.vectors, b.vectors);
    });

    it("puts no more inputs in a decode than its sequences, nor more tokens than its batch", async () => {
      const batches = await EmbeddingBatches.open(model, { batchTokens: 33, sequences: 3, threads: 1 });
      try {
        const tokens = (text: string) => [model.tokens.bos!, ...model.tokenize(text, true)];
        const short = tokens("A dog.");
        const long = tokens("the cat sat on the mat and the dog ran");
        assert.ok(long.length > 11 && long.length <= 33, `${long.length} tokens`);
        // Four short ones: three (the sequences), then one.
        await Promise.all([short, short, short, short].map((each) => batches.embed(each)));
        assert.deepEqual(batches.stats(), { batches: 2, sequences: 4, tokens: 4 * short.length, mostInOne: 3 });
        // Three long ones: as many as fit 33 tokens each time.
        const perDecode = Math.floor(33 / long.length);
        await Promise.all([long, long, long].map((each) => batches.embed(each)));
        assert.equal(batches.stats().batches - 2, Math.ceil(3 / perDecode));
        await assert.rejects(batches.embed(Array.from({ length: 34 }, () => short[1]!)), /does not fit a batch of 33/);
      } finally {
        await batches.close();
      }
    });

    it("opens 64 sequences on one cache of their cells without warning the operator of a context past the training one", async () => {
      const before = said.length;
      const batches = await EmbeddingBatches.open(model, { batchTokens: 513, sequences: 64, threads: 1 });
      try {
        // Short enough for all 64 to fit the batch (576 tokens).
        const tokens = [model.tokens.bos!, ...model.tokenize("A dog.", true)];
        const vectors = await Promise.all(Array.from({ length: 64 }, () => batches.embed(tokens)));
        assert.equal(vectors.length, 64);
        assert.equal(batches.stats().mostInOne, 64);
      } finally {
        await batches.close();
      }
      assert.deepEqual(said.slice(before), [], "llama.cpp said nothing to the operator");
    });

    it("refuses inputs still waiting when it closes, and finishes the decode that runs", async () => {
      const batches = await EmbeddingBatches.open(model, { batchTokens: 33, sequences: 1, threads: 1 });
      const tokens = [model.tokens.bos!, ...model.tokenize(story, true)];
      const first = batches.embed(tokens);
      const second = batches.embed(tokens);
      // The first decode starts in the next turn of the event loop.
      await new Promise((resolve) => setImmediate(resolve));
      const closed = batches.close();
      await assert.rejects(second, /engine closing/);
      assert.equal((await first).length, 64);
      await closed;
      await assert.rejects(batches.embed(tokens), /engine closing/);
    });
  });
});
