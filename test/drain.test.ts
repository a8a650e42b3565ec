/**
 * Draining as a load balancer needs it (`--drain-delay`, `--shutdown-timeout`), with the official
 * `openai` client over real HTTP, stories260K (and the tiny random model, which never stops on
 * its own) on llama.cpp:
 *
 * - during the drain delay `/ready` answers 503 `draining` while new requests are still served;
 * - a stream started before the stop runs to its end when it ends within the shutdown timeout;
 * - a stream still running at the timeout is cut with an error event and billed exactly for what
 *   it generated;
 * - the real `turnpike serve` process does all of it on SIGTERM and exits 0.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import type { Kysely } from "kysely";
import OpenAI from "openai";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { billedExactly, meteredKey } from "./helpers/metered.ts";
import { runCli, startServeProcess } from "./helpers/process.ts";
import { modelsDir, startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

const randomModel = path.join(modelsDir, "llama-2-tiny-random.gguf");
const pricing = { prompt: 1_000_000, cached_prompt: 1_000_000, completion: 2_000_000 };
const CREDIT = 100_000_000;

type Metered = { server: TestServer; database: Kysely<Database>; accountId: string; client: OpenAI; finish(): Promise<void> };

/** A server whose `story` (stories260K) and `random` models are priced, and a funded account's client. */
async function meteredServer(flags: Record<string, string> = {}): Promise<Metered> {
  const directory = temporaryDirectory();
  const configFile = path.join(directory, "turnpike.json");
  fs.writeFileSync(
    configFile,
    JSON.stringify({
      models: [
        { id: "story", path: storiesModel, pricing },
        { id: "random", path: randomModel, pricing },
      ],
      plans: [{ id: "funded", name: "Funded", price: { amount: 100, currency: "usd" }, credit: CREDIT }],
    }),
  );
  const server = await startTestServer({ configFile, flags: { context_size: "2048", ...flags } });
  const database = await openStore({ dataDir: server.dataDir, databaseUrl: "" });
  const { accountId, key } = await meteredKey(database, "funded");
  const client = new OpenAI({ baseURL: server.baseURL, apiKey: key, maxRetries: 0, timeout: 120_000 });
  return {
    server,
    database,
    accountId,
    client,
    finish: async () => {
      await database.destroy();
      fs.rmSync(server.dataDir, { recursive: true, force: true });
      fs.rmSync(directory, { recursive: true, force: true });
    },
  };
}

/** A stream that has delivered its first content chunk, and the rest of it, read on demand. */
async function startedStream(client: OpenAI, model: string, maxTokens: number) {
  const stream = await client.chat.completions.create({
    model,
    messages: [{ role: "user", content: "Tell me a story." }],
    max_tokens: maxTokens,
    stream: true,
    stream_options: { include_usage: true },
  });
  const iterator = stream[Symbol.asyncIterator]();
  let contentChunks = 0;
  for (;;) {
    const { value, done } = await iterator.next();
    assert.ok(!done, "the stream delivered content before ending");
    if ((value.choices[0]?.delta.content ?? "") !== "") {
      contentChunks++;
      break;
    }
  }
  return {
    /** Reads the rest: how it ended (its finish reason and usage, or the error that cut it) and the content chunks it delivered. */
    rest: async (): Promise<{ finishReason?: string | null; usage?: OpenAI.CompletionUsage; error?: unknown; contentChunks: number }> => {
      let finishReason: string | null | undefined;
      let usage: OpenAI.CompletionUsage | undefined;
      try {
        for (;;) {
          const { value, done } = await iterator.next();
          if (done) break;
          if ((value.choices[0]?.delta.content ?? "") !== "") contentChunks++;
          finishReason = value.choices[0]?.finish_reason ?? finishReason;
          if (value.usage) usage = value.usage;
        }
      } catch (error) {
        return { error, contentChunks };
      }
      return { finishReason, ...(usage === undefined ? {} : { usage }), contentChunks };
    },
  };
}

