/**
 * The llama.cpp runtime, loaded once per process with node-llama-cpp's no-download, no-build
 * options: start-up never touches the network and never compiles.
 *
 * Which binding: node-llama-cpp's prebuilt one, or, on the CPU, its binding as Turnpike patches it
 * when `scripts/build-node-llama-cpp.sh` has installed it (node-llama-cpp's "last build"; the
 * patch lets embedding inputs decode together, `embedding-batches.ts`). The patched binding is
 * the prebuilt CPU release with only `llama-addon.node` rebuilt from the same source, so every
 * kernel is the prebuilt one. A machine with a GPU node-llama-cpp can use keeps the prebuilt GPU
 * binding under `--gpu auto`.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { getLlama, getLlamaGpuTypes, LlamaLogLevel, type Llama, type LlamaOptions } from "node-llama-cpp";

export type GpuSetting = "auto" | "cpu" | "cuda" | "vulkan" | "metal";

export type RuntimeOptions = {
  /** Upper bound on llama.cpp threads in this process. */
  threads: number;
  gpu: GpuSetting;
  /** Receives llama.cpp's own warnings and errors. */
  log?: (level: "warn" | "error", message: string) => void;
};

/** llama.cpp itself cannot start with the `--gpu` asked for: no model of this process can load. */
export class RuntimeUnavailableError extends Error {
  override name = "RuntimeUnavailableError";
}

/**
 * What a client and the operator read when no llama.cpp build for `gpu` runs here: the error's
 * kind and what to do, not its message (which can name the library paths tried; that goes to the log).
 */
function runtimeFailure(gpu: GpuSetting, error: unknown): RuntimeUnavailableError {
  const kind = error instanceof Error && error.name !== "Error" ? ` (${error.name})` : "";
  const hint =
    gpu === "cpu" || gpu === "auto"
      ? "node-llama-cpp's prebuilt binaries do not run on this machine: reinstall with npm install, and check node-llama-cpp's supported platforms."
      : `node-llama-cpp's ${gpu} build does not run here: ${gpu === "cuda" ? "it needs an NVIDIA GPU with its driver" : gpu === "vulkan" ? "it needs a GPU with a Vulkan driver" : "it runs on Apple silicon only"}. ` +
        "Use --gpu auto (which falls back to the CPU) or --gpu cpu.";
  return new RuntimeUnavailableError(`llama.cpp could not start with --gpu ${gpu}${kind}. ${hint}`);
}

/**
 * llama.cpp warnings that say nothing wrong: node-llama-cpp's embedding context asks for the last
 * token's output only, and llama.cpp marks every token as an output for pooling itself (which is
 * right) with a warning per decode; and the batched embedding context's size (below).
 */
const EXPECTED_WARNINGS: readonly RegExp[] = [
  /embeddings required but some input tokens were not marked as outputs/,
  // A batched embedding context's one KV cache holds every sequence's cells (node-llama-cpp gives
  // each at least 256), which llama.cpp measures against the training context as if one sequence
  // could fill it; no input is longer than `--context-size`, itself within the training context.
  /n_ctx_seq \(\d+\) > n_ctx_train \(\d+\) -- possible training context overflow/,
];

/** The folder of node-llama-cpp's local builds that `scripts/build-node-llama-cpp.sh` installs the patched binding as. */
export const PATCHED_BUILD_FOLDER = "turnpike-embedding-sequences";

/** node-llama-cpp's `llama` folder (its grammars, local builds and last build's record). */
export function nodeLlamaCppLlamaDirectory(): string {
  return path.join(path.dirname(fileURLToPath(import.meta.resolve("node-llama-cpp"))), "..", "llama");
}

/** Whether node-llama-cpp's last local build is Turnpike's patched binding, installed whole. */
export function patchedBindingInstalled(): boolean {
  const llamaDirectory = nodeLlamaCppLlamaDirectory();
  try {
    const last = JSON.parse(fs.readFileSync(path.join(llamaDirectory, "lastBuild.json"), "utf8")) as { folderName?: unknown };
    const folder = path.join(llamaDirectory, "localBuilds", PATCHED_BUILD_FOLDER);
    return last.folderName === PATCHED_BUILD_FOLDER && fs.existsSync(path.join(folder, "buildDone.status")) && fs.existsSync(path.join(folder, "Release", "llama-addon.node"));
  } catch {
    return false;
  }
}

/** Whether the patched binding serves `gpu`: the CPU asked for, or `auto` on a machine where node-llama-cpp finds no GPU. */
async function patchedBindingServes(gpu: GpuSetting): Promise<boolean> {
  if (gpu !== "cpu" && gpu !== "auto") return false;
  if (!patchedBindingInstalled()) return false;
  return gpu === "cpu" || (await getLlamaGpuTypes("supported")).every((type) => type === false);
}

/** Returns a loader that creates the runtime on first call and shares it after. */
export function createRuntimeLoader(options: RuntimeOptions): () => Promise<Llama> {
  let runtime: Promise<Llama> | undefined;
  const shared = {
    skipDownload: true,
    progressLogs: false,
    maxThreads: options.threads,
    logLevel: LlamaLogLevel.warn,
    logger: (level: LlamaLogLevel, message: string) => {
      const text = message.trim();
      if (text === "" || EXPECTED_WARNINGS.some((pattern) => pattern.test(text))) return;
      if (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal) options.log?.("error", text);
      else if (level === LlamaLogLevel.warn) options.log?.("warn", text);
    },
  } satisfies LlamaOptions;
  const stock = () => getLlama({ ...shared, gpu: options.gpu === "cpu" ? false : options.gpu, build: "never" });
  const load = async (): Promise<Llama> => {
    if (!(await patchedBindingServes(options.gpu))) return stock();
    try {
      const llama = await getLlama("lastBuild", shared);
      if (llama.gpu === false) return llama;
      await llama.dispose();
    } catch (error) {
      options.log?.("warn", `Turnpike's patched llama.cpp binding did not load; using node-llama-cpp's prebuilt one: ${error instanceof Error ? error.message : String(error)}`);
    }
    return stock();
  };
  return () => {
    runtime ??= load().catch((error: unknown) => {
      options.log?.("error", `llama.cpp runtime (--gpu ${options.gpu}): ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
      throw runtimeFailure(options.gpu, error);
    });
    return runtime;
  };
}
