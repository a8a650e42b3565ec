/**
 * The embedded engine on a real model (llama-2-tiny-random, which never ends on its own):
 * an aborted generation stops within a token or two and frees its slot; the `top_k` vendor field
 * truncates sampling; a file that is not a GGUF leaves the model unavailable with a message an
 * operator can act on.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import v8 from "node:v8";
import vm from "node:vm";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { StreamPart } from "../engine.ts";
import { LlamaCppEngine } from "./llamacpp-engine.ts";
import { topKOption } from "./generate-choice.ts";
import { createRuntimeLoader } from "./runtime.ts";
import { loadTestEngine, sharedModel } from "./test-engine.ts";

const randomModel = sharedModel("llama-2-tiny-random.gguf");

const request = {
  messages: [{ role: "user" as const, content: "Go" }],
  sampling: { temperature: 1, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: [] },
  maxTokens: 2000,
  choices: 1,
};

describe("the llama.cpp engine", () => {
  let engine: LlamaCppEngine;
  before(async () => {
    engine = await loadTestEngine(randomModel, { modelId: "random", contextSize: 4096 });
  });
  after(async () => {
    await engine.close();
  });

  it("stops a generation within two tokens of its abort, cuts a queued one cleanly, and frees the slot", async () => {
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
      assert.deepEqual(generation.usage(), { ...finish!.usage, source: "counted" }, "the usage the caller bills is the finish's");
    }

    // A generation cut while it waits for the slot: a caller that reads only `parts` sees a
    // rejection there, and the unread `admitted` is no unhandled rejection (the test runner would
    // report one; a server process would exit on it).
    const holder = new AbortController();
    const running = (await engine.prepare(request)).start(holder.signal);
    const waiting = new AbortController();
    const queued = (await engine.prepare(request)).start(waiting.signal);
    const reading = (async () => {
      for await (const _part of queued.parts);
    })();
    setTimeout(() => waiting.abort(new Error("client went away while queued")), 20);
    await assert.rejects(reading, /client went away while queued/);
    assert.deepEqual(queued.usage(), { source: "counted", promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0 }, "nothing was evaluated for it, so nothing is billed");
    holder.abort(new Error("done"));
    for await (const _part of running.parts);
    await new Promise((resolve) => setImmediate(resolve));

    // The one slot is free: the next generation is admitted and runs to its length.
    const next = (await engine.prepare({ ...request, maxTokens: 5 })).start(new AbortController().signal);
    await next.admitted;
    let reason: string | undefined;
    for await (const part of next.parts) if (part.type === "finish") reason = part.reason;
    assert.equal(reason, "length");
    assert.equal(next.usage().completionTokens, 5);
  });

  it("honours top_k: with 1, sampling hot at any seed writes the greedy reply; without it, not", async () => {
    assert.ok(engine.capabilities().vendorFields.includes("top_k"), "top_k is a vendor field the engine takes");
    const reply = async (temperature: number, seed: number, vendor?: Record<string, unknown>) => {
      const generation = (await engine.prepare({ ...request, sampling: { ...request.sampling, temperature, seed }, maxTokens: 16, ...(vendor !== undefined ? { vendor } : {}) })).start(new AbortController().signal);
      let text = "";
      for await (const part of generation.parts) if (part.type === "text-delta") text += part.text;
      return text;
    };
    const greedy = await reply(0, 1);
    assert.ok(greedy.length > 0);
    for (const seed of [1, 2, 3]) assert.equal(await reply(1.5, seed, { top_k: 1 }), greedy, `seed ${seed}: only the likeliest token is ever sampled`);
    // The same seeds without it sample from more than the likeliest token (this model's top tokens are close).
    const unrestricted: string[] = [];
    for (const seed of [1, 2, 3]) unrestricted.push(await reply(1.5, seed));
    assert.ok(unrestricted.some((text) => text !== greedy), `without top_k the hot replies differ from the greedy one: ${JSON.stringify(unrestricted)}`);
    // 0 or less is no truncation (llama.cpp's 0, vLLM's -1); without the field node-llama-cpp's default stands.
    assert.deepEqual(topKOption({ ...request, vendor: { top_k: -1 } }), { topK: 0 });
    assert.deepEqual(topKOption({ ...request, vendor: { top_k: 5 } }), { topK: 5 });
    assert.deepEqual(topKOption(request), {});
  });

  it("keeps nothing of a finished generation (no listener left on a never-aborted signal)", async () => {
    v8.setFlagsFromString("--expose-gc");
    const gc = vm.runInNewContext("gc") as () => void;
    // A long prompt (the same one, so its evaluation is reused): whatever a request leaks, its
    // ~2,000 prompt tokens make it show.
    const long = { ...request, messages: [{ role: "user" as const, content: "story ".repeat(2000) }], maxTokens: 1 };
    const run = async (count: number) => {
      for (let index = 0; index < count; index++) {
        const generation = (await engine.prepare(long)).start(new AbortController().signal);
        for await (const _part of generation.parts);
      }
    };
    const heap = () => {
      gc();
      gc();
      return process.memoryUsage().heapUsed;
    };
    await run(50);
    const before = heap();
    await run(300);
    const grown = heap() - before;
    // Leaking each request's prompt would grow the heap by more than 300 × 2,000 × 8 bytes.
    assert.ok(grown < 2_000_000, `the heap grew by ${Math.round(grown / 1000)} kB over 300 requests`);
  });
});

describe("the llama.cpp engine with a broken file", () => {
  it("is unavailable with a printable reason and how to serve a local GGUF, never a throw", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-broken-"));
    const file = path.join(dir, "broken.gguf");
    fs.writeFileSync(file, Buffer.from([0x00, 0x9f, 0x15, 0x07, ...Buffer.from(" not a model at all")]));
    const statuses: string[] = [];
    const engine = new LlamaCppEngine({
      modelId: "broken",
      source: { path: file },
      dataDir: dir,
      llama: createRuntimeLoader({ threads: 1, gpu: "cpu" }),
      contextSize: 512,
      parallel: 1,
      queueSize: 1,
      threads: 1,
      onStatus: (status) => statuses.push(status.state),
    });
    try {
      await engine.open();
      const status = engine.status();
      assert.equal(status.state, "unavailable");
      assert.deepEqual(statuses, ["loading", "unavailable"]);
      const detail = (status as { detail: string }).detail;
      assert.match(detail, /^Model 'broken' is not available: .*GGUF.*[^.]\. Serve a local GGUF file instead: turnpike serve --model/);
      assert.doesNotMatch(detail, /[\u0000-\u001f\ufffd]/, "no raw bytes of the file in the message");
      await assert.rejects(engine.prepare(request), (error: unknown) => error instanceof Error && error.message === detail);
    } finally {
      await engine.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("the llama.cpp engine with a --gpu build that cannot run", () => {
  it("is unavailable with what to do instead (on a machine with an NVIDIA GPU and driver, it loads)", async () => {
    const logged: string[] = [];
    const engine = new LlamaCppEngine({
      modelId: "stories",
      source: { path: sharedModel("stories260K.gguf") },
      dataDir: os.tmpdir(),
      llama: createRuntimeLoader({ threads: 1, gpu: "cuda", log: (_level, message) => logged.push(message) }),
      contextSize: 256,
      parallel: 1,
      queueSize: 1,
      threads: 1,
    });
    await engine.open();
    try {
      const status = engine.status();
      if (status.state === "ready") return;
      assert.equal(status.state, "unavailable");
      assert.match(status.detail ?? "", /^Model 'stories' is not available: llama\.cpp could not start with --gpu cuda\b.*NVIDIA GPU.*--gpu auto/);
      assert.doesNotMatch(status.detail ?? "", /GGUF|\//, "no advice to serve another file, and no path");
      assert.ok(logged.some((line) => line.includes("--gpu cuda")), "the operator's log has the error itself");
    } finally {
      await engine.close();
    }
  });
});