async function ready(url: string): Promise<{ status: number; body: { status: string } }> {
  const response = await fetch(`${url}/ready`);
  return { status: response.status, body: (await response.json()) as { status: string } };
}

describe("draining", () => {
  it("during the drain delay, /ready answers 503 draining while new requests are still served and a running stream goes on", async () => {
    const metered = await meteredServer();
    const { server, client } = metered;
    try {
      assert.equal((await ready(server.url)).status, 200);
      const running = await startedStream(client, "story", 200);
      // A delay far longer than the test: it ends when close() is called.
      const drained = server.server.drain(3_600_000);
      const readiness = await ready(server.url);
      assert.equal(readiness.status, 503);
      assert.equal(readiness.body.status, "draining");
      assert.equal((await fetch(`${server.url}/health`)).status, 200, "the process is still healthy");
      const answer = await client.chat.completions.create({ model: "story", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 16 });
      assert.ok(answer.choices[0]!.message.content!.length > 0, "a new request is served during the delay");
      const fresh = await startedStream(client, "story", 16);
      const freshEnd = await fresh.rest();
      assert.equal(freshEnd.error, undefined, "a new stream is served during the delay");
      assert.ok(freshEnd.usage !== undefined);
      const end = await running.rest();
      assert.equal(end.error, undefined);
      assert.ok(end.finishReason === "stop" || end.finishReason === "length", `the running stream ended normally: ${end.finishReason}`);
      const closing = server.server.close();
      await Promise.all([closing, drained]);
      const phases = server.logs().map((line) => line.msg);
      assert.ok(phases.some((message) => typeof message === "string" && message.startsWith("draining:")), "the drain is logged");
      assert.ok(phases.some((message) => typeof message === "string" && message.startsWith("stopped accepting:")), "the stop is logged");
      await billedExactly(metered.database, metered.accountId, CREDIT, pricing, 3);
    } finally {
      await server.server.close();
      await metered.finish();
    }
  });

  it("once it stops accepting, new requests get 503 and a stream started before runs to its end within the shutdown timeout", async () => {
    const metered = await meteredServer({ shutdown_timeout: "600" });
    const { server, client } = metered;
    try {
      const running = await startedStream(client, "random", 300);
      const closed = server.server.close();
      const refused = await client.chat.completions.create({ model: "story", messages: [{ role: "user", content: "Hi" }], max_tokens: 8 }).then(
        () => "served",
        (error: unknown) => (error instanceof OpenAI.APIConnectionError ? "connection refused" : error instanceof OpenAI.APIError ? `${error.status} ${error.code}` : String(error)),
      );
      assert.ok(refused === "503 shutting_down" || refused === "connection refused", `new work is refused (${refused})`);
      const end = await running.rest();
      assert.equal(end.error, undefined, "the stream was not cut");
      assert.equal(end.finishReason, "length");
      assert.equal(end.usage?.completion_tokens, 300, "it ran to its end");
      await closed;
      const { records } = await billedExactly(metered.database, metered.accountId, CREDIT, pricing, 1);
      assert.equal(records[0]!.completion_tokens, 300);
    } finally {
      await server.server.close();
      await metered.finish();
    }
  });

  it("a stream still running at the shutdown timeout is cut with a shutting_down error event and billed exactly for what it generated", async () => {
    // No grace at all: the stream is surely still running when the timeout comes, however fast the machine.
    const metered = await meteredServer({ shutdown_timeout: "0" });
    const { server, client } = metered;
    try {
      // The random model does not stop on its own: this stream outlasts the timeout.
      const running = await startedStream(client, "random", 1900);
      const closed = server.server.close();
      const end = await running.rest();
      assert.ok(end.error instanceof OpenAI.APIError, `the stream ended with an error event: ${String(end.error)}`);
      assert.equal(end.error.code, "shutting_down");
      await closed;
      const cutLog = server.logs().find((line) => typeof line.msg === "string" && line.msg.startsWith("cutting "));
      assert.ok(cutLog !== undefined, "the cut is logged");
      const { records } = await billedExactly(metered.database, metered.accountId, CREDIT, pricing, 1);
      const [record] = records;
      assert.equal(record!.finish_reason, "cancelled");
      assert.equal(record!.status, 503);
      assert.ok(record!.completion_tokens >= end.contentChunks, `billed at least the ${end.contentChunks} chunks delivered (${record!.completion_tokens} tokens)`);
      assert.ok(record!.completion_tokens < 1900, "billed what was generated, not what was asked");
    } finally {
      await server.server.close();
      await metered.finish();
    }
  });

  it("turnpike serve: a second signal cuts a running stream with a shutting_down error event and exits 1", async () => {
    const dataDir = temporaryDirectory();
    const key = JSON.parse((await runCli(["keys", "create", "--json", "--data-dir", dataDir])).stdout).key as string;
    // Long enough that only the second signal can end this stop.
    const serve = await startServeProcess(["--data-dir", dataDir, "--model", `random=${randomModel}`, "--drain-delay", "600", "--shutdown-timeout", "600"]);
    try {
      while ((await fetch(`${serve.url}/ready`)).status !== 200) await new Promise((resolve) => setTimeout(resolve, 50));
      const client = new OpenAI({ baseURL: `${serve.url}/v1`, apiKey: key, maxRetries: 0 });
      // As long as the context allows: still running when the second signal comes.
      const { context_length: contextLength } = (await client.models.retrieve("random")) as unknown as { context_length: number };
      const running = await startedStream(client, "random", contextLength - 64);
      const exited = serve.stop("SIGTERM");
      while (!serve.stdout().includes('"msg":"draining:')) await new Promise((resolve) => setTimeout(resolve, 10));
      serve.child.kill("SIGTERM");
      const end = await running.rest();
      assert.ok(end.error instanceof OpenAI.APIError, `the stream ended with an error event: ${String(end.error)}`);
      assert.equal(end.error.code, "shutting_down");
      assert.equal(await exited, 1, serve.stderr());
      assert.match(serve.stdout(), /"msg":"second signal: cutting running requests/);
    } finally {
      await serve.stop("SIGKILL");
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("turnpike serve on SIGTERM: /ready 503 while still serving for the drain delay, then stops accepting, finishes and exits 0", async () => {
    const dataDir = temporaryDirectory();
    const created = await runCli(["keys", "create", "--json", "--data-dir", dataDir]);
    const key = JSON.parse(created.stdout).key as string;
    // The delay only has to outlast a few local requests; the test waits for its end anyway.
    const serve = await startServeProcess(["--data-dir", dataDir, "--model", `story=${storiesModel}`, "--drain-delay", "20"]);
    try {
      while ((await fetch(`${serve.url}/ready`)).status !== 200) await new Promise((resolve) => setTimeout(resolve, 50));
      const client = new OpenAI({ baseURL: `${serve.url}/v1`, apiKey: key, maxRetries: 0 });
      const exited = serve.stop("SIGTERM");
      while (!serve.stdout().includes('"msg":"draining:')) await new Promise((resolve) => setTimeout(resolve, 10));
      const readiness = await ready(serve.url);
      assert.equal(readiness.status, 503);
      assert.equal(readiness.body.status, "draining");
      const answer = await client.chat.completions.create({ model: "story", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 16 });
      assert.ok(answer.choices[0]!.message.content!.length > 0, "served during the drain delay");
      assert.equal(await exited, 0, serve.stderr());
      const messages = serve
        .stdout()
        .split("\n")
        .filter((line) => line.startsWith("{"))
        .map((line) => (JSON.parse(line) as { msg: string }).msg);
      const phase = (prefix: string) => messages.findIndex((message) => message.startsWith(prefix));
      assert.ok(phase("draining:") >= 0 && phase("draining:") < phase("stopped accepting:"), "draining, then stopped accepting");
      assert.ok(phase("stopped accepting:") < phase("no request running:") && phase("no request running:") < phase("exit"), "then flushed, then exit");
      await assert.rejects(fetch(`${serve.url}/health`), "the port is closed after exit");
    } finally {
      await serve.stop("SIGKILL");
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
