/**
 * Turnpike as the gateway benchmark runs it: its own process (`bin/turnpike.js serve`), a temp
 * data dir with SQLite, one upstream model in front of the benchmark's upstream, and two keys
 * made with the CLI: an operator key (not metered), a key of an account on a plan (metered:
 * auth, rate limits, hold, settle, usage record) and a key of a second account on a plan without
 * rate limits (metering alone), so that one run measures what each part adds.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import pg from "pg";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { freePort, startChild, waitForOk, type Child } from "./processes.ts";

const run = promisify(execFile);
/** Limits far above what the benchmark can send, so that they are checked but never bite. */
const GENEROUS_RPM = 1_000_000_000;
// Within a PostgreSQL integer column (the plans table), so that the same set-up runs on both stores.
const GENEROUS_TPM = 2_000_000_000;
const EMAIL = "bench@example.com";
const UNLIMITED_EMAIL = "bench-unlimited@example.com";

export type TurnpikeUnderTest = {
  child: Child;
  origin: string;
  operatorKey: string;
  meteredKey: string;
  /** A metered key of another account whose plan and key have no RPM/TPM limits. */
  unlimitedKey: string;
  dataDir: string;
  /** The metered account's balance in credit units, read with the CLI (undefined if that fails). */
  meteredBalance: () => Promise<number | undefined>;
  cleanup: () => Promise<void>;
};

/** Where Turnpike keeps its state in the benchmark: SQLite in the data dir (url ""), or a PostgreSQL schema of its own. */
export type BenchDatabase = { url: string; cleanup: () => Promise<void> };
export const SQLITE: BenchDatabase = { url: "", cleanup: async () => {} };

