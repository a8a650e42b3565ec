/**
 * Issue 19, row 5: an upstream that reports usage only at the end (kind `openai`) is read on after
 * a client leaves a whole reply before the usage chunk, and the request is billed what the
 * upstream reports, not an estimate; the upstream is read for a bounded time only, and a client
 * leaving mid-reply still closes the upstream request at once.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import type http from "node:http";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import OpenAI from "openai";
import { createAccount } from "../src/accounts/accounts.ts";
import { createApiKey } from "../src/auth/api-keys.ts";
import { grantCredit } from "../src/billing/ledger.ts";
import { openStore } from "../src/store/open.ts";
import { USAGE_AFTER_LEAVE_MS } from "../src/engines/openai-compatible/upstream-generation.ts";
import { FaultUpstream } from "./helpers/fault-upstream.ts";
import { startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";

/** What the upstream reports for the answer: far more than the two chunks of content show (hidden reasoning). */
const REPORTED = { prompt_tokens: 1234, completion_tokens: 5012, total_tokens: 6246, completion_tokens_details: { reasoning_tokens: 4990 } };

type Script = {
  /** Resolves when the upstream may send its usage chunk (never: it sends none and keeps the stream open). */
  usageWhen: Promise<void> | "never";
  /** Content chunks sent before the finish chunk (with `pauseAfter` a pause before the rest). */
  pieces: string[];
  pauseAfter?: number;
};

