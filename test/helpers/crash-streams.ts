/**
 * Streams followed the way a client sees them, for the `kill -9` tests and benchmarks: how many
 * content chunks (tokens) each delivered, and whether it got `[DONE]`; and an upstream that
 * streams at its own pace, so that timing is the upstream's, not the gateway's CPU's.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import type http from "node:http";
import path from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { FaultUpstream } from "./fault-upstream.ts";
import { runCli, startServeProcess, type ServeProcess } from "./process.ts";
import { modelsDir } from "./server.ts";

/** One request as its client saw it. */
export type Seen = {
  requestId: string;
  status: number;
  /** Content chunks received. */
  delivered: number;
  /** Whether `[DONE]` came. */
  done: boolean;
  /** `performance.now()` when the last chunk before `[DONE]` came, and when `[DONE]` did. */
  lastChunkAt?: number;
  doneAt?: number;
  /** Resolves when the connection ends. */
  ended: Promise<void>;
  /** A refusal's error code and `retry-after`. */
  code?: string;
  retryAfter?: string | null;
};

/** Whether an SSE `data: {chunk}` event carries content (a delivered token). */
export function carriesContent(event: string): boolean {
  const chunk = JSON.parse(event.slice(6)) as { choices?: Array<{ delta?: { content?: string } }> };
  return Boolean(chunk.choices?.[0]?.delta?.content);
}

/** Calls `onEvent` with each SSE event of `response` as it arrives, until the connection ends (or is reset: a killed server). */
export async function forEachSseEvent(response: Response, onEvent: (event: string) => void): Promise<void> {
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        onEvent(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
      }
    }
  } catch {
    // The server died: the connection is reset.
  }
}

/** Sends a streamed request and follows it to its end, counting content chunks (the client's count of delivered tokens). */
export async function send(url: string, key: string, model: string, maxTokens: number, index: number): Promise<Seen> {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    body: JSON.stringify({ model, messages: [{ role: "user", content: `Go ${index}` }], max_tokens: maxTokens, stream: true }),
  });
  const seen: Seen = { requestId: response.headers.get("x-request-id") ?? "", status: response.status, delivered: 0, done: false, ended: Promise.resolve() };
  if (response.status !== 200) {
    const body = (await response.json()) as { error?: { code?: string } };
    seen.code = body.error?.code;
    seen.retryAfter = response.headers.get("retry-after");
    return seen;
  }
  seen.ended = forEachSseEvent(response, (event) => {
    if (event === "data: [DONE]") {
      seen.done = true;
      seen.doneAt = performance.now();
    }
    if (!event.startsWith("data: {")) return;
    seen.lastChunkAt = performance.now();
    if (carriesContent(event)) seen.delivered++;
  });
  return seen;
}

/**
 * An upstream that streams one content chunk every `pace` ms until `max_tokens`, then finishes:
 * the pace is the upstream's, whatever the gateway's CPU does.
 */
export async function pacedUpstream(paceMs: number): Promise<FaultUpstream> {
  return FaultUpstream.start({
    model: "paced",
    routes: {
      "POST /v1/chat/completions": (body: unknown, response: http.ServerResponse) => {
        const limits = body as { max_tokens?: number; max_completion_tokens?: number };
        const maxTokens = Number(limits.max_completion_tokens ?? limits.max_tokens ?? 16);
        const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
          id: "chatcmpl-paced",
          object: "chat.completion.chunk",
          created: 0,
          model: "paced",
          choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
        });
        response.writeHead(200, { "content-type": "text/event-stream" });
        const write = (payload: unknown) => response.write(`data: ${typeof payload === "string" ? payload : JSON.stringify(payload)}\n\n`);
        write(chunk({ role: "assistant", content: "" }));
        void (async () => {
          for (let sent = 0; sent < maxTokens; sent++) {
            await delay(paceMs);
            if (response.destroyed) return;
            write(chunk({ content: ` w${sent}` }));
          }
          write(chunk({}, "length"));
          write("[DONE]");
          response.end();
        })();
      },
    },
  });
}


/** A `turnpike serve` process on the random tiny model, with an account on a big plan and its key, made with the CLI as an operator would. */
export type FundedNode = {
  first: ServeProcess;
  /** Runs the CLI on the same data directory and database; fails the test unless it exits 0. */
  cli: (args: string[]) => Promise<string>;
  accountId: string;
  key: string;
  configFile: string;
  /** The arguments it was served with: a second node (after the crash) takes the same. */
  serve: string[];
};

/**
 * Starts a node for a crash test: `turnpike serve` with a config of the random tiny model at
 * `pricing` and a plan of `credit`, `serveArgs` after the defaults (`--database-url` is added from
 * `store`), an account granted that plan and a key of it; resolves once the node is ready.
 */
export async function startFundedNode(options: {
  dataDir: string;
  /** `--database-url <url>` for PostgreSQL; empty for SQLite. */
  store: string[];
  pricing: Record<string, number>;
  credit: number;
  email: string;
  serveArgs: string[];
}): Promise<FundedNode> {
  const configFile = path.join(options.dataDir, "turnpike.json");
  fs.writeFileSync(
    configFile,
    JSON.stringify({
      models: [{ id: "random", path: path.join(modelsDir, "llama-2-tiny-random.gguf"), pricing: options.pricing }],
      plans: [{ id: "big", name: "Big", price: { amount: 100, currency: "usd" }, credit: options.credit }],
    }),
  );
  const serve = ["--config", configFile, "--data-dir", options.dataDir, "--context-size", "4096", ...options.serveArgs, ...options.store];
  const first = await startServeProcess(serve);
  const cli = async (args: string[]) => {
    const result = await runCli([...args, "--data-dir", options.dataDir, ...options.store]);
    assert.equal(result.code, 0, result.stderr);
    return result.stdout;
  };
  const account = JSON.parse(await cli(["accounts", "create", "--email", options.email, "--json"])) as { id: string };
  await cli(["plans", "grant", "--account", options.email, "--plan", "big", "--config", configFile]);
  const key = JSON.parse(await cli(["keys", "create", "--account", options.email, "--json"])) as { key: string };
  for (let attempt = 0; attempt < 200 && (await fetch(`${first.url}/ready`)).status !== 200; attempt++) await delay(50);
  return { first, cli, accountId: account.id, key: key.key, configFile, serve };
}
