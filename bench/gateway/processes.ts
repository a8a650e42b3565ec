/**
 * Child processes for the gateway benchmark: start one, read the port it announces, wait for
 * it to answer, read its CPU time, stop it. Every wait is bounded; a child that exits early is
 * reported with the tail of its stderr.
 */
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

/** Characters of a child's stderr kept for error messages. */
const STDERR_TAIL = 4000;

export type Child = {
  name: string;
  process: ChildProcess;
  /** The last few KB of what it wrote to stderr (and stdout, when not read as a port line). */
  output: () => string;
  /** Resolves with the exit code (or the signal's name) once it exits. */
  exited: Promise<number | string>;
  /** User + system CPU time in ms from /proc (Linux), undefined elsewhere. */
  cpuMs: () => number | undefined;
  stop: () => Promise<void>;
};

/** Clock ticks per second for /proc/<pid>/stat (`getconf CLK_TCK`, 100 on Linux). */
const CLOCK_TICKS = 100;

function readCpuMs(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (which may hold spaces) in parentheses; utime and stime are fields 14 and 15.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS;
  } catch {
    return undefined;
  }
}

/** Starts `node <args>` (this Node, so children run on the same version). */
export function startChild(name: string, args: string[], options: { env?: NodeJS.ProcessEnv; cwd?: string; captureStdout?: boolean } = {}): Child {
  const child = spawn(process.execPath, args, { cwd: options.cwd, env: { ...process.env, ...options.env }, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString("utf8")).slice(-STDERR_TAIL);
  };
  child.stderr!.on("data", keep);
  // A child that logs to stdout (Turnpike's JSON log) has it kept too; others announce their port there.
  if (options.captureStdout) child.stdout!.on("data", keep);
  const exited = new Promise<number | string>((resolve) => child.once("exit", (code, signal) => resolve(code ?? signal ?? "unknown")));
  return {
    name,
    process: child,
    output: () => output,
    exited,
    cpuMs: () => readCpuMs(child.pid),
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      const stopped = await Promise.race([exited.then(() => true), sleep(5000).then(() => false)]);
      if (!stopped) {
        child.kill("SIGKILL");
        await Promise.race([exited, sleep(2000)]);
      }
    },
  };
}

/** The reason a child failed, from its exit and the last lines of its output. */
export function describeFailure(child: Child, what: string): string {
  const lines = child
    .output()
    .replace(/\x1b\[[0-9;]*m/g, "")
    .split(/\r?\n|\r/)
    .map((line) => line.trim())
    .filter((line) => line !== "");
  const last = lines.find((line) => /could not start|error/i.test(line)) ?? lines.at(-1) ?? "no output";
  return `${what}: ${last}`;
}

/** Reads the `{"port": N}` line a child prints once it listens. */
export async function readPortLine(child: Child, timeoutMs: number): Promise<number> {
  const stdout = child.process.stdout!;
  let buffered = "";
  return new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => finish(new Error(describeFailure(child, `${child.name} announced no port within ${timeoutMs} ms`))), timeoutMs);
    const onData = (chunk: Buffer) => {
      buffered += chunk.toString("utf8");
      const line = buffered.split("\n").find((candidate) => candidate.startsWith("{"));
      if (line === undefined) return;
      try {
        finish(undefined, (JSON.parse(line) as { port: number }).port);
      } catch (error) {
        finish(error as Error);
      }
    };
    const finish = (error?: Error, port?: number) => {
      clearTimeout(timer);
      stdout.off("data", onData);
      // Keep draining stdout so the child never blocks on a full pipe.
      stdout.resume();
      if (error) reject(error);
      else resolve(port!);
    };
    stdout.on("data", onData);
    child.exited.then((code) => finish(new Error(describeFailure(child, `${child.name} exited (${code})`))));
  });
}

/**
 * Waits until `GET url` answers 200 (polled every 100 ms), the child exits (rejects with its
 * stderr), or `timeoutMs` passes.
 */
export async function waitForOk(url: string, child: Child, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let exitCode: number | string | undefined;
  void child.exited.then((code) => {
    exitCode = code;
  });
  let lastProblem = "no answer";
  while (Date.now() < deadline) {
    if (exitCode !== undefined) throw new Error(describeFailure(child, `${child.name} exited (${exitCode})`));
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(2000) });
      await response.arrayBuffer();
      if (response.status === 200) return;
      lastProblem = `status ${response.status}`;
    } catch (error) {
      lastProblem = (error as Error).message;
    }
    await sleep(100);
  }
  throw new Error(`${child.name} not ready at ${url} within ${timeoutMs} ms (${lastProblem}); ${describeFailure(child, "last output")}`);
}

/** A port free on 127.0.0.1 right now (for children that cannot announce theirs). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => server.once("error", reject).listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/**
 * Starts the benchmark's zero-latency upstream (`upstream.ts`, its own process) and waits until it
 * answers: the child and its origin, `http://127.0.0.1:PORT`.
 */
export async function startUpstream(benchDir: string): Promise<{ child: Child; origin: string }> {
  const child = startChild("upstream", [path.join(benchDir, "gateway/upstream.ts")]);
  try {
    const origin = `http://127.0.0.1:${await readPortLine(child, 15_000)}`;
    await waitForOk(`${origin}/health`, child, 10_000);
    return { child, origin };
  } catch (error) {
    await child.stop();
    throw error;
  }
}
