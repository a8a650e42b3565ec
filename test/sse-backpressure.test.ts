/**
 * SSE backpressure (issue 9, rows 10 and 11): a client that stops reading a stream pauses its
 * generation once the socket's buffer is full, and is cut after `--stall-timeout`, billed for
 * exactly what was generated. Before, the server generated the whole stream into memory
 * (12.6 MB for one n=8, top_logprobs=20 stream). Real server, real model, real SQLite, a raw
 * TCP client that stops reading.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import type { Kysely, Selectable } from "kysely";
import { createAccount } from "../src/accounts/accounts.ts";
import { createApiKey } from "../src/auth/api-keys.ts";
import { grantPlan } from "../src/billing/grant-plan.ts";
import { checkLedger } from "../src/billing/ledger.ts";
import { findPlan } from "../src/billing/plans-store.ts";
import { costOf } from "../src/protocol/price.ts";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

const pricing = { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 };
const CHOICES = 8;
const MAX_TOKENS = 1_900;

function writeConfig(): string {
  const file = path.join(temporaryDirectory(), "turnpike.json");
  fs.writeFileSync(
    file,
    JSON.stringify({
      models: [{ id: "story", path: storiesModel, pricing }],
      plans: [{ id: "funded", name: "Funded", price: { amount: 100, currency: "usd" }, credit: 10_000_000 }],
    }),
  );
  return file;
}

/**
 * Sends a streamed request over a raw socket, reads until the first event arrives, then stops
 * reading (the socket is paused: the kernel's buffers fill, then the server's).
 */
async function streamThenStopReading(url: string, key: string, body: unknown): Promise<net.Socket> {
  const { hostname, port } = new URL(url);
  const payload = JSON.stringify(body);
  const socket = net.connect(Number(port), hostname);
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  socket.on("error", () => {});
  socket.write(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: ${hostname}:${port}\r\nAuthorization: Bearer ${key}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`,
  );
  await new Promise<void>((resolve, reject) => {
    let received = "";
    const onData = (chunk: Buffer) => {
      received += chunk.toString("latin1");
      if (!received.includes("\r\n\r\n")) return;
      assert.match(received, /^HTTP\/1\.1 200/, received.slice(0, 300));
      if (!received.includes("data: ")) return;
      socket.off("data", onData);
      socket.pause();
      resolve();
    };
    socket.on("data", onData);
    socket.once("close", () => reject(new Error(`closed before the stream began: ${received.slice(0, 300)}`)));
  });
  return socket;
}

describe("SSE backpressure", () => {
  let test: TestServer;
  let database: Kysely<Database>;

  before(async () => {
    test = await startTestServer({ configFile: writeConfig(), flags: { stall_timeout: "2" } });
    database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
  });
  after(async () => {
    await database?.destroy();
    await test?.close();
  });

  it("pauses a stream whose client stops reading, cuts it after the stall timeout and bills exactly what was generated", async (t) => {
    const account = await createAccount(database, { email: `stall-${Math.random().toString(36).slice(2)}@example.com` });
    await grantPlan(database, { accountId: account.id, plan: (await findPlan(database, "funded"))!, source: `test:${account.id}` });
    const key = await createApiKey(database, { name: "stall", accountId: account.id });
    const socket = await streamThenStopReading(test.url, key.key, {
      model: "story",
      messages: [{ role: "user", content: "Tell me a story" }],
      stream: true,
      n: CHOICES,
      logprobs: true,
      top_logprobs: 20,
      max_tokens: MAX_TOKENS,
      // The end-of-sequence token banned: unpaused, every choice runs to max_tokens.
      logit_bias: { "2": -100 },
    });
    try {
      // The request's usage record appears once it ended (cut, or finished when nothing paused it).
      let record: Selectable<Database["usage_records"]> | undefined;
      for (let attempt = 0; attempt < 1_200 && record === undefined; attempt++) {
        await delay(100);
        record = await database.selectFrom("usage_records").selectAll().where("account_id", "=", account.id).executeTakeFirst();
      }
      assert.ok(record !== undefined, "the request ended within two minutes");
      const generated = Number(record.completion_tokens);
      assert.equal(record.status, 499, `cut as a client that left, not finished (${generated} tokens generated)`);
      assert.equal(record.finish_reason, "cancelled");
      assert.ok(generated < (CHOICES * MAX_TOKENS) / 2, `generation paused: ${generated} of ${CHOICES * MAX_TOKENS} tokens generated`);
      assert.ok(generated > 0);
      // Billed exactly for what was generated, and the hold settled.
      const usage = { promptTokens: Number(record.prompt_tokens), cachedPromptTokens: Number(record.cached_prompt_tokens), completionTokens: generated };
      const cost = costOf({ prompt: pricing.prompt, cachedPrompt: pricing.cached_prompt, completion: pricing.completion }, usage);
      assert.equal(Number(record.cost), cost);
      const books = await checkLedger(database, account.id);
      assert.equal(books.activeHolds, 0, "the hold was settled");
      assert.equal(books.balance, books.sumOfEntries);
      assert.equal(books.balance, 10_000_000 - cost);
      // The cut is logged, with what the server still held for the client: bounded, not the stream.
      const cut = test.logs().find((line) => line.msg === "stream cut: the client stopped reading");
      assert.ok(cut !== undefined, "the cut was logged");
      t.diagnostic(`${generated} of ${CHOICES * MAX_TOKENS} tokens generated; ${String(cut.buffered_bytes)} bytes buffered at the cut`);
      assert.equal(cut.stall_timeout_s, 2);
      assert.ok(Number(cut.buffered_bytes) < 512 * 1024, `buffered ${cut.buffered_bytes} bytes at the cut`);
      // The connection was dropped: reading again ends quickly.
      const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
      socket.resume();
      await Promise.race([closed, delay(10_000).then(() => assert.fail("the server did not drop the stalled connection"))]);
    } finally {
      socket.destroy();
    }
  });
});
