/**
 * The fault-injecting upstream does what each step says, as seen by a plain HTTP client.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { request } from "undici";
import { answerOf, FAULT_END_OF_TEXT_ID, FaultUpstream } from "./fault-upstream.ts";

const chat = (stream: boolean) => ({ model: "fault-model", messages: [{ role: "user", content: "hi" }], stream, stream_options: stream ? { include_usage: true } : undefined });

async function post(upstream: FaultUpstream, body: unknown, signal?: AbortSignal) {
  const response = await request(`${upstream.baseUrl}/chat/completions`, { method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json", authorization: "Bearer k" }, signal });
  return { status: response.statusCode, headers: response.headers, text: await response.body.text() };
}

describe("FaultUpstream", () => {
  let upstream: FaultUpstream;
  before(async () => (upstream = await FaultUpstream.start()));
  after(() => upstream.close());

  it("streams a fixed reply with a finish, a usage chunk and [DONE]", async () => {
    const answer = await post(upstream, chat(true));
    assert.equal(answer.status, 200);
    const events = answer.text.split("\n\n").filter(Boolean).map((event) => event.replace(/^data: /, ""));
    assert.equal(events.at(-1), "[DONE]");
    const chunks = events.slice(0, -1).map((event) => JSON.parse(event));
    assert.equal(chunks.map((chunk) => chunk.choices[0]?.delta?.content ?? "").join(""), "Hello there!");
    assert.equal(chunks.at(-2).choices[0].finish_reason, "stop");
    assert.deepEqual(chunks.at(-1).usage, { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 });
    assert.equal(upstream.requests.at(-1)?.authorization, "Bearer k");
  });

  it("answers one JSON body when not streamed", async () => {
    const answer = await post(upstream, chat(false));
    const body = JSON.parse(answer.text);
    assert.equal(body.choices[0].message.content, "Hello there!");
    assert.equal(body.usage.total_tokens, 10);
  });

  it("answers an injected status with retry-after", async () => {
    upstream.script({ kind: "status", status: 429, retryAfter: "3" }, { kind: "status", status: 401 });
    const limited = await post(upstream, chat(true));
    assert.equal(limited.status, 429);
    assert.equal(limited.headers["retry-after"], "3");
    assert.equal((await post(upstream, chat(true))).status, 401);
  });

  it("cuts a stream after k chunks", async () => {
    upstream.script({ kind: "cut", afterChunks: 1 });
    await assert.rejects(post(upstream, chat(true)));
    assert.equal(upstream.requests.at(-1)?.closedByClient, false);
  });

  it("sends garbage after good chunks", async () => {
    upstream.script({ kind: "garbage", afterChunks: 1 });
    const answer = await post(upstream, chat(true));
    assert.match(answer.text, /data: \{not json at all/);
  });

  it("hangs before headers and sees the client close the connection", async () => {
    upstream.script({ kind: "hang" });
    const controller = new AbortController();
    const pending = post(upstream, chat(true), controller.signal);
    const count = upstream.requests.length + 1;
    await upstream.waitForRequests(count);
    controller.abort();
    await assert.rejects(pending);
    await upstream.requests[count - 1]!.clientClosed;
    assert.equal(upstream.requests[count - 1]!.closedByClient, true);
  });

  it("delays the first token after the headers", async () => {
    upstream.script({ kind: "complete", firstTokenDelayMs: 150 });
    const started = Date.now();
    const response = await request(`${upstream.baseUrl}/chat/completions`, { method: "POST", body: JSON.stringify(chat(true)), headers: { "content-type": "application/json" } });
    const headersAfter = Date.now() - started;
    await response.body.text();
    assert.ok(headersAfter < 120, `headers came after ${headersAfter} ms`);
    assert.ok(Date.now() - started >= 150);
  });

  it("switches /health between 200 and 503", async () => {
    assert.equal((await request(`${upstream.origin}/health`)).statusCode, 200);
    upstream.healthy = false;
    assert.equal((await request(`${upstream.origin}/health`)).statusCode, 503);
    upstream.healthy = true;
  });
});

describe("FaultUpstream's stop strings", () => {
  it("cuts an answer before the first stop string met, over pieces too, within max_tokens", () => {
    const story = ["Once", " upon", " a", " time"];
    assert.deepEqual(answerOf(story, undefined, []), { pieces: story, generated: 4, finishReason: "stop" });
    assert.deepEqual(answerOf(story, 2, []), { pieces: ["Once", " upon"], generated: 2, finishReason: "length" });
    assert.deepEqual(answerOf(story, undefined, [" a", "time"]), { pieces: ["Once", " upon"], generated: 3, finishReason: "stop", stopMet: " a" });
    // Met across two pieces: the first piece's part of it is held back too.
    assert.deepEqual(answerOf(story, undefined, ["on a"]), { pieces: ["Once", " up"], generated: 3, finishReason: "stop", stopMet: "on a" });
    // Whichever comes first: the limit here.
    assert.deepEqual(answerOf(story, 2, [" time"]), { pieces: ["Once", " upon"], generated: 2, finishReason: "length" });
  });

  const choicesOf = (text: string) =>
    text
      .split("\n\n")
      .filter((event) => event.startsWith("data: {"))
      .flatMap((event) => (JSON.parse(event.slice(6)) as { choices: Record<string, unknown>[] }).choices);
  const finishOf = (text: string) => choicesOf(text).find((choice) => choice.finish_reason !== null);
  const contentOf = (text: string) => choicesOf(text).map((choice) => (choice.delta as { content?: string }).content ?? "").join("");

  for (const [field, ownEnd] of [["stop_reason", null], ["matched_stop", FAULT_END_OF_TEXT_ID]] as const) {
    it(`names the stop string met in ${field}, streamed and not; an answer that ends otherwise says ${String(ownEnd)}`, async () => {
      const upstream = await FaultUpstream.start({ stopField: field });
      try {
        const stopped = await post(upstream, { ...chat(true), stop: ["!", "zzz"] });
        assert.equal(contentOf(stopped.text), "Hello there", "the stop string is not sent");
        assert.deepEqual(finishOf(stopped.text), { index: 0, delta: {}, logprobs: null, finish_reason: "stop", [field]: "!" });
        const whole = JSON.parse((await post(upstream, { ...chat(false), stop: "!" })).text) as { choices: Record<string, unknown>[] };
        assert.equal(whole.choices[0]!.message && (whole.choices[0]!.message as { content: string }).content, "Hello there");
        assert.equal(whole.choices[0]![field], "!");
        assert.equal(finishOf((await post(upstream, chat(true))).text)?.[field], ownEnd);
      } finally {
        await upstream.close();
      }
    });
  }
});
