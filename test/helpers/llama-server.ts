/**
 * A real llama.cpp `llama-server` for the upstream-engine tests and benchmarks, built from the
 * llama.cpp source node-llama-cpp ships by scripts/build-llama-server.sh and cached outside the
 * checkout. That script is the one source of truth for where the binary lives: this helper asks
 * it (`--print-path`) rather than computing the cache key a second time.
 *
 * Tests that need the binary call `skipWithoutLlamaServer()`: outside CI a missing binary skips
 * them with a message saying how to build it; under CI=true it fails them, since CI builds it.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { once } from "node:events";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const buildScript = path.join(repoRoot, "scripts", "build-llama-server.sh");
/** The shared models beside the project (`../shared/models`), as in test/helpers/server.ts. */
export const sharedModelsDir = process.env.TURNPIKE_TEST_MODELS_DIR ?? path.resolve(repoRoot, "../shared/models");

/** Turnpike's cache outside the checkout; the build script uses the same variable and default. */
export function turnpikeCacheDir(): string {
  return process.env.TURNPIKE_CACHE_DIR ?? path.join(os.homedir(), ".cache", "turnpike");
}

let cachedBinaryPath: string | undefined;

/** Where the binary is, or would be once built (the build script's `--print-path`). */
export function llamaServerPath(): string {
  cachedBinaryPath ??= execFileSync("bash", [buildScript, "--print-path"], { cwd: repoRoot, encoding: "utf8" }).trim();
  return cachedBinaryPath;
}

/** The cached llama-server binary, or undefined when it has not been built on this machine. */
export function findLlamaServer(): string | undefined {
  const binary = llamaServerPath();
  try {
    fs.accessSync(binary, fs.constants.X_OK);
    return binary;
  } catch {
    return undefined;
  }
}

const howToBuild = "run scripts/build-llama-server.sh (20-40 minutes on 2 cores)";

/**
 * For `describe(name, { skip: skipWithoutLlamaServer() }, ...)`: false when the binary is there.
 * When it is missing, a skip message outside CI, and under CI=true an error (the test file fails
 * with it) instead of a silent skip.
 */
export function skipWithoutLlamaServer(): string | false {
  if (findLlamaServer() !== undefined) return false;
  const message = `llama-server is not built (${llamaServerPath()} is missing): ${howToBuild}`;
  if (process.env.CI === "true") throw new Error(`${message}; CI must build it before the tests (.ci/run does)`);
  return message;
}

export type LlamaServerOptions = {
  /** The GGUF file to serve. */
  model: string;
  /** The llama-server binary to run; the cached build when absent (see `withNodeLlamaCppCpuBackends`). */
  binary?: string;
  /** Defaults to 0: llama-server binds a free port itself and logs it. */
  port?: number;
  /** CPU threads for generation and prompt processing. Default 1: on the tiny models more threads are much slower. */
  threads?: number;
  /** Slots (sequences decoded together). Default 1. */
  parallel?: number;
  /** Context size in tokens, shared by all slots. Default 2048. */
  contextSize?: number;
  /** More command-line arguments, after ours (a later flag wins). */
  extraArgs?: string[];
  /** How long to wait for `/health` to answer 200. Default 60 s. */
  startTimeoutMs?: number;
};

export type RunningLlamaServer = {
  /** `http://127.0.0.1:PORT`, without a trailing slash. */
  url: string;
  process: ChildProcess;
  /** Everything llama-server logged so far (stdout and stderr together). */
  logs(): string;
  /** Stops it (SIGTERM, then SIGKILL after 2 s) and waits for it to exit. */
  close(): Promise<void>;
};

/** Children still running, killed when the test process exits (normally, or on a signal). */
const liveServers = new Set<ChildProcess>();
let exitHookInstalled = false;

function killLiveServers(): void {
  for (const child of liveServers) child.kill("SIGKILL");
}

function killLiveServersOnExit(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once("exit", killLiveServers);
  // A signal ends Node without "exit"; kill the servers, then let the signal do what it would
  // have done: ours removed, re-raised when no one else listens (someone else who listens has
  // been told already and decides).
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    const onSignal = (): void => {
      killLiveServers();
      process.removeListener(signal, onSignal);
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    };
    process.on(signal, onSignal);
  }
}

/**
 * Starts llama-server on 127.0.0.1 and resolves once `/health` answers 200 (the model is loaded).
 * Throws when the binary is missing, when it exits early, or when it is not healthy in time; the
 * error carries the tail of its log.
 */
