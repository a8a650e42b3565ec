/**
 * The engine contract against the upstream (OpenAI-compatible) engine, built as `serve` builds it
 * from a model entry, in front of the fault-injecting upstream: a real HTTP server whose replies
 * are long enough to interleave and to be cut (twelve pieces, 10 ms apart) and, as a real server's,
 * no longer than the request's `max_tokens`, cut at the first of its `stop` strings. Its kind is
 * `openai`, which says nothing of the stop string met; the stop sequence case runs again over the
 * kinds whose finishing chunks name it (vLLM's `stop_reason`, SGLang's `matched_stop`).
 */
import assert from "node:assert/strict";
import { it } from "node:test";
import { modelEntrySchema } from "../../src/config/schema.ts";
import type { EngineEnvironment } from "../../src/engines/registry.ts";
import { createUpstreamEngine } from "../../src/engines/openai-compatible/create.ts";
import type { Engine } from "../../src/engines/engine.ts";
import { EngineOverloadedError } from "../../src/protocol/errors.ts";
import { FaultUpstream } from "../helpers/fault-upstream.ts";
import { contractRequest, engineContract, stopSequenceContract, type EngineUnderTest } from "./engine-contract.ts";
import type { UpstreamKind } from "../../src/engines/openai-compatible/config-schema.ts";

const STORY = Array.from({ length: 12 }, (_, index) => (index === 0 ? "Once" : ` word${index}`));
const MAX_IN_FLIGHT = 3;
const QUEUE_SIZE = 1;

/** What the engine needs of the process: only the queue size and the event sinks matter upstream. */
const environment: EngineEnvironment = {
  dataDir: "unused",
  llama: () => Promise.reject(new Error("no llama.cpp for an upstream model")),
  contextSize: 2048,
  parallel: 1,
  queueSize: QUEUE_SIZE,
  threads: 1,
  upstreamApiKeys: {},
  hub: { endpoint: "https://huggingface.invalid" },
  onProgress: () => {},
  onStatus: () => {},
  onUpstreamEvent: () => {},
  onUpstreamOutcome: () => {},
};

/**
 * An upstream engine over a fresh fault upstream (a 2048-token context), of `kind` (the openai
 * one by default); the fault upstream names the stop string met as that kind does.
 */
async function upstreamEngine(kind: UpstreamKind = "openai"): Promise<EngineUnderTest & { upstream: FaultUpstream }> {
  const stopField = kind === "vllm" ? "stop_reason" : kind === "sglang" ? "matched_stop" : undefined;
  const upstream = await FaultUpstream.start({ model: "fault-model", honourMaxTokens: true, honourStop: true, ...(stopField !== undefined ? { stopField } : {}) });
  upstream.mode = { kind: "complete", text: STORY, chunkDelayMs: 10 };
  const entry = modelEntrySchema.parse({
    id: "fault-model",
    context_length: 2048,
    upstream: { urls: [upstream.baseUrl], kind, max_in_flight: MAX_IN_FLIGHT, first_token_timeout: 10, idle_timeout: 10, max_attempts: 1 },
  });
  const engine: Engine = createUpstreamEngine(entry as typeof entry & { upstream: NonNullable<typeof entry.upstream> }, environment);
  return { engine, upstream, close: () => upstream.close() };
}

engineContract("upstream (fault-injecting upstream)", () => upstreamEngine(), {
  capacity: { running: MAX_IN_FLIGHT, waiting: QUEUE_SIZE },
  usageSource: "upstream",
  cutUsageSource: "estimated",
  promptCount: "upper-bound",
  // OpenAI's finishing chunk says `stop` whatever ended the reply.
  stopSequence: { stop: " word4", reported: false },
});

stopSequenceContract("upstream, kind vllm (stop_reason)", () => upstreamEngine("vllm"), { stopSequence: { stop: " word4", reported: true } });
stopSequenceContract("upstream, kind sglang (matched_stop)", () => upstreamEngine("sglang"), { stopSequence: { stop: " word4", reported: true } });

it("upstream: a request refused for a full queue never reaches the upstream", async () => {
  const { engine, upstream, close } = await upstreamEngine();
  try {
    await engine.open();
    const prepared = await engine.prepare(contractRequest());
    const controllers = Array.from({ length: MAX_IN_FLIGHT + QUEUE_SIZE }, () => new AbortController());
    const started = controllers.map((controller) => prepared.start(controller.signal));
    assert.throws(() => prepared.start(new AbortController().signal), EngineOverloadedError);
    for (const controller of controllers) controller.abort(new Error("the client left"));
    await Promise.allSettled(started.map((generation) => generation.admitted));
    assert.equal(upstream.requests.length, 0, "nothing was sent upstream: neither the refused request nor those nobody read");
  } finally {
    await engine.close();
    await close();
  }
});
