/**
 * The engine contract against the embedded llama.cpp engine on the real stories260K model (one
 * thread, CPU, a small context; three sequences so that `n` choices run at once).
 */
import os from "node:os";
import { LlamaCppEngine } from "../../src/engines/llamacpp/llamacpp-engine.ts";
import { createRuntimeLoader } from "../../src/engines/llamacpp/runtime.ts";
import { sharedModel } from "../../src/engines/llamacpp/test-engine.ts";
import { engineContract } from "./engine-contract.ts";

/** One llama.cpp runtime for every case (loaded once per process anyway). */
const llama = createRuntimeLoader({ threads: 1, gpu: "cpu" });

/** stories260K's end-of-text token: banned where a case needs a reply that cannot stop after a word. */
const END_OF_TEXT = 2;

engineContract(
  "llama.cpp (stories260K)",
  async () => ({
    engine: new LlamaCppEngine({
      modelId: "stories260K",
      source: { path: sharedModel("stories260K.gguf") },
      dataDir: os.tmpdir(),
      llama,
      contextSize: 512,
      parallel: 3,
      queueSize: 1,
      threads: 1,
    }),
    close: async () => {},
  }),
  {
    capacity: { running: 3, waiting: 1 },
    usageSource: "counted",
    cutUsageSource: "counted",
    promptCount: "exact",
    longRequest: { sampling: { temperature: 0, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: [], logitBias: new Map([[END_OF_TEXT, -100]]) } },
    // The greedy reply begins "is an amazing for a while. All the …".
    stopSequence: { stop: ".", reported: true },
  },
);
