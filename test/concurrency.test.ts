/**
 * Slots, the wait queue, keep-alives and cancellation, on real generations.
 * Long generations use the random-weights Llama-2 model: with a 32,000-token vocabulary it
 * practically never samples end-of-sequence, so it runs to max_tokens.
 */
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { modelsDir, postJson, startTestServer, storiesModel, type TestServer } from "./helpers/server.ts";

const randomModel = path.join(modelsDir, "llama-2-tiny-random.gguf");

/** Opens a raw streaming request and returns a reader of its SSE lines with arrival times. */
async function openStream(test: TestServer, body: Record<string, unknown>, signal?: AbortSignal) {
  const response = await fetch(`${test.baseURL}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${test.key}` },
    body: JSON.stringify({ ...body, stream: true }),
    signal,
  });
  const lines: Array<{ at: number; line: string }> = [];
  const decoder = new TextDecoder();
  let buffer = "";
  const reader = response.body!.getReader();
  /** Reads until `until` holds for the lines so far, or the stream ends. */
  const readUntil = async (until: (seen: typeof lines) => boolean = () => false) => {
    while (!until(lines)) {
      const { done, value } = await reader.read();
      if (done) return true;
      buffer += decoder.decode(value, { stream: true });
      let newline = buffer.indexOf("\n");
      while (newline !== -1) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        if (line.trim() !== "") lines.push({ at: performance.now(), line });
        newline = buffer.indexOf("\n");
      }
    }
    return false;
  };
  const contentLines = () => lines.filter((entry) => entry.line.startsWith("data: {") && entry.line.includes('"content":"') && !entry.line.includes('"content":""'));
  return { response, lines, readUntil, contentLines, cancel: () => reader.cancel() };
}

function completionLogs(test: TestServer) {
  return test.logs().filter((entry) => entry.msg === "chat completion");
}

describe("continuous batching", () => {
  let test: TestServer;
  before(async () => {
    test = await startTestServer({ flags: { parallel: "4", models: [storiesModel, `random=${randomModel}`] } });
  });
  after(async () => {
    await test?.close();
  });

  it("generates 4 concurrent streams together, not one after another", async () => {
    const streams = await Promise.all(
      [0, 1, 2, 3].map((index) =>
        openStream(test, { model: "random", messages: [{ role: "user", content: `Story ${index}` }], max_tokens: 300, temperature: 0 }),
      ),
    );
    await Promise.all(streams.map((stream) => stream.readUntil()));
    const spans = streams.map((stream) => {
      const content = stream.contentLines();
      assert.ok(content.length > 50, `stream produced ${content.length} chunks`);
      return { first: content[0]!.at, last: content.at(-1)!.at };
    });
    const latestStart = Math.max(...spans.map((span) => span.first));
    const earliestEnd = Math.min(...spans.map((span) => span.last));
    assert.ok(latestStart < earliestEnd, `every stream started before any finished (${latestStart} < ${earliestEnd})`);
    for (const stream of streams) assert.equal(stream.lines.at(-1)!.line, "data: [DONE]");
  });
});

describe("the wait queue", () => {
  let test: TestServer;
  before(async () => {
    test = await startTestServer({
      flags: { parallel: "1", queue_size: "1", keep_alive_interval: "0.05", models: [storiesModel, `random=${randomModel}`] },
    });
  });
  after(async () => {
    await test?.close();
  });

  it("queues, keeps waiting streams alive, refuses overflow with 503, and frees the slot on disconnect", async () => {
    const long = { model: "random", messages: [{ role: "user", content: "Go" }], max_tokens: 1500, temperature: 1 };
    const holderAbort = new AbortController();
    const holder = await openStream(test, long, holderAbort.signal);
    await holder.readUntil((lines) => lines.length >= 3);

    // The second request waits for the slot, receiving SSE comments meanwhile.
    const waiter = await openStream(test, { model: "random", messages: [{ role: "user", content: "Hi" }], max_tokens: 5, temperature: 0 });
    assert.equal(waiter.response.status, 200);
    await waiter.readUntil((lines) => lines.filter((entry) => entry.line.startsWith(":")).length >= 2);
    assert.ok(waiter.lines.every((entry) => entry.line.startsWith(":")), "only keep-alive comments while waiting");

    // The queue holds one: a third is refused at once, before any stream starts.
    const refused = await postJson(
      `${test.baseURL}/chat/completions`,
      { model: "random", messages: [{ role: "user", content: "Hi" }], max_tokens: 5, stream: true },
      { authorization: `Bearer ${test.key}` },
    );
    assert.equal(refused.status, 503, refused.text);
    assert.equal(refused.body.error.code, "engine_overloaded");
    assert.equal(refused.body.error.type, "service_unavailable");
    assert.ok(Number(refused.headers.get("retry-after")) >= 1);

    // The holder disconnects: its generation stops and the waiter is served.
    const received = holder.contentLines().length;
    holderAbort.abort();
    const ended = await waiter.readUntil();
    assert.ok(ended);
    assert.equal(waiter.lines.at(-1)!.line, "data: [DONE]");
    assert.ok(waiter.contentLines().length > 0);

    await delay(50);
    const cancelled = completionLogs(test).find((entry) => entry.model === "random" && entry.finish_reason === "cancelled");
    assert.ok(cancelled, "the cancelled generation was logged");
    assert.equal(cancelled.finish_reason, "cancelled");
    const generated = cancelled.completion_tokens as number;
    assert.ok(generated < 1500, `generation stopped early (${generated} tokens)`);
    assert.ok(generated >= received, `counted at least what was sent (${generated} >= ${received})`);
  });

  it("refuses with 503 the same way without streaming", async () => {
    const holderAbort = new AbortController();
    const holder = await openStream(test, { model: "random", messages: [{ role: "user", content: "Go" }], max_tokens: 1500, temperature: 1 }, holderAbort.signal);
    await holder.readUntil((lines) => lines.length >= 2);
    const body = { model: "random", messages: [{ role: "user", content: "Hi" }], max_tokens: 3 };
    const queued = postJson(`${test.baseURL}/chat/completions`, body, { authorization: `Bearer ${test.key}` });
    await delay(100);
    const refused = await postJson(`${test.baseURL}/chat/completions`, body, { authorization: `Bearer ${test.key}` });
    assert.equal(refused.status, 503);
    assert.ok(refused.headers.get("retry-after"));
    holderAbort.abort();
    const served = await queued;
    assert.equal(served.status, 200, served.text);
    assert.equal(served.body.choices[0].finish_reason, "length");
  });

  it("cancels a non-streamed generation whose client went away", async () => {
    const before = completionLogs(test).length;
    const abort = new AbortController();
    const request = fetch(`${test.baseURL}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${test.key}` },
      body: JSON.stringify({ model: "random", messages: [{ role: "user", content: "Go" }], max_tokens: 3000, temperature: 1 }),
      signal: abort.signal,
    });
    await delay(150);
    abort.abort();
    await assert.rejects(request);
    for (let attempt = 0; attempt < 100 && completionLogs(test).length === before; attempt++) await delay(20);
    const entry = completionLogs(test).at(-1)!;
    assert.equal(entry.finish_reason, "cancelled");
    assert.ok((entry.completion_tokens as number) < 3000);
    // The slot is free again: a request is served at once.
    const next = await test.client.chat.completions.create({ model: "random", messages: [{ role: "user", content: "Hi" }], max_tokens: 3 });
    assert.equal(next.choices[0]!.finish_reason, "length");
  });
});
