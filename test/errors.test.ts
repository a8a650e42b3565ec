/**
 * Every error answers in the OpenAI envelope with the right status and a string `code`,
 * never a 500, and the server keeps serving after a burst of bad requests.
 */
import { assertError } from "./helpers/api-error.ts";
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import { postJson, startTestServer, type TestServer } from "./helpers/server.ts";

let test: TestServer;
let chatUrl: string;
let auth: Record<string, string>;

before(async () => {
  test = await startTestServer({ flags: { context_size: "256" } });
  chatUrl = `${test.baseURL}/chat/completions`;
  auth = { authorization: `Bearer ${test.key}` };
});
after(async () => {
  await test?.close();
});

const valid = { model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 4, temperature: 0 };

describe("request validation", () => {
  it("answers 400 invalid_json for a body that is not JSON", async () => {
    const response = await postJson(chatUrl, "{not json", auth);
    assertError(response, 400, "invalid_json", null);
    assert.equal(response.body.error.type, "invalid_request_error");
  });

  it("answers 400 for a body that is not an object", async () => {
    assertError(await postJson(chatUrl, "[1,2]", auth), 400, "invalid_request_error", null);
    assertError(await postJson(chatUrl, "42", auth), 400, "invalid_request_error", null);
  });

  const cases: Array<[string, Record<string, unknown>, string]> = [
    ["a missing model", { messages: valid.messages }, "model"],
    ["a model of the wrong type", { ...valid, model: 7 }, "model"],
    ["missing messages", { model: "stories260K" }, "messages"],
    ["empty messages", { ...valid, messages: [] }, "messages"],
    ["messages that are not an array", { ...valid, messages: "hi" }, "messages"],
    ["an unknown role", { ...valid, messages: [{ role: "wizard", content: "x" }] }, "messages[0].role"],
    ["content of the wrong type", { ...valid, messages: [{ role: "user", content: 5 }] }, "messages[0].content"],
    ["a tool message without tool_call_id", { ...valid, messages: [{ role: "tool", content: "x" }] }, "messages[0].tool_call_id"],
    ["temperature above 2", { ...valid, temperature: 2.5 }, "temperature"],
    ["temperature below 0", { ...valid, temperature: -0.1 }, "temperature"],
    ["temperature as a string", { ...valid, temperature: "hot" }, "temperature"],
    ["top_p above 1", { ...valid, top_p: 1.5 }, "top_p"],
    ["frequency_penalty below -2", { ...valid, frequency_penalty: -3 }, "frequency_penalty"],
    ["presence_penalty above 2", { ...valid, presence_penalty: 2.1 }, "presence_penalty"],
    ["max_tokens of 0", { ...valid, max_tokens: 0 }, "max_tokens"],
    ["max_tokens that is not an integer", { ...valid, max_tokens: 1.5 }, "max_tokens"],
    ["max_completion_tokens negative", { ...valid, max_tokens: undefined, max_completion_tokens: -1 }, "max_completion_tokens"],
    ["five stop sequences", { ...valid, stop: ["a", "b", "c", "d", "e"] }, "stop"],
    ["a stop of the wrong type", { ...valid, stop: 3 }, "stop"],
    ["a seed that is not an integer", { ...valid, seed: 1.5 }, "seed"],
    ["stream as a string", { ...valid, stream: "yes" }, "stream"],
    ["stream_options without stream", { ...valid, stream_options: { include_usage: true } }, "stream_options"],
  ];
  for (const [what, body, param] of cases) {
    it(`answers 400 naming '${param}' for ${what}`, async () => {
      const response = await postJson(chatUrl, body, auth);
      assertError(response, 400, response.body?.error?.code ?? "?", param);
      assert.equal(response.body.error.type, "invalid_request_error");
    });
  }

  it("ignores unknown fields", async () => {
    const response = await postJson(chatUrl, { ...valid, some_future_field: { a: 1 }, metadata: { x: "y" } }, auth);
    assert.equal(response.status, 200, response.text);
  });

  it("accepts null for optional fields, as SDKs send them", async () => {
    const response = await postJson(chatUrl, { ...valid, temperature: null, top_p: null, stop: null, seed: null, stream: null }, auth);
    assert.equal(response.status, 200, response.text);
  });
});

