/**
 * The stop sequence case over a real llama.cpp `llama-server` (stories260K-chatml, one thread),
 * as the upstream engine of kind `llama-server` meets it: the reply ends before the stop string,
 * and the finish names none, since llama-server's chat completions do not say which stop string
 * ended a reply (`finish_reason: "stop"` only; see `dialects.ts`). One choice: the kind takes no
 * `n`. Skipped outside CI when llama-server is not built (see helpers/llama-server.ts).
 */
import path from "node:path";
import { describe } from "node:test";
import { modelEntrySchema } from "../../src/config/schema.ts";
import type { EngineEnvironment } from "../../src/engines/registry.ts";
import { createUpstreamEngine } from "../../src/engines/openai-compatible/create.ts";
import { sharedModelsDir, skipWithoutLlamaServer, startLlamaServer } from "../helpers/llama-server.ts";
import { stopSequenceContract, type EngineUnderTest } from "./engine-contract.ts";

const environment: EngineEnvironment = {
  dataDir: "unused",
  llama: () => Promise.reject(new Error("no llama.cpp for an upstream model")),
  contextSize: 2048,
  parallel: 1,
  queueSize: 1,
  threads: 1,
  upstreamApiKeys: {},
  hub: { endpoint: "https://huggingface.invalid" },
  onProgress: () => {},
  onStatus: () => {},
  onUpstreamEvent: () => {},
  onUpstreamOutcome: () => {},
};

/** An upstream engine of kind llama-server over a llama-server of its own. */
async function llamaServerEngine(): Promise<EngineUnderTest> {
  const server = await startLlamaServer({ model: path.join(sharedModelsDir, "stories260K-chatml.gguf"), threads: 1, parallel: 1, contextSize: 2048 });
  try {
    const entry = modelEntrySchema.parse({ id: "stories", upstream: { urls: [`${server.url}/v1`], kind: "llama-server", max_attempts: 1 } });
    return { engine: createUpstreamEngine(entry as typeof entry & { upstream: NonNullable<typeof entry.upstream> }, environment), close: () => server.close() };
  } catch (error) {
    await server.close();
    throw error;
  }
}

describe("llama-server", { skip: skipWithoutLlamaServer() }, () => {
  stopSequenceContract("upstream, kind llama-server (a real llama-server)", llamaServerEngine, {
    // As recorded (`llama-server-stop-sequence.sse`): the greedy reply meets "cat" within 40 tokens.
    longRequest: {
      messages: [
        { role: "system", content: "You are a storyteller." },
        { role: "user", content: "Tell me a story about a cat." },
      ],
    },
    stopSequence: { stop: "cat", reported: false, choices: 1 },
  });
});
