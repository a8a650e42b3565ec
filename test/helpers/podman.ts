/**
 * Podman for the container test: the base images (scripts/container-base-images.sh, which also
 * writes the private containers.conf these machines need), commands run to completion, free ports,
 * and readiness polls. The test skips only where podman is not installed; CI installs it.
 */
import { execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import path from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { repoRoot } from "./server.ts";

export type CommandResult = { code: number | null; stdout: string; stderr: string };

function installed(command: string): boolean {
  try {
    execFileSync("sh", ["-c", `command -v ${command}`], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/** A skip reason, written loudly to stderr, when podman is missing; false otherwise. */
export function skipWithoutPodman(): string | false {
  if (installed("podman")) return false;
  const reason = "podman is not installed: the container image and compose tests did NOT run (apt-get install podman runc debootstrap podman-compose; .ci/run does)";
  process.stderr.write(`\n!!! ${reason}\n\n`);
  return reason;
}

/** Runs `command ...args` to completion; never throws on a failing exit code. */
export async function runCommand(command: string, args: string[], options: { env?: NodeJS.ProcessEnv; cwd?: string } = {}): Promise<CommandResult> {
  const child = spawn(command, args, { cwd: options.cwd ?? repoRoot, env: options.env ?? process.env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const [code] = (await once(child, "close")) as [number | null];
  return { code, stdout, stderr };
}

/** Runs it and fails with its output when it exits other than 0; returns stdout. */
export async function mustRun(command: string, args: string[], options: { env?: NodeJS.ProcessEnv; cwd?: string } = {}): Promise<string> {
  const result = await runCommand(command, args, options);
  if (result.code !== 0) {
    throw new Error(`${command} ${args.join(" ")} exited with ${result.code}\n${result.stdout.slice(-4000)}\n${result.stderr.slice(-4000)}`);
  }
  return result.stdout;
}

/**
 * Builds (or finds cached) the base images and returns the environment podman needs here
 * (CONTAINERS_CONF pointing at the private containers.conf the script writes).
 */
export async function prepareBaseImages(): Promise<NodeJS.ProcessEnv> {
  const stdout = await mustRun("bash", [path.join(repoRoot, "scripts", "container-base-images.sh")]);
  const match = /^export CONTAINERS_CONF=(.+)$/m.exec(stdout);
  if (!match) throw new Error(`container-base-images.sh did not print CONTAINERS_CONF:\n${stdout}`);
  return { ...process.env, CONTAINERS_CONF: match[1]!.trim() };
}

/**
 * Polls `url` until it answers 200, for at most `seconds` (generous: the CPU is shared). `alive`,
 * when given, is asked between polls and ends the wait early with its message when it returns one.
 */
export async function waitForOk(url: string, seconds: number, alive?: () => Promise<string | undefined>): Promise<void> {
  const deadline = Date.now() + seconds * 1000;
  let last = "no answer";
  while (Date.now() < deadline) {
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(5000) });
      if (response.status === 200) return;
      last = `HTTP ${response.status}: ${(await response.text()).slice(0, 300)}`;
    } catch (error) {
      last = (error as Error).message;
    }
    const dead = await alive?.();
    if (dead !== undefined) throw new Error(`${url} will not be ready: ${dead}`);
    await delay(500);
  }
  throw new Error(`${url} was not ready within ${seconds} s (last: ${last})`);
}

/** Seconds since `started` (a `performance.now()`), one decimal. */
export function secondsSince(started: number): string {
  return ((performance.now() - started) / 1000).toFixed(1);
}
