/**
 * The llama.cpp runtime, loaded once per process with node-llama-cpp's no-download, no-build
 * options: start-up never touches the network and never compiles.
 */
import { getLlama, LlamaLogLevel, type Llama } from "node-llama-cpp";

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
 * llama.cpp warnings that say nothing wrong, each written on every request: node-llama-cpp's embedding
 * context asks for the last token's output only, and llama.cpp marks every token as an output for
 * pooling itself (which is right) with a warning per decode.
 */
const EXPECTED_WARNINGS: readonly RegExp[] = [/embeddings required but some input tokens were not marked as outputs/];

/** Returns a loader that creates the runtime on first call and shares it after. */
export function createRuntimeLoader(options: RuntimeOptions): () => Promise<Llama> {
  let runtime: Promise<Llama> | undefined;
  return () => {
    runtime ??= getLlama({
      gpu: options.gpu === "cpu" ? false : options.gpu,
      build: "never",
      skipDownload: true,
      progressLogs: false,
      maxThreads: options.threads,
      logLevel: LlamaLogLevel.warn,
      logger: (level, message) => {
        const text = message.trim();
        if (text === "" || EXPECTED_WARNINGS.some((pattern) => pattern.test(text))) return;
        if (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal) options.log?.("error", text);
        else if (level === LlamaLogLevel.warn) options.log?.("warn", text);
      },
    }).catch((error: unknown) => {
      options.log?.("error", `llama.cpp runtime (--gpu ${options.gpu}): ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
      throw runtimeFailure(options.gpu, error);
    });
    return runtime;
  };
}
