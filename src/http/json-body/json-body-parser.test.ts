/**
 * Large JSON bodies are parsed, and chat requests validated, in a worker thread: the worker's
 * answers on its own, and a real server whose main thread never parses a multi-megabyte body.
 */
import { refusal } from "../../../test/helpers/api-error.ts";
import { pino } from "pino";
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { ApiError } from "../../protocol/errors.ts";
import { JsonBodyWorker, MAX_WAITING_BODIES, WORKER_BODY_BYTES } from "./json-body-parser.ts";
import { postJson, startTestServer, type TestServer } from "../../../test/helpers/server.ts";

const bytes = (value: unknown) => Buffer.from(typeof value === "string" ? value : JSON.stringify(value));
const chat = { model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 4 };


describe("the JSON body worker", () => {
  const worker = new JsonBodyWorker({ logger: pino({ level: "silent" }) });
  after(() => worker.close());

  it("answers a chat request validated, unknown fields dropped", async () => {
    const value = (await worker.parse(bytes({ ...chat, junk: "x".repeat(1000) }), { route: "/v1/chat/completions" }, "someone")) as Record<string, unknown>;
    assert.equal(value.model, "stories260K");
    assert.equal(value.junk, undefined);
  });

  it("refuses what the schema refuses, naming the field, as an ApiError", async () => {
    const error = await refusal(worker.parse(bytes({ ...chat, messages: Array.from({ length: 3000 }, () => ({ role: "user", content: "" })) }), { route: "/v1/chat/completions" }, "someone"));
    assert.equal(error.status, 400);
    assert.equal(error.param, "messages");
  });

  it("refuses text that is not JSON, and prototype poisoning, as invalid_json", async () => {
    assert.equal((await refusal(worker.parse(bytes('{"model": '), "none", "someone"))).code, "invalid_json");
    assert.equal((await refusal(worker.parse(bytes('{"a": {"__proto__": {"x": 1}}}'), "none", "someone"))).code, "invalid_json");
    assert.equal((await refusal(worker.parse(bytes('{"constructor": {"prototype": {"x": 1}}}'), "none", "someone"))).code, "invalid_json");
    assert.deepEqual(await worker.parse(bytes('{"constructor": "fine"}'), "none", "someone"), { constructor: "fine" });
  });

  it("refuses bodies past its queue with 503 server_busy", async () => {
    const body = bytes({ ...chat, messages: [{ role: "user", content: "x".repeat(2_000_000) }] });
    // Many owners: one owner alone may hold only its share (test/hostile-round-two-body.test.ts).
    const all = Array.from({ length: MAX_WAITING_BODIES + 4 }, (_, index) => worker.parse(Buffer.from(body), { route: "/v1/chat/completions" }, `owner ${index % 8}`).then(() => "parsed", (error: ApiError) => `${error.status} ${error.code}`));
    const outcomes = await Promise.all(all);
    assert.equal(outcomes.filter((outcome) => outcome === "parsed").length, MAX_WAITING_BODIES);
    assert.deepEqual(outcomes.slice(MAX_WAITING_BODIES), Array(4).fill("503 server_busy"));
    assert.equal(worker.waiting, 0);
  });
});

describe("a server's large bodies", () => {
  let test: TestServer;
  /** The longest text `JSON.parse` read on this (the server's main) thread since the last reset. */
  let longestParsed = 0;
  const parse = JSON.parse;
  before(async () => {
    test = await startTestServer();
    JSON.parse = function measuredParse(text: string, reviver?: (this: unknown, key: string, value: unknown) => unknown) {
      longestParsed = Math.max(longestParsed, String(text).length);
      return parse(text, reviver);
    };
  });
  after(async () => {
    JSON.parse = parse;
    await test?.close();
  });

  it("parses a small body on the main thread, where this test's measure sees it", async () => {
    longestParsed = 0;
    const body = JSON.stringify({ ...chat, messages: [{ role: "user", content: "x".repeat(10_000) }] });
    await postJson(`${test.baseURL}/chat/completions`, body, { authorization: `Bearer ${test.key}` });
    assert.ok(longestParsed >= body.length, `the measure saw ${longestParsed} characters of a ${body.length}-character body`);
  });

  it("refuses 300,000 messages (8.7 MB) without parsing them on the main thread", async () => {
    longestParsed = 0;
    const body = JSON.stringify({ ...chat, messages: Array.from({ length: 300_000 }, () => ({ role: "user", content: "" })) });
    const response = await postJson(`${test.baseURL}/chat/completions`, body, { authorization: `Bearer ${test.key}` });
    assert.equal(response.status, 400, response.text.slice(0, 300));
    assert.equal(response.body.error.param, "messages");
    assert.ok(longestParsed < WORKER_BODY_BYTES, `the main thread parsed ${longestParsed} characters`);
  });

  it("answers a large body that is not JSON with invalid_json, and serves a large valid one", async () => {
    const broken = await postJson(`${test.baseURL}/chat/completions`, `{"model": "stories260K", "messages": [${'"x",'.repeat(200_000)}`, { authorization: `Bearer ${test.key}` });
    assert.equal(broken.status, 400);
    assert.equal(broken.body.error.code, "invalid_json");
    longestParsed = 0;
    const completion = await test.client.chat.completions.create({
      model: "stories260K",
      max_tokens: 4,
      messages: [{ role: "user", content: "Once upon a time" }],
      // @ts-expect-error unknown fields are accepted and dropped: this one makes the body large
      padding: "y".repeat(WORKER_BODY_BYTES),
    });
    assert.equal(completion.choices[0]!.message.role, "assistant");
    assert.ok(completion.usage!.completion_tokens > 0);
    assert.ok(longestParsed < WORKER_BODY_BYTES, `the main thread parsed ${longestParsed} characters`);
  });

  it("checks tool-call arguments are JSON in the worker for a large body, and on the main thread for a small one", async () => {
    const call = (index: number, argumentsText: string) => ({ id: `c${index}`, type: "function", function: { name: "f", arguments: argumentsText } });
    const withCalls = (calls: unknown[]) => ({ ...chat, messages: [{ role: "user", content: "x" }, { role: "assistant", content: null, tool_calls: calls }] });
    longestParsed = 0;
    const large = await postJson(`${test.baseURL}/chat/completions`, withCalls(Array.from({ length: 36 }, (_, index) => call(index, JSON.stringify({ a: "a".repeat(250_000) })))), { authorization: `Bearer ${test.key}` });
    assert.equal(large.status, 400, large.text.slice(0, 300));
    assert.equal(large.body.error.code, "context_length_exceeded", "valid arguments, far too long for the context");
    assert.ok(longestParsed < WORKER_BODY_BYTES, `the main thread parsed ${longestParsed} characters`);
    for (const body of [withCalls([call(0, "{}"), call(1, "{not json")]), withCalls([call(0, JSON.stringify({ a: "a".repeat(200_000) })), call(1, `{"a": "${"b".repeat(100_000)}`)])]) {
      const response = await postJson(`${test.baseURL}/chat/completions`, body, { authorization: `Bearer ${test.key}` });
      assert.equal(response.status, 400, response.text.slice(0, 300));
      assert.equal(response.body.error.param, "messages[1].tool_calls[1].function.arguments");
      assert.match(response.body.error.message, /JSON text/);
    }
  });
});

