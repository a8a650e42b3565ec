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
import { stormOfCutRequests } from "./helpers/storm.ts";

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

describe("a storm of requests cut at random moments", () => {
  let test: TestServer;
  let closed = false;
  before(async () => {
    test = await startTestServer({ flags: { parallel: "2", queue_size: "4", queue_per_account: "4", keep_alive_interval: "0.05", models: [storiesModel, `random=${randomModel}`] } });
  });
  after(async () => {
    if (!closed) await test?.close();
  });

  /** The slot gauges of /metrics for the random model. */
  async function slotGauges(): Promise<{ busy: number; waiting: number; slots: number }> {
    const text = await (await fetch(`${test.url}/metrics`)).text();
    const read = (name: string) => Number(new RegExp(`^${name}\\{model="random"\\} (\\d+)$`, "m").exec(text)?.[1] ?? Number.NaN);
    return { busy: read("turnpike_engine_slots_busy"), waiting: read("turnpike_engine_queue_waiting"), slots: read("turnpike_engine_slots") };
  }

  it("answers each with 200, 503 or the cut, logs each admitted one once, and gives every slot back", async () => {
    const before = completionLogs(test).length;
    // One stream generates through the whole storm and is cut after it, so a cut while
    // generating happens whatever the storm's timing. It cannot finish first: it shares each
    // decoding step with the storm's one other running request, and the storm's admitted
    // requests (at most 5 at once, all sent within 100 ms) need fewer than 2,300 steps in all.
    const holderAbort = new AbortController();
    const holder = await openStream(test, { model: "random", messages: [{ role: "user", content: "Hold" }], max_tokens: 4000 }, holderAbort.signal);
    await holder.readUntil(() => holder.contentLines().length > 0);
    const outcomes = await stormOfCutRequests({
      baseURL: test.baseURL,
      key: test.key,
      requests: 40,
      seed: 20261122,
      maxStartDelayMs: 100,
      maxCutAfterMs: 150,
      body: (index, random) => ({ model: "random", messages: [{ role: "user", content: `Storm ${index}` }], max_tokens: 50 + Math.floor(random() * 400) }),
      check: ({ status, text, stream }) => {
        if (status === 200 && stream) assert.ok(text.trimEnd().endsWith("data: [DONE]"), `a stream that was not cut ends with [DONE]: ${text.slice(-200)}`);
        if (status !== 200) assert.equal(JSON.parse(text).error.code, "engine_overloaded", text);
      },
    });
    holderAbort.abort();
    const count = (outcome: number | string) => outcomes.filter((entry) => entry === outcome).length;
    assert.equal(count(200) + count(503) + count("cut"), 40, JSON.stringify(outcomes));

    // Every slot comes back, and nothing is left waiting.
    let gauges = await slotGauges();
    for (let attempt = 0; attempt < 100 && (gauges.busy !== 0 || gauges.waiting !== 0); attempt++) {
      await delay(50);
      gauges = await slotGauges();
    }
    assert.deepEqual(gauges, { busy: 0, waiting: 0, slots: 2 });
    // Every admitted request was logged once: the finished ones, and those cut while generating or waiting.
    const logged = completionLogs(test).slice(before);
    assert.ok(logged.length >= count(200), `${logged.length} completions logged for ${count(200)} finished`);
    assert.ok(logged.length <= 41 - count(503), `${logged.length} completions logged, at most one per admitted request`);
    assert.ok(logged.some((entry) => entry.finish_reason === "cancelled"), "the stream cut while generating was logged as cancelled");
    assert.equal(new Set(logged.map((entry) => entry.reqId)).size, logged.length, "no request is logged twice");
    const errors = test.logs().filter((entry) => (entry.level as number) >= 50);
    assert.deepEqual(errors, [], "a client going away is no server error");
    const statuses = test.logs().filter((entry) => entry.msg === "request" && entry.url === "/v1/chat/completions").map((entry) => entry.status as number);
    // A client may leave after the server sent everything: logged 200 or 503, counted here as cut.
    assert.ok(statuses.filter((status) => status === 200).length >= count(200), "every answered request is logged, streams included");
    assert.ok(statuses.filter((status) => status === 503).length >= count(503), "and every refused one");
    assert.ok(statuses.length <= 41, "and only once");
    assert.ok(statuses.filter((status) => status === 499).length > 0, "requests whose clients left are logged with status 499");
    const finished = await test.client.chat.completions.create({ model: "random", messages: [{ role: "user", content: "After" }], max_tokens: 5 });
    assert.equal(finished.usage?.completion_tokens, 5);
  });

  it("decodes concurrent streams in shared batches, and /metrics says how full they are", async () => {
    const counters = async () => {
      const text = await (await fetch(`${test.url}/metrics`)).text();
      const read = (name: string) => Number(new RegExp(`^${name}\\{model="random"\\} (\\d+)$`, "m").exec(text)?.[1] ?? Number.NaN);
      return { batches: read("turnpike_engine_batches_total"), sequences: read("turnpike_engine_batch_sequences_total"), tokens: read("turnpike_engine_batch_tokens_total") };
    };
    const before = await counters();
    const replies = await Promise.all(
      ["One", "Two"].map((content) => test.client.chat.completions.create({ model: "random", messages: [{ role: "user", content }], max_tokens: 60, temperature: 0 })),
    );
    for (const reply of replies) assert.equal(reply.usage?.completion_tokens, 60);
    const after = await counters();
    const batches = after.batches - before.batches;
    const sequences = after.sequences - before.sequences;
    // Two streams of 60 tokens: about 60 batches of both when they share, about 120 of one each when not.
    assert.ok(batches > 0 && sequences / batches >= 1.5, `${sequences} sequences in ${batches} batches`);
    assert.ok(after.tokens - before.tokens >= 120, "every generated token (but the last of each) and the prompts were decoded");
  });

  it("holds with n, log probabilities, tools and JSON mode in the storm too, and stops at once afterwards", async () => {
    const errorsBefore = test.logs().filter((entry) => (entry.level as number) >= 50).length;
    const outcomes = await stormOfCutRequests({
      baseURL: test.baseURL,
      key: test.key,
      requests: 30,
      seed: 42,
      maxStartDelayMs: 100,
      maxCutAfterMs: 200,
      body: (index, random) => ({
        model: "random",
        messages: [{ role: "user", content: `Mixed ${index}` }],
        max_tokens: 20 + Math.floor(random() * 150),
        n: 1 + Math.floor(random() * 3),
        ...(random() < 0.3 ? { logprobs: true, top_logprobs: 2 } : {}),
        ...(random() < 0.3 ? { response_format: { type: "json_object" } } : {}),
        ...(random() < 0.3
          ? { tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { a: { type: "string", maxLength: 5 } } } } }], tool_choice: "required" }
          : {}),
      }),
      check: ({ status, text, stream }) => {
        if (status === 200 && stream) assert.ok(text.trimEnd().endsWith("data: [DONE]") && !text.includes('data: {"error"'), text.slice(-300));
        if (status !== 200) assert.equal(JSON.parse(text).error.code, "engine_overloaded", text);
      },
    });
    let gauges = await slotGauges();
    for (let attempt = 0; attempt < 100 && (gauges.busy !== 0 || gauges.waiting !== 0); attempt++) {
      await delay(50);
      gauges = await slotGauges();
    }
    assert.deepEqual(gauges, { busy: 0, waiting: 0, slots: 2 });
    assert.equal(test.logs().filter((entry) => (entry.level as number) >= 50).length, errorsBefore, "no server error");

    // With nothing running, stopping does not wait out the 30 s grace period for connections
    // the clients abandoned but left open.
    const stopping = performance.now();
    await test.close();
    closed = true;
    assert.ok(performance.now() - stopping < 10_000, `stopped in ${Math.round(performance.now() - stopping)} ms`);
  });
});
