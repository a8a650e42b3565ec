/**
 * Runs the real `turnpike` command as a child process (Node 24, `bin/turnpike.js`).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import net from "node:net";
import { cliPath, nodeBinary, repoRoot } from "./server.ts";

export type CommandResult = { code: number | null; stdout: string; stderr: string };

/** Runs `turnpike ...args` to completion. */
export async function runCli(args: string[], options: { env?: Record<string, string>; input?: string } = {}): Promise<CommandResult> {
  const child = spawn(nodeBinary, [cliPath, ...args], {
    cwd: repoRoot,
    env: { ...process.env, ...options.env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  child.stdin.end(options.input ?? "");
  const [code] = (await once(child, "close")) as [number | null];
  return { code, stdout, stderr };
}

export type ServeProcess = {
  child: ChildProcess;
  url: string;
  /** Everything written to stdout (JSON log lines) so far. */
  stdout: () => string;
  stderr: () => string;
  /** Sends a signal and waits for the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
};

/**
 * Starts `turnpike serve ...args` and waits until it logs that it listens. No drain delay unless
 * `--drain-delay` or `env` gives one: nothing balances onto a test's node, and the delay would
 * only slow every SIGTERM.
 */
export async function startServeProcess(args: string[], env: Record<string, string> = {}): Promise<ServeProcess> {
  const child = spawn(nodeBinary, [cliPath, "serve", "--port", "0", "--threads", "1", "--gpu", "cpu", ...args], {
    cwd: repoRoot,
    env: { ...process.env, TURNPIKE_DRAIN_DELAY: "0", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = once(child, "exit") as Promise<[number | null, string | null]>;
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve did not start: ${stderr}`)), 30_000);
    child.stdout!.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      const match = /"url":"(http:\/\/[^"]+)".*"msg":"turnpike listening"/.exec(stdout);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]!);
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`serve exited with ${code}: ${stderr}`));
    });
  });
  return {
    child,
    url,
    stdout: () => stdout,
    stderr: () => stderr,
    stop: async (signal = "SIGTERM") => {
      if (child.exitCode !== null) return child.exitCode;
      child.kill(signal);
      const [code] = await exited;
      return code;
    },
  };
}

/** A TCP port free on 127.0.0.1 right now. */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as net.AddressInfo;
  server.close();
  await once(server, "close");
  return port;
}
