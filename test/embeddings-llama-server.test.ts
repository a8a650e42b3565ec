/**
 * Embedding parity with llama-server: the embedded engine and llama-server (`--embeddings`, mean
 * pooling, built from the llama.cpp source node-llama-cpp ships) embed the same inputs from the same
 * GGUF (`embeddingModelPath()`: stories260K with `llama.pooling_type` mean); each pair of vectors
 * must point the same way (cosine ≥ 0.9999; batches of different shapes round differently) and both
 * count the same tokens. Skipped outside CI when llama-server is not built; under CI=true a missing
 * binary fails the file.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { LlamaCppEngine } from "../src/engines/llamacpp/llamacpp-engine.ts";
import { loadTestEngine } from "../src/engines/llamacpp/test-engine.ts";
import { skipWithoutLlamaServer, startLlamaServer, type RunningLlamaServer } from "./helpers/llama-server.ts";
import { embeddingModelPath } from "./helpers/test-models.ts";
import { cosine } from "./helpers/vectors.ts";

const CONTEXT_SIZE = 512;

const inputs = [
  "Once upon a time there was a little cat who liked to play in the garden.",
  "The dog ran away.",
  "Lily and Ben went to the park. They saw a big red ball under a tree, and Ben kicked it very high.",
  "x",
  "Tom said: \"I am happy!\" <s> and then </s> it was night.",
];

type EmbeddingsBody = { data: Array<{ index: number; embedding: number[] }>; usage: { prompt_tokens: number } };


describe("embeddings: the embedded engine against llama-server", { skip: skipWithoutLlamaServer() }, () => {
  let server: RunningLlamaServer;
  let engine: LlamaCppEngine;
  before(async () => {
    // `--kv-unified`: with a KV cache stream per slot (what `--parallel` alone gives), llama-server
    // pools inputs that share a batch wrongly (cosine ~0.95 to the same input alone, this llama.cpp);
    // with one unified cache its batched vectors equal its single ones, which the test compares against.
    server = await startLlamaServer({ model: embeddingModelPath(), parallel: 4, contextSize: 4 * CONTEXT_SIZE, extraArgs: ["--embeddings", "--pooling", "mean", "--kv-unified"] });
    engine = await loadTestEngine(embeddingModelPath(), { modelId: "embed", contextSize: CONTEXT_SIZE, queueSize: 8 });
  });
  after(async () => {
    await engine?.close();
    await server?.close();
  });

  async function llamaServerEmbeddings(input: string[] | number[][]): Promise<EmbeddingsBody> {
    const response = await fetch(`${server.url}/v1/embeddings`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "embed", input, encoding_format: "float" }),
    });
    assert.equal(response.status, 200, await response.clone().text());
    return (await response.json()) as EmbeddingsBody;
  }

  it("gives each text the same unit vector and counts the same tokens", async () => {
    const theirs = await llamaServerEmbeddings(inputs);
    const prepared = await engine.prepareEmbeddings({ inputs: inputs.map((text) => ({ text })), truncate: false });
    const ours = await prepared.run(new AbortController().signal);
    assert.equal(ours.usage.promptTokens, theirs.usage.prompt_tokens, "the same tokenization");
    const byIndex = [...theirs.data].sort((a, b) => a.index - b.index);
    assert.equal(byIndex.length, inputs.length);
    inputs.forEach((text, index) => {
      const theirVector = byIndex[index]!.embedding;
      assert.equal(ours.vectors[index]!.length, theirVector.length);
      assert.ok(Math.abs(Math.hypot(...theirVector) - 1) < 1e-4, "llama-server normalises too");
      const similarity = cosine(ours.vectors[index]!, theirVector);
      assert.ok(similarity >= 0.9999, `input ${index} (${JSON.stringify(text)}): cosine ${similarity}`);
    });
  });

  it("gives token inputs that hold their BOS the same vectors", async () => {
    const tokens = [[1, 300, 301, 302, 303], [1, 42, 7, 99]];
    const theirs = await llamaServerEmbeddings(tokens);
    const ours = await (await engine.prepareEmbeddings({ inputs: tokens.map((each) => ({ tokens: each })), truncate: false })).run(new AbortController().signal);
    assert.equal(ours.usage.promptTokens, theirs.usage.prompt_tokens);
    const byIndex = [...theirs.data].sort((a, b) => a.index - b.index);
    tokens.forEach((_, index) => {
      const similarity = cosine(ours.vectors[index]!, byIndex[index]!.embedding);
      assert.ok(similarity >= 0.9999, `input ${index}: cosine ${similarity}`);
    });
  });
});