export async function startLlamaServer(options: LlamaServerOptions): Promise<RunningLlamaServer> {
  const binary = options.binary ?? findLlamaServer();
  if (binary === undefined) throw new Error(`llama-server is not built (${llamaServerPath()} is missing): ${howToBuild}`);
  const threads = String(options.threads ?? 1);
  const args = [
    "--model", options.model,
    "--host", "127.0.0.1",
    "--port", String(options.port ?? 0),
    "--threads", threads,
    "--threads-batch", threads,
    "--parallel", String(options.parallel ?? 1),
    "--ctx-size", String(options.contextSize ?? 2048),
    "--no-webui",
    ...(options.extraArgs ?? []),
  ];
  // llama-server reads LLAMA_ARG_* variables as flags; a stray one must not change the test's server.
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("LLAMA_ARG_")));
  const child = spawn(binary, args, { env, stdio: ["ignore", "pipe", "pipe"] });
  liveServers.add(child);
  killLiveServersOnExit();
  const exited = once(child, "exit").then(() => {
    liveServers.delete(child);
  });

  let logText = "";
  const listening = new Promise<string>((resolve, reject) => {
    const onData = (chunk: Buffer): void => {
      logText += chunk.toString();
      const match = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(logText);
      if (match) resolve(match[1]!);
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    child.once("error", reject);
    child.once("exit", (code, signal) => reject(new Error(`llama-server exited (${code ?? signal}) before listening:\n${tail(logText)}`)));
  });

  const close = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 2_000);
    await exited;
    clearTimeout(timer);
  };

  const timeoutMs = options.startTimeoutMs ?? 60_000;
  const deadline = Date.now() + timeoutMs;
  try {
    const url = await withDeadline(listening, deadline, () => `llama-server did not listen within ${timeoutMs} ms:\n${tail(logText)}`);
    await waitForHealth(url, child, deadline, () => tail(logText));
    await waitForTaskLoop(url);
    return { url, process: child, logs: () => logText, close };
  } catch (error) {
    await close();
    throw error;
  }
}

/** The folder of node-llama-cpp's prebuilt llama.cpp binaries for this platform (its CPU backends are there). */
export function nodeLlamaCppBinariesDir(): string | undefined {
  const platformDir = path.join(repoRoot, "node_modules", "@node-llama-cpp", `${process.platform}-${process.arch}`, "bins", `${process.platform}-${process.arch}`);
  return fs.existsSync(platformDir) ? platformDir : undefined;
}

/**
 * The CPU backend library a running llama.cpp process loaded (`…/libggml-cpu-zen4.so`), read from
 * its memory map (Linux): llama-server does not log which one it picked. Undefined when none is mapped.
 */
export function loadedCpuBackend(pid: number): string | undefined {
  const maps = fs.readFileSync(`/proc/${pid}/maps`, "utf8");
  return /\s(\/\S*\/libggml-cpu-[\w.-]+\.so)$/m.exec(maps)?.[1];
}

/**
 * A copy of the cached llama-server (and llama-bench, when built) in a temporary folder, with
 * node-llama-cpp's own prebuilt CPU backends (`libggml-cpu-<level>.so`) in place of the ones built
 * here: the build loads its CPU backend at start from the binary's folder (GGML_BACKEND_DL), so
 * both sides of a comparison run the very same kernels, whatever the CPU. The llama.cpp source is
 * the same commit on both sides (the build script builds the bundle node-llama-cpp ships), so the
 * backends fit the rest of the build. Returns the copied binaries and a function removing the folder.
 */