describe("a client that leaves before the usage chunk is billed the upstream's usage (issue 19, row 5)", () => {
  let upstream: FaultUpstream;
  let gateway: TestServer;
  let client: OpenAI;
  let script: Script = { usageWhen: Promise.resolve(), pieces: [] };
  /** The upstream side of each chat request: whether Turnpike closed it before the answer ended. */
  const requests: Array<{ closed: boolean; closedAt?: number }> = [];
  const configDir = temporaryDirectory("turnpike-usage-after-leave-");

  before(async () => {
    upstream = await FaultUpstream.start({
      model: "thinker",
      routes: {
        "POST /v1/chat/completions": (_body: unknown, response: http.ServerResponse) => {
          const seen: { closed: boolean; closedAt?: number } = { closed: false };
          requests.push(seen);
          let ended = false;
          response.on("close", () => {
            if (ended) return;
            seen.closed = true;
            seen.closedAt = performance.now();
          });
          const { usageWhen, pieces, pauseAfter } = script;
          void (async () => {
            response.writeHead(200, { "content-type": "text/event-stream" });
            const send = (payload: unknown) => {
              if (!response.destroyed) response.write(`data: ${typeof payload === "string" ? payload : JSON.stringify(payload)}\n\n`);
            };
            const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
              id: "chatcmpl-thinker",
              object: "chat.completion.chunk",
              created: 0,
              model: "thinker",
              choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
            });
            send(chunk({ role: "assistant", content: "" }));
            for (const [index, piece] of pieces.entries()) {
              if (index === pauseAfter) await delay(2000);
              send(chunk({ content: piece }));
            }
            send(chunk({}, "stop"));
            if (usageWhen === "never") return;
            await usageWhen;
            send({ id: "chatcmpl-thinker", object: "chat.completion.chunk", created: 0, model: "thinker", choices: [], usage: REPORTED });
            send("[DONE]");
            ended = true;
            response.end();
          })();
        },
      },
    });
    const configFile = path.join(configDir, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [
          {
            id: "thinker",
            context_length: 16384,
            pricing: { prompt: 1_000_000, completion: 1_000_000 },
            upstream: { kind: "openai", urls: [upstream.baseUrl], health_interval: 60 },
          },
        ],
      }),
    );
    gateway = await startTestServer({ configFile });
    // A metered account, so that the bill is a charge on its balance.
    const database = await openStore({ dataDir: gateway.dataDir, databaseUrl: "" });
    try {
      const account = await createAccount(database, { email: "thinker@example.com" });
      await grantCredit(database, { accountId: account.id, amount: 1_000_000, source: "test:usage-after-leave" });
      const key = await createApiKey(database, { name: "metered", accountId: account.id });
      client = new OpenAI({ baseURL: gateway.baseURL, apiKey: key.key, maxRetries: 0, timeout: 60_000 });
    } finally {
      await database.destroy();
    }
  });

  after(async () => {
    await gateway?.close();
    await upstream?.close();
    fs.rmSync(configDir, { recursive: true, force: true });
  });

  /** Streams a request with the official client and leaves once `leaveAfter` content chunks came. */
  async function leaveAfter(count: number): Promise<void> {
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { model: "thinker", messages: [{ role: "user", content: "Think hard." }], max_tokens: 8000, stream: true, stream_options: { include_usage: true } },
      { signal: controller.signal },
    );
    let received = 0;
    try {
      for await (const chunk of stream) {
        assert.equal(chunk.choices[0]?.finish_reason ?? null, null, "the client leaves before the finish and the usage");
        if (chunk.choices[0]?.delta.content) received++;
        if (received === count) controller.abort();
      }
    } catch {
      // The client's own abort.
    }
    assert.equal(received, count);
  }

  /** The usage record of the latest request cut by its client. */
  async function cutRecord(previous: number, waitMs: number) {
    const database = await openStore({ dataDir: gateway.dataDir, databaseUrl: "" });
    try {
      for (const deadline = performance.now() + waitMs; performance.now() < deadline; await delay(25)) {
        const records = await database.selectFrom("usage_records").selectAll().where("status", "=", 499).orderBy("created_at", "asc").execute();
        if (records.length > previous) return records.at(-1)!;
      }
      return undefined;
    } finally {
      await database.destroy();
    }
  }

  async function cutCount(): Promise<number> {
    const database = await openStore({ dataDir: gateway.dataDir, databaseUrl: "" });
    try {
      return (await database.selectFrom("usage_records").select("id").where("status", "=", 499).execute()).length;
    } finally {
      await database.destroy();
    }
  }

  it("bills exactly the usage the upstream reports after the client left", async () => {
    let sendUsage!: () => void;
    script = { usageWhen: new Promise<void>((resolve) => (sendUsage = resolve)), pieces: ["The answer", " is 42."] };
    const previous = await cutCount();
    await leaveAfter(2);
    // The client is gone before the upstream says its usage.
    await delay(500);
    sendUsage();
    const record = await cutRecord(previous, 10_000);
    assert.ok(record !== undefined, "the cut request was recorded");
    assert.equal(record.usage_source, "upstream");
    assert.equal(Number(record.prompt_tokens), REPORTED.prompt_tokens);
    assert.equal(Number(record.completion_tokens), REPORTED.completion_tokens);
    assert.equal(Number(record.cost), REPORTED.prompt_tokens + REPORTED.completion_tokens, "charged for what the upstream reported");
    assert.equal(requests.at(-1)!.closed, false, "the upstream's answer was read to its end");
  });

  it("bills an estimate when the upstream never reports, after a bounded wait, and closes the upstream request", async () => {
    script = { usageWhen: "never", pieces: ["The answer", " is 42."] };
    const previous = await cutCount();
    const leftAt = performance.now();
    await leaveAfter(2);
    const record = await cutRecord(previous, USAGE_AFTER_LEAVE_MS + 10_000);
    assert.ok(record !== undefined, "the cut request was recorded");
    assert.equal(record.usage_source, "estimated");
    assert.ok(Number(record.completion_tokens) >= 2 && Number(record.completion_tokens) < REPORTED.completion_tokens);
    const seen = requests.at(-1)!;
    for (let attempt = 0; attempt < 100 && !seen.closed; attempt++) await delay(50);
    assert.ok(seen.closed, "the upstream request was closed");
    assert.ok(seen.closedAt! - leftAt >= USAGE_AFTER_LEAVE_MS - 500, "after the wait for the usage, not before");
  });

  it("closes the upstream request at once when the client leaves mid-reply", async () => {
    script = { usageWhen: Promise.resolve(), pieces: ["The answer", " is", " 42."], pauseAfter: 1 };
    const previous = await cutCount();
    await leaveAfter(1);
    const leftAt = performance.now();
    const seen = requests.at(-1)!;
    for (let attempt = 0; attempt < 100 && !seen.closed; attempt++) await delay(20);
    assert.ok(seen.closed && seen.closedAt! - leftAt < 1500, "the upstream request was closed at once");
    const record = await cutRecord(previous, 10_000);
    assert.equal(record?.usage_source, "estimated");
  });
});