/** A fresh schema on the PostgreSQL at `url`, dropped at cleanup. */
export async function postgresSchema(url: string): Promise<BenchDatabase> {
  const schema = `turnpike_gateway_${randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query(`CREATE SCHEMA ${schema}`);
  await admin.end();
  return {
    url: `${url}${url.includes("?") ? "&" : "?"}options=${encodeURIComponent(`-c search_path=${schema}`)}`,
    cleanup: async () => {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      await client.query(`DROP SCHEMA ${schema} CASCADE`);
      await client.end();
    },
  };
}

/** The config file's content: one upstream model (priced, so that metering moves credit) and one plan. */
export function turnpikeConfig(upstreamOrigin: string, port: number, dataDir: string, limits = true): Record<string, unknown> {
  return {
    host: "127.0.0.1",
    port,
    data_dir: dataDir,
    log_level: "warn",
    queue_size: 100_000,
    max_connections: 0,
    idle_timeout: 60,
    models: [
      {
        id: "bench",
        upstream: { kind: "openai", urls: [`${upstreamOrigin}/v1`], max_in_flight: 1024, health_interval: 60 },
        context_length: 4096,
        pricing: { prompt: 1000, completion: 2000 },
      },
    ],
    plans: [
      { id: "bench", name: "Bench", price: { amount: 0, currency: "usd" }, credit: 1_000_000_000_000, ...(limits ? { rpm: GENEROUS_RPM, tpm: GENEROUS_TPM } : {}) },
      { id: "bench-unlimited", name: "Bench without limits", price: { amount: 0, currency: "usd" }, credit: 1_000_000_000_000 },
    ],
  };
}

async function runCli(root: string, args: string[], databaseUrl: string): Promise<string> {
  try {
    const { stdout } = await run(process.execPath, [path.join(root, "bin/turnpike.js"), ...args], {
      cwd: root,
      timeout: 60_000,
      env: { ...process.env, TURNPIKE_CONFIG: "", TURNPIKE_DATABASE_URL: databaseUrl },
    });
    return stdout;
  } catch (error) {
    const failed = error as Error & { stderr?: string };
    throw new Error(`turnpike ${args.slice(0, 2).join(" ")} failed: ${(failed.stderr ?? failed.message).trim().split("\n").at(-1)}`);
  }
}

/**
 * Makes the keys with the CLI, starts `turnpike serve` and waits for `/ready`. Throws with the
 * reason (Turnpike's own stderr when it exits) when it does not come up within `timeoutMs`.
 */
/**
 * `limits`: the metered key and its plan have RPM/TPM limits (checked, never biting), as a real
 * account's would; false measures metering alone.
 */
export async function startTurnpike(
  root: string,
  upstreamOrigin: string,
  timeoutMs: number,
  database: BenchDatabase = SQLITE,
  limits = true,
  /** Node options before the CLI (`--inspect=…`) and more environment for `serve` (`MALLOC_ARENA_MAX`), for bench/memory.ts. */
  extra: { nodeArgs?: string[]; env?: NodeJS.ProcessEnv } = {},
): Promise<TurnpikeUnderTest> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-gateway-bench-"));
  const cleanup = async () => {
    fs.rmSync(dataDir, { recursive: true, force: true });
    await database.cleanup();
  };
  const cli = (root: string, args: string[]) => runCli(root, args, database.url);
  let child: Child | undefined;
  try {
    const port = await freePort();
    const configFile = path.join(dataDir, "config.json");
    fs.writeFileSync(configFile, JSON.stringify(turnpikeConfig(upstreamOrigin, port, dataDir, limits), null, 2));
    const store = ["--data-dir", dataDir];
    await cli(root, ["accounts", "create", "--email", EMAIL, "--json", ...store]);
    await cli(root, ["plans", "grant", "--account", EMAIL, "--plan", "bench", "--config", configFile, ...store]);
    const metered = JSON.parse(
      await cli(root, ["keys", "create", "--name", "metered", "--account", EMAIL, ...(limits ? ["--rpm", String(GENEROUS_RPM), "--tpm", String(GENEROUS_TPM)] : []), "--json", ...store]),
    ) as { key: string };
    const operator = JSON.parse(await cli(root, ["keys", "create", "--name", "operator", "--json", ...store])) as { key: string };
    await cli(root, ["accounts", "create", "--email", UNLIMITED_EMAIL, "--json", ...store]);
    await cli(root, ["plans", "grant", "--account", UNLIMITED_EMAIL, "--plan", "bench-unlimited", "--config", configFile, ...store]);
    const unlimited = JSON.parse(await cli(root, ["keys", "create", "--name", "unlimited", "--account", UNLIMITED_EMAIL, "--json", ...store])) as { key: string };
    // TURNPIKE_BENCH_PROFILE_DIR: write a V8 CPU profile of Turnpike there when it stops (to see where its time goes).
    const profile = process.env.TURNPIKE_BENCH_PROFILE_DIR ? ["--cpu-prof", `--cpu-prof-dir=${process.env.TURNPIKE_BENCH_PROFILE_DIR}`] : [];
    child = startChild("turnpike", [...profile, ...(extra.nodeArgs ?? []), path.join(root, "bin/turnpike.js"), "serve", "--config", configFile], {
      cwd: root,
      // No drain delay: the bench stops the node with SIGTERM and waits 5 s for it to exit (and write its profile).
      env: { TURNPIKE_DRAIN_DELAY: "0", ...extra.env, TURNPIKE_CONFIG: "", TURNPIKE_DATABASE_URL: database.url },
      captureStdout: true,
    });
    const origin = `http://127.0.0.1:${port}`;
    await waitForOk(`${origin}/ready`, child, timeoutMs);
    const started = child;
    return {
      child,
      origin,
      operatorKey: operator.key,
      meteredKey: metered.key,
      unlimitedKey: unlimited.key,
      dataDir,
      meteredBalance: async () => {
        try {
          return (JSON.parse(await cli(root, ["accounts", "show", "--email", EMAIL, "--json", ...store])) as { balance: number }).balance;
        } catch {
          return undefined;
        }
      },
      cleanup: async () => {
        await started.stop();
        await cleanup();
      },
    };
  } catch (error) {
    await child?.stop();
    await cleanup();
    throw error;
  }
}
