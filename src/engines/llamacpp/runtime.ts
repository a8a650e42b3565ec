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
        if (text === "") return;
        if (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal) options.log?.("error", text);
        else if (level === LlamaLogLevel.warn) options.log?.("warn", text);
      },
    });
    return runtime;
  };
}
