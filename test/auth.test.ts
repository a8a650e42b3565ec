/**
 * API keys on the wire: the 401s, revocation by the CLI against a running server, request ids,
 * and keys never reaching responses or logs.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import { postJson, startTestServer, type TestServer } from "./helpers/server.ts";
import { runCli } from "./helpers/process.ts";

let test: TestServer;
before(async () => {
  test = await startTestServer();
});
after(async () => {
  await test?.close();
});

const body = { model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 2 };

function assertInvalidKey(response: { status: number; body: any; text: string }): void {
  assert.equal(response.status, 401, response.text);
  assert.deepEqual(Object.keys(response.body.error).sort(), ["code", "message", "param", "type"]);
  assert.equal(response.body.error.type, "invalid_request_error");
  assert.equal(response.body.error.code, "invalid_api_key");
  assert.equal(response.body.error.param, null);
}

describe("API key authentication", () => {
  it("refuses a request without a key", async () => {
    assertInvalidKey(await postJson(`${test.baseURL}/chat/completions`, body));
    const models = await fetch(`${test.baseURL}/models`);
    assert.equal(models.status, 401);
  });

  it("refuses a key in the wrong scheme", async () => {
    assertInvalidKey(await postJson(`${test.baseURL}/chat/completions`, body, { authorization: `Basic ${test.key}` }));
  });

  it("refuses an unknown key and never echoes or logs it", async () => {
    const presented = "tp-this-key-does-not-exist-0123456789abcdefghijklmnop";
    const response = await postJson(`${test.baseURL}/chat/completions`, body, { authorization: `Bearer ${presented}` });
    assertInvalidKey(response);
    assert.ok(!response.text.includes(presented));
    const malformed = "sk-not-even-ours";
    const second = await postJson(`${test.baseURL}/chat/completions`, body, { authorization: `Bearer ${malformed}` });
    assertInvalidKey(second);
    assert.ok(!test.logText().includes(presented), "the unknown key is not in the logs");
    assert.ok(!test.logText().includes(malformed));
  });

  it("surfaces as AuthenticationError in the openai SDK", async () => {
    const client = new OpenAI({ baseURL: test.baseURL, apiKey: "tp-wrong", maxRetries: 0 });
    await assert.rejects(client.chat.completions.create(body as never), (error: unknown) => error instanceof OpenAI.AuthenticationError);
  });

  it("never writes a valid key to the logs", async () => {
    await test.client.chat.completions.create(body as never);
    const stream = await test.client.chat.completions.create({ ...body, stream: true } as OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming);
    for await (const _chunk of stream);
    assert.ok(test.logs().some((entry) => entry.msg === "chat completion" && entry.key_id === test.keyId), "completions are logged with the key id");
    assert.ok(!test.logText().includes(test.key));
  });

  it("takes a revocation from the CLI on the next request, without a restart", async () => {
    const created = await runCli(["keys", "create", "--name", "to-revoke", "--json", "--data-dir", test.dataDir]);
    assert.equal(created.code, 0, created.stderr);
    const { id, key } = JSON.parse(created.stdout) as { id: string; key: string };
    const client = new OpenAI({ baseURL: test.baseURL, apiKey: key, maxRetries: 0 });
    const ok = await client.chat.completions.create(body as never);
    assert.ok(ok);
    const revoked = await runCli(["keys", "revoke", id, "--data-dir", test.dataDir]);
    assert.equal(revoked.code, 0, revoked.stderr);
    const response = await postJson(`${test.baseURL}/chat/completions`, body, { authorization: `Bearer ${key}` });
    assertInvalidKey(response);
    assert.match(response.body.error.message, /revoked/);
    // Other keys still work.
    assert.ok(await test.client.chat.completions.create(body as never));
  });
});

describe("request ids", () => {
  it("echoes a sane x-request-id on every response, errors and streams included", async () => {
    const ok = await postJson(`${test.baseURL}/chat/completions`, body, { authorization: `Bearer ${test.key}`, "x-request-id": "client-id-1" });
    assert.equal(ok.headers.get("x-request-id"), "client-id-1");
    const denied = await postJson(`${test.baseURL}/chat/completions`, body, { "x-request-id": "client-id-2" });
    assert.equal(denied.headers.get("x-request-id"), "client-id-2");
    const streamed = await postJson(`${test.baseURL}/chat/completions`, { ...body, stream: true }, { authorization: `Bearer ${test.key}`, "x-request-id": "client-id-3" });
    assert.equal(streamed.headers.get("x-request-id"), "client-id-3");
    assert.match(streamed.headers.get("content-type") ?? "", /^text\/event-stream/);
    const health = await fetch(`${test.url}/health`, { headers: { "x-request-id": "client-id-4" } });
    assert.equal(health.headers.get("x-request-id"), "client-id-4");
  });

  it("generates an id when the client sends none or an unsafe one", async () => {
    const none = await fetch(`${test.url}/health`);
    assert.match(none.headers.get("x-request-id") ?? "", /^req_[A-Za-z0-9_-]{8,}$/);
    const unsafe = await fetch(`${test.url}/health`, { headers: { "x-request-id": "bad id\twith spaces" } });
    assert.match(unsafe.headers.get("x-request-id") ?? "", /^req_/);
    const long = await fetch(`${test.url}/health`, { headers: { "x-request-id": "a".repeat(500) } });
    assert.match(long.headers.get("x-request-id") ?? "", /^req_/);
    assert.notEqual(none.headers.get("x-request-id"), unsafe.headers.get("x-request-id"));
  });

  it("logs the request id with the completion", async () => {
    await postJson(`${test.baseURL}/chat/completions`, body, { authorization: `Bearer ${test.key}`, "x-request-id": "trace-me-42" });
    const entry = test.logs().find((line) => line.reqId === "trace-me-42" && line.msg === "chat completion");
    assert.ok(entry);
    assert.equal(entry.model, "stories260K");
    assert.equal(typeof entry.prompt_tokens, "number");
    assert.equal(entry.completion_tokens, 2);
    assert.equal(typeof entry.latency_ms, "number");
  });
});
