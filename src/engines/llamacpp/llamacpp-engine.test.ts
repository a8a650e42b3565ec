/**
 * The embedded engine on a real model (llama-2-tiny-random, which never ends on its own):
 * an aborted generation stops within a token or two and frees its slot.
 */
import assert from "node:assert/strict";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { StreamPart } from "../engine.ts";
import { LlamaCppEngine } from "./llamacpp-engine.ts";
import { createRuntimeLoader } from "./runtime.ts";

const randomModel = path.resolve(import.meta.dirname, "../../../../shared/models/llama-2-tiny-random.gguf");

const request = {
  messages: [{ role: "user" as const, content: "Go" }],
  sampling: { temperature: 1, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: [] },
  maxTokens: 2000,
  choices: 1,
};

describe("the llama.cpp engine", () => {
  let engine: LlamaCppEngine;
  before(async () => {
    engine = new LlamaCppEngine({
      modelId: "random",
      source: { path: randomModel },
      dataDir: os.tmpdir(),
      llama: createRuntimeLoader({ threads: 1, gpu: "cpu" }),
      contextSize: 4096,
      parallel: 1,
      queueSize: 1,
      threads: 1,
    });
    await engine.load();
    assert.equal(engine.status().state, "ready", JSON.stringify(engine.status()));
  });
  after(async () => {
    await engine.close();
  });

  it("stops a generation within two tokens of its abort and frees the slot", async () => {
    for (const abortAfter of [1, 10, 50]) {
      const controller = new AbortController();
      const generation = (await engine.prepare(request)).start(controller.signal);
      let deltas = 0;
      let finish: Extract<StreamPart, { type: "finish" }> | undefined;
      let tokensAtAbort = 0;
      for await (const part of generation.parts) {
        if (part.type === "text-delta" && ++deltas === abortAfter) {
          tokensAtAbort = generation.usage().completionTokens;
          controller.abort(new Error("client went away"));
        }
        if (part.type === "finish") finish = part;
      }
      assert.equal(finish?.reason, "cancelled");
      const generated = finish!.usage.completionTokens;
      assert.ok(generated >= tokensAtAbort && generated <= tokensAtAbort + 2, `aborted at ${tokensAtAbort} tokens, generated ${generated}`);
      assert.deepEqual(generation.usage(), finish!.usage, "the usage the caller bills is the finish's");
    }

    // The one slot is free: the next generation is admitted and runs to its length.
    const next = (await engine.prepare({ ...request, maxTokens: 5 })).start(new AbortController().signal);
    await next.admitted;
    let reason: string | undefined;
    for await (const part of next.parts) if (part.type === "finish") reason = part.reason;
    assert.equal(reason, "length");
    assert.equal(next.usage().completionTokens, 5);
  });
});
