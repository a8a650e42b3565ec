/**
 * For the benchmarks that call Turnpike beside a peer: Turnpike in its own process (this Node,
 * `bin/turnpike.js serve`), a temporary data dir, an operator key made by the CLI; resolves once
 * `/ready` answers. `cleanup` stops it and removes the data dir.
 */
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { freePort, startChild, waitForOk, type Child } from "./gateway/processes.ts";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const run = promisify(execFile);

export type TurnpikeChild = { child: Child; origin: string; key: string; cleanup: () => Promise<void> };

/** `serveArgs` gives what follows `serve` (the data dir and port are chosen here). */
export async function startTurnpikeChild(options: {
  tempPrefix: string;
  serveArgs: (dataDir: string, port: number) => string[];
  readyTimeoutMs?: number;
}): Promise<TurnpikeChild> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), options.tempPrefix));
  let child: Child | undefined;
  const cleanup = async () => {
    await child?.stop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  };
  try {
    const port = await freePort();
    const cli = path.join(root, "bin/turnpike.js");
    const { stdout } = await run(process.execPath, [cli, "keys", "create", "--name", "operator", "--json", "--data-dir", dataDir], {
      cwd: root,
      timeout: 60_000,
      env: { ...process.env, TURNPIKE_CONFIG: "" },
    });
    const key = (JSON.parse(stdout) as { key: string }).key;
    child = startChild("turnpike", [cli, "serve", ...options.serveArgs(dataDir, port)], { cwd: root, env: { TURNPIKE_DRAIN_DELAY: "0", TURNPIKE_CONFIG: "" }, captureStdout: true });
    const origin = `http://127.0.0.1:${port}`;
    await waitForOk(`${origin}/ready`, child, options.readyTimeoutMs ?? 60_000);
    return { child, origin, key, cleanup };
  } catch (error) {
    await cleanup();
    throw error;
  }
}