describe("features of later releases", () => {
  const cases: Array<[string, Record<string, unknown>, string]> = [
    ["the deprecated functions field", { functions: [{ name: "f", parameters: {} }] }, "functions"],
    ["the deprecated function_call field", { function_call: "auto" }, "function_call"],
  ];
  for (const [what, extra, param] of cases) {
    it(`answers 400 naming '${param}' for ${what}, never ignoring it`, async () => {
      const response = await postJson(chatUrl, { ...valid, ...extra }, auth);
      assertError(response, 400, "unsupported_parameter", param);
    });
  }

  it("answers 400 model_does_not_support_images naming the part for an image sent to a text-only model", async () => {
    const image = { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } };
    const response = await postJson(chatUrl, { ...valid, messages: [{ role: "user", content: [image] }] }, auth);
    assertError(response, 400, "model_does_not_support_images", "messages[0].content[0]");
  });

  it("accepts n=1, logprobs=false and response_format text", async () => {
    const response = await postJson(chatUrl, { ...valid, n: 1, logprobs: false, response_format: { type: "text" } }, auth);
    assert.equal(response.status, 200, response.text);
  });
});

describe("models and context", () => {
  it("answers 404 model_not_found for an unknown model", async () => {
    assertError(await postJson(chatUrl, { ...valid, model: "gpt-17" }, auth), 404, "model_not_found", "model");
  });

  it("answers 400 context_length_exceeded when prompt and completion do not fit", async () => {
    const response = await postJson(chatUrl, { ...valid, max_tokens: 250 }, auth);
    assertError(response, 400, "context_length_exceeded", "messages");
    assert.match(response.body.error.message, /maximum context length is 256 tokens/);
    const longPrompt = { ...valid, messages: [{ role: "user", content: "cat ".repeat(400) }] };
    assertError(await postJson(chatUrl, longPrompt, auth), 400, "context_length_exceeded");
  });

  it("refuses megabytes of messages without tokenizing them, saying how many tokens they are at least", async () => {
    const huge = { ...valid, messages: [{ role: "user", content: "cat ".repeat(1_000_000) }] };
    const response = await postJson(chatUrl, huge, auth);
    assertError(response, 400, "context_length_exceeded", "messages");
    // stories260K's longest token is 7 bytes of text (" story" and the like): 4,000,000 bytes are at least 571,429 tokens.
    assert.match(response.body.error.message, /maximum context length is 256 tokens\. However, your messages are at least 571429 tokens \(4000000 bytes of text/);
    // Below that bound, the count is exact.
    const near = await postJson(chatUrl, { ...valid, messages: [{ role: "user", content: "cat ".repeat(300) }] }, auth);
    assertError(near, 400, "context_length_exceeded", "messages");
    assert.match(near.body.error.message, /you requested \d+ tokens \(\d+ in the messages/);
  });

  it("answers 400 context_length_exceeded through the SDK too, streaming", async () => {
    await assert.rejects(
      test.client.chat.completions.create({ ...valid, messages: [{ role: "user", content: "dog ".repeat(400) }], stream: true } as never),
      (error: unknown) => error instanceof OpenAI.BadRequestError && error.code === "context_length_exceeded",
    );
  });

  it("answers 400 invalid_url, in the usual error shape, for a URL that cannot be decoded", async () => {
    for (const url of [`${test.url}/v1/%zz`, `${test.url}/api/%`, `${test.url}/%E0%A4%A`]) {
      const response = await fetch(url);
      assert.equal(response.status, 400);
      const body = await response.json();
      assert.equal(body.error.code, "invalid_url");
      assert.equal(body.error.type, "invalid_request_error");
    }
  });

  it("answers 404 unknown_url for a route that does not exist", async () => {
    const response = await fetch(`${test.baseURL}/engines`, { headers: auth });
    assert.equal(response.status, 404);
    const body = (await response.json()) as any;
    assert.equal(body.error.code, "unknown_url");
  });
});

describe("resilience", () => {
  it("keeps serving normally after a burst of malformed requests", async () => {
    const garbage = [
      "",
      "{",
      "null",
      '{"model":',
      '{"messages":[{"role":"user"}]}',
      JSON.stringify({ ...valid, messages: [{ role: "user", content: { nested: [1, 2] } }] }),
      JSON.stringify({ ...valid, max_tokens: 1e30 }),
      JSON.stringify({ ...valid, temperature: Number.MAX_VALUE }),
      "\u0000\u0001\u0002",
      "x".repeat(100_000),
    ];
    const responses = await Promise.all(
      Array.from({ length: 60 }, (_unused, index) => postJson(chatUrl, garbage[index % garbage.length]!, auth)),
    );
    for (const response of responses) {
      assert.ok(response.status >= 400 && response.status < 500, `status ${response.status}: ${response.text}`);
      assert.equal(typeof response.body?.error?.code, "string", response.text);
    }
    const wrongType = await fetch(chatUrl, { method: "POST", headers: { ...auth, "content-type": "text/plain" }, body: "hello" });
    assert.ok(wrongType.status >= 400 && wrongType.status < 500);
    const completion = await test.client.chat.completions.create({ ...valid, messages: [{ role: "user", content: "Hi" }] } as never);
    assert.equal((completion as OpenAI.Chat.Completions.ChatCompletion).choices.length, 1);
  });

  it("answers requests Node's HTTP parser refuses in the same error shape, then closes", async () => {
    const { hostname, port } = new URL(test.url);
    const exchange = (raw: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = net.connect(Number(port), hostname, () => socket.write(raw));
        let received = "";
        socket.on("data", (chunk) => (received += chunk.toString()));
        socket.on("close", () => resolve(received));
        socket.on("error", reject);
      });
    const parse = (received: string) => {
      const [head, body] = received.split("\r\n\r\n");
      return { statusLine: head!.split("\r\n")[0], head: head!, body: JSON.parse(body!) as { error: Record<string, unknown> } };
    };

    const garbage = parse(await exchange("GARBAGE\r\n\r\n"));
    assert.equal(garbage.statusLine, "HTTP/1.1 400 Bad Request");
    assert.match(garbage.head, /content-type: application\/json/i);
    assert.deepEqual(garbage.body.error, { message: "The request is not valid HTTP.", type: "invalid_request_error", param: null, code: "malformed_request" });

    const conflicting = parse(await exchange("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n"));
    assert.equal(conflicting.statusLine, "HTTP/1.1 400 Bad Request");
    assert.equal(conflicting.body.error.code, "malformed_request");

    const huge = parse(await exchange(`GET /v1/models/${"a".repeat(100_000)} HTTP/1.1\r\nHost: x\r\n\r\n`));
    assert.equal(huge.statusLine, "HTTP/1.1 431 Request Header Fields Too Large");
    assert.equal(huge.body.error.code, "headers_too_large");
    assert.equal(huge.body.error.type, "invalid_request_error");

    const after = await test.client.chat.completions.create({ ...valid } as never);
    assert.equal((after as OpenAI.Chat.Completions.ChatCompletion).choices.length, 1, "and keeps serving");
  });

  it("tells a client that sent JSON without the JSON content type to say so", async () => {
    // fetch sends a string as text/plain, and a Blob without a type with no content type at all.
    const plain = await fetch(chatUrl, { method: "POST", headers: auth, body: JSON.stringify(valid) });
    assert.equal(plain.status, 400);
    assert.equal(((await plain.json()) as any).error.message, "The request body must be a JSON object, sent with 'Content-Type: application/json'.");
    const untyped = await fetch(chatUrl, { method: "POST", headers: auth, body: new Blob([JSON.stringify(valid)]) });
    assert.equal(untyped.status, 415);
    assert.equal(((await untyped.json()) as any).error.message, "Unsupported content type; send 'Content-Type: application/json'.");
  });

  it("answers 413 for a body over the limit", async () => {
    const response = await postJson(chatUrl, { ...valid, messages: [{ role: "user", content: "x".repeat(11 * 1024 * 1024) }] }, auth);
    assertError(response, 413, "request_too_large");
  });
});