export function withNodeLlamaCppCpuBackends(): { server: string; bench: string | undefined; backendsDir: string; remove: () => void } {
  const built = findLlamaServer();
  if (built === undefined) throw new Error(`llama-server is not built (${llamaServerPath()} is missing): ${howToBuild}`);
  const backendsDir = nodeLlamaCppBinariesDir();
  if (backendsDir === undefined) throw new Error(`node-llama-cpp has no prebuilt binaries for ${process.platform}-${process.arch} (node_modules/@node-llama-cpp)`);
  const backends = fs.readdirSync(backendsDir).filter((name) => /^libggml-cpu-.*\.so$/.test(name));
  if (backends.length === 0) throw new Error(`no libggml-cpu-*.so in ${backendsDir}`);
  const builtDir = path.dirname(built);
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), "llama-server-nlc-backends-"));
  for (const name of fs.readdirSync(builtDir)) {
    // Everything of the build but its own CPU backends.
    if (/^libggml-cpu-.*\.so$/.test(name)) continue;
    const source = path.join(builtDir, name);
    // Links stay links: libggml-base.so and libggml-base.so.0 must be one library, or the process
    // would load two copies of ggml's state (node-llama-cpp's backends name the unversioned one).
    if (fs.lstatSync(source).isSymbolicLink()) fs.symlinkSync(fs.readlinkSync(source), path.join(folder, name));
    else fs.copyFileSync(source, path.join(folder, name));
  }
  for (const name of backends) fs.copyFileSync(path.join(backendsDir, name), path.join(folder, name));
  const bench = path.join(folder, "llama-bench");
  return {
    server: path.join(folder, "llama-server"),
    bench: fs.existsSync(bench) ? bench : undefined,
    backendsDir,
    remove: () => fs.rmSync(folder, { recursive: true, force: true }),
  };
}

async function waitForHealth(url: string, child: ChildProcess, deadline: number, logTail: () => string): Promise<void> {
  let last = "no answer";
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`llama-server exited (${child.exitCode ?? child.signalCode}) while loading:\n${logTail()}`);
    }
    try {
      const response = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2_000) });
      const body = await response.text();
      if (response.status === 200) return;
      last = `${response.status} ${body}`;
    } catch (error) {
      last = String(error);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`llama-server at ${url} was not healthy in time (last: ${last}):\n${logTail()}`);
}

/**
 * llama-server answers /health 200 a moment before its task loop runs, and a SIGTERM in that
 * moment is lost (the loop's start clears the stop flag the signal set; it then needs SIGKILL).
 * /slots is answered by the task loop, so an answer means the loop runs. Best effort: a server
 * started with --no-slots answers 501 at once, and close() still falls back to SIGKILL.
 */
async function waitForTaskLoop(url: string): Promise<void> {
  await fetch(`${url}/slots`, { signal: AbortSignal.timeout(5_000) })
    .then((response) => response.arrayBuffer())
    .catch(() => {});
}

async function withDeadline<T>(promise: Promise<T>, deadline: number, message: () => string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message())), Math.max(0, deadline - Date.now()));
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function tail(text: string, lines = 30): string {
  return text.split("\n").slice(-lines).join("\n");
}

export type BenchModelOptions = {
  layers?: number;
  embd?: number;
  ff?: number;
  heads?: number;
  kvHeads?: number;
  /** Context length written into the GGUF, in tokens. */
  context?: number;
  seed?: number;
};

/**
 * The benchmark model of ../shared/models/make-bench-model.py (a ~125M-parameter Llama shape with
 * seeded random weights, ~133 MB with the defaults), made on first use into
 * `<cache>/bench-models/`, keyed by its arguments and the script's own hash (the same arguments
 * give the same bytes). Takes ~20 s and needs python3 with numpy the first time.
 */
export function benchModelPath(options: BenchModelOptions = {}): string {
  const script = path.join(sharedModelsDir, "make-bench-model.py");
  const flags: Array<[string, number | undefined]> = [
    ["--layers", options.layers],
    ["--embd", options.embd],
    ["--ff", options.ff],
    ["--heads", options.heads],
    ["--kv-heads", options.kvHeads],
    ["--context", options.context],
    ["--seed", options.seed],
  ];
  const args = flags.filter(([, value]) => value !== undefined).flatMap(([flag, value]) => [flag, String(value)]);
  const scriptHash = createHash("sha256").update(fs.readFileSync(script)).digest("hex").slice(0, 12);
  const argsKey = args.length === 0 ? "default" : args.join("").replaceAll("--", "-").replace(/^-/, "");
  const directory = path.join(turnpikeCacheDir(), "bench-models");
  const target = path.join(directory, `bench-${argsKey}-${scriptHash}.gguf`);
  if (fs.existsSync(target)) return target;

  fs.mkdirSync(directory, { recursive: true });
  // Written under a temporary name and renamed, so an interrupted run never leaves half a model.
  const partial = `${target}.${process.pid}.partial`;
  try {
    // From the project's root, the script finds node-llama-cpp's llama.cpp bundle for gguf-py.
    execFileSync("python3", [script, partial, ...args], { cwd: repoRoot, stdio: ["ignore", "ignore", "pipe"] });
    fs.renameSync(partial, target);
  } finally {
    fs.rmSync(partial, { force: true });
  }
  return target;
}
