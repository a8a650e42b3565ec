/**
 * For tests: a real llama.cpp engine on one of the shared tiny models, one thread, CPU only
 * (the models' README: more threads are far slower on models this small), loaded and checked ready.
 */
import assert from "node:assert/strict";
import os from "node:os";
import path from "node:path";
import { LlamaCppEngine, type LlamaCppEngineOptions } from "./llamacpp-engine.ts";
import { createRuntimeLoader } from "./runtime.ts";

/** `shared/models/<file>` beside the project. */
export function sharedModel(file: string): string {
  return path.resolve(import.meta.dirname, "../../../../shared/models", file);
}

/** Loads `file` (a path) as a ready engine with one sequence; `options` override the defaults. */
export async function loadTestEngine(file: string, options: Partial<LlamaCppEngineOptions> = {}): Promise<LlamaCppEngine> {
  const engine = new LlamaCppEngine({
    modelId: path.basename(file, ".gguf"),
    source: { path: file },
    dataDir: os.tmpdir(),
    llama: createRuntimeLoader({ threads: 1, gpu: "cpu" }),
    contextSize: 2048,
    parallel: 1,
    queueSize: 1,
    threads: 1,
    ...options,
  });
  await engine.open();
  assert.equal(engine.status().state, "ready", JSON.stringify(engine.status()));
  return engine;
}
