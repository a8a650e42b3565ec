/**
 * Starts a real Turnpike server for a test: a temporary data dir, the tiny stories260K model
 * on one llama.cpp thread, port 0, an API key, and the official `openai` client pointed at it.
 * Logs are captured in memory so tests can read them.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";
import { pino } from "pino";
import { loadSettings } from "../../src/config/load.ts";
import { startServer, type RunningServer, type StartServerOptions } from "../../src/main.ts";
import { openStore } from "../../src/store/open.ts";
import { createApiKey } from "../../src/auth/api-keys.ts";

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const modelsDir = process.env.TURNPIKE_TEST_MODELS_DIR ?? path.resolve(repoRoot, "../shared/models");
export const storiesModel = path.join(modelsDir, "stories260K.gguf");
export const storiesChatmlModel = path.join(modelsDir, "stories260K-chatml.gguf");
/** Node 24 (the one running the tests), for child processes. */
export const nodeBinary = process.execPath;
export const cliPath = path.join(repoRoot, "bin", "turnpike.js");

export function temporaryDirectory(prefix = "turnpike-test-"): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

export type TestServer = {
  server: RunningServer;
  url: string;
  baseURL: string;
  key: string;
  keyId: string;
  dataDir: string;
  client: OpenAI;
  /** Every log line written so far, parsed. */
  logs: () => Array<Record<string, unknown>>;
  /** Raw log text. */
  logText: () => string;
  close(): Promise<void>;
};

export type TestServerOptions = {
  /** Settings as flags (`parallel: "1"`), on top of the test defaults. */
  flags?: Record<string, string | string[] | undefined>;
  /** A --config file (plans, model prices). */
  configFile?: string;
  /** Environment variables the settings read (Stripe keys, upstream API keys); none from the test process. */
  env?: Record<string, string | undefined>;
  /** Where the Stripe client calls (`startFakeStripeApi`'s port), instead of api.stripe.com. */
  stripeApi?: StartServerOptions["stripeApi"];
  /** Resolves image URL hosts instead of DNS (tests cannot reach public names). */
  imageHostResolver?: StartServerOptions["imageHostResolver"];
  /**
   * Engines that serve models instead of their entries' own (the fake engine, say), by model id
   * or a factory. A map given without `models` flags or a config file makes the models: one per
   * id, whose entry names a file never opened (the supplied engine serves it).
   */
  engines?: StartServerOptions["engines"];
};

/** `id=<id>.gguf` for each engine of a map: entries for the models it serves (the files are never opened). */
function suppliedModels(engines: TestServerOptions["engines"]): string[] | undefined {
  if (engines === undefined || typeof engines === "function") return undefined;
  return Object.keys(engines).map((id) => `${id}=${id}.gguf`);
}

export async function startTestServer(options: TestServerOptions = {}): Promise<TestServer> {
  const dataDir = temporaryDirectory();
  const settings = loadSettings({
    flags: {
      // A config file names its own models; supplied engines name theirs.
      ...(options.configFile === undefined ? { models: suppliedModels(options.engines) ?? [storiesModel] } : {}),
      port: "0",
      threads: "1",
      gpu: "cpu",
      parallel: "4",
      data_dir: dataDir,
      log_level: "info",
      // A standing lease (a quiet key that came back) closes 0.3 s after the key's last request
      // instead of 10 s: tests that wait for an account's holds to settle see it closed in time.
      standing_lease_idle: "0.3",
      ...options.flags,
    },
    env: options.env ?? {},
    configFile: options.configFile,
  });
  const database = await openStore({ dataDir, databaseUrl: settings.database_url });
  const created = await createApiKey(database, { name: "test" });
  await database.destroy();

  let logText = "";
  const sink = new Writable({
    write(chunk, _encoding, callback) {
      logText += chunk.toString();
      callback();
    },
  });
  const logger = pino({ level: settings.log_level }, sink);
  const server = await startServer(settings, logger, { stripeApi: options.stripeApi, imageHostResolver: options.imageHostResolver, engines: options.engines });
  await server.modelsSettled;
  const baseURL = `${server.url}/v1`;
  return {
    server,
    url: server.url,
    baseURL,
    key: created.key,
    keyId: created.id,
    dataDir,
    client: new OpenAI({ baseURL, apiKey: created.key, maxRetries: 0, timeout: 60_000 }),
    logs: () =>
      logText
        .split("\n")
        .filter((line) => line.trim() !== "")
        .map((line) => JSON.parse(line) as Record<string, unknown>),
    logText: () => logText,
    close: async () => {
      await server.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** POSTs JSON (or raw text) and returns status, headers and parsed body. */
export async function postJson(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Headers; body: any; text: string }> {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: response.status, headers: response.headers, body: parsed, text };
}

/** Reads an SSE response into its `data:` payloads and comment lines. */
export async function readSse(response: Response): Promise<{ events: string[]; comments: string[] }> {
  const text = await response.text();
  const events: string[] = [];
  const comments: string[] = [];
  for (const block of text.split("\n\n")) {
    for (const line of block.split("\n")) {
      if (line.startsWith("data: ")) events.push(line.slice(6));
      else if (line.startsWith(":")) comments.push(line.slice(1).trim());
    }
  }
  return { events, comments };
}
