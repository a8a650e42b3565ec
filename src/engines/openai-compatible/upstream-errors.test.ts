import { test } from "node:test";
import assert from "node:assert/strict";
import { ContextLengthExceededError, InvalidRequestError, UpstreamError, UpstreamUnavailableError } from "../../protocol/errors.ts";
import { classifyHttpError, classifyStreamError, contextOverflowMessage, isContextOverflow, overflowCounts, retryAfterMs, upstreamWordsForLog } from "./upstream-errors.ts";

test("recognises each upstream's context overflow", () => {
  const messages = [
    // vLLM (old and new wordings)
    "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.",
    "'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum context length is 4096 tokens and your request has 3200 input tokens (1000 > 4096 - 3200).",
    // SGLang
    "The input (9000 tokens) is longer than the model's context length (8192 tokens).",
    "Requested token count exceeds the model's maximum context length of 8192 tokens. You requested a total of 9000 tokens.",
    // llama-server
    "the request exceeds the available context size, try increasing it",
  ];
  for (const message of messages) assert.ok(isContextOverflow(message), message);
  assert.ok(isContextOverflow("whatever", "context_length_exceeded"));
  assert.ok(isContextOverflow("whatever", 400, "exceed_context_size_error"));
  assert.ok(!isContextOverflow("temperature must be between 0 and 2"));
});

test("a 400 context overflow is a ContextLengthExceededError; vLLM's flat body and llama-server's are read", () => {
  const vllm = classifyHttpError(400, JSON.stringify({ object: "error", message: "This model's maximum context length is 4096 tokens.", type: "BadRequestError", param: null, code: 400 }), {});
  assert.equal(vllm.action, "refuse");
  assert.ok(vllm.error instanceof ContextLengthExceededError);
  const llama = classifyHttpError(400, JSON.stringify({ error: { code: 400, message: "the request exceeds the available context size", type: "exceed_context_size_error", n_prompt_tokens: 5000, n_ctx: 4096 } }), {});
  assert.ok(llama.error instanceof ContextLengthExceededError);
  assert.deepEqual(llama.outcome, { kind: "neutral" });
});

test("other 4xx are a 400 with a fixed message for the status; the upstream's words, key removed, are for the log", () => {
  const key = "sk-live-0123456789abcdefABCDEF";
  const body = JSON.stringify({
    error: { message: `Invalid value for top_k on http://10.0.0.5:8000/v1 (gpu-3.cluster.internal:8000, 192.168.1.7, key ${key}, /srv/models/qwen/weights.bin)` },
  });
  const verdict = classifyHttpError(422, body, {}, [key]);
  assert.equal(verdict.action, "refuse");
  assert.ok(verdict.error instanceof InvalidRequestError);
  assert.equal(verdict.error.status, 400);
  assert.equal(verdict.error.message, "The upstream engine refused a parameter of the request as out of range or of the wrong type.");
  assert.match(verdict.upstreamMessage ?? "", /Invalid value for top_k on http:\/\/10\.0\.0\.5:8000/);
  assert.ok(!verdict.upstreamMessage?.includes(key), "our key never reaches the log");
  assert.equal(classifyHttpError(400, body, {}).error.message, "The upstream engine refused the request as invalid.");
  assert.equal(classifyHttpError(413, "too big", {}).error.message, "The upstream engine refused the request as too large.");
  assert.equal(classifyHttpError(418, "teapot", {}).error.message, "The upstream engine refused the request (HTTP 418).");
});

test("FastAPI's validation detail is read (for the log)", () => {
  const verdict = classifyHttpError(422, JSON.stringify({ detail: [{ loc: ["body", "temperature"], msg: "Input should be less than or equal to 2" }] }), {});
  assert.match(verdict.upstreamMessage ?? "", /less than or equal to 2 \(body\.temperature\)/);
});

test("an overflow's client message holds the upstream's numbers and nothing else of its words", () => {
  const cases: Array<[string, string]> = [
    [
      "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Seen at gpu-3.cluster.internal.",
      "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages). Please reduce the length of the messages or the completion.",
    ],
    [
      "The input (9000 tokens) is longer than the model's context length (8192 tokens). Host C:\\models\\x.gguf",
      "This model's maximum context length is 8192 tokens. However, your messages are 9000 tokens. Please reduce the length of the messages or the completion.",
    ],
    [
      "'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum context length is 4096 tokens and your request has 3200 input tokens (1000 > 4096 - 3200).",
      "This model's maximum context length is 4096 tokens. However, your messages are 3200 tokens, which with the completion asked for do not fit. Please reduce the length of the messages or the completion.",
    ],
    ["prompt is too long; ask ops@example.com", "The request does not fit the model's context window. Please reduce the length of the messages or the completion."],
  ];
  for (const [upstream, client] of cases) assert.equal(contextOverflowMessage(overflowCounts(upstream)), client);
  const llama = classifyHttpError(400, JSON.stringify({ error: { code: 400, message: "the request exceeds the available context size", type: "exceed_context_size_error", n_prompt_tokens: 5000, n_ctx: 4096 } }), {});
  assert.equal(llama.error.message, "This model's maximum context length is 4096 tokens. However, your messages are 5000 tokens. Please reduce the length of the messages or the completion.");
});

test("401 and 403 make the model unavailable and alert the operator, without the key", () => {
  const key = "sk-proj-secretsecretsecret";
  for (const status of [401, 403]) {
    const verdict = classifyHttpError(status, JSON.stringify({ error: { message: `Incorrect API key provided: ${key}.` } }), {}, [key]);
    assert.equal(verdict.action, "refuse");
    assert.ok(verdict.error instanceof UpstreamUnavailableError);
    assert.equal(verdict.error.status, 503);
    assert.ok(verdict.action === "refuse" && verdict.operatorAlert !== undefined && !verdict.operatorAlert.includes(key) && !verdict.operatorAlert.includes("secretsecret"));
  }
});

test("429 and 5xx are retried, honouring retry-after", () => {
  const busy = classifyHttpError(429, "slow down", { "retry-after": "2" });
  assert.equal(busy.action, "retry");
  assert.equal(busy.action === "retry" && busy.retryAfterMs, 2000);
  assert.deepEqual(busy.outcome, { kind: "status", status: 429, retryAfterMs: 2000 });
  const broken = classifyHttpError(503, "<html>Bad gateway</html>", {});
  assert.equal(broken.action, "retry");
  assert.ok(broken.error instanceof UpstreamError);
});

test("retry-after as seconds, an HTTP date, or retry-after-ms", () => {
  assert.equal(retryAfterMs({ "retry-after": "1.5" }), 1500);
  assert.equal(retryAfterMs({ "retry-after-ms": "250" }), 250);
  assert.equal(retryAfterMs({ "retry-after": new Date(10_000).toUTCString() }, 7_000), 3000);
  assert.equal(retryAfterMs({ "retry-after": "soon" }), undefined);
  assert.equal(retryAfterMs({}), undefined);
});

test("an error event mid-stream: 4xx refused, overflow typed, anything else retried; fixed messages", () => {
  const refused = classifyStreamError({ error: { message: "bad schema at \\\\files01\\share", code: 400 } });
  assert.equal(refused.action, "refuse");
  assert.equal(refused.error.message, "The upstream engine refused the request as invalid.");
  assert.ok(classifyStreamError({ error: { message: "The input (9000 tokens) is longer than the model's context length (8192 tokens).", code: 400 } }).error instanceof ContextLengthExceededError);
  const crash = classifyStreamError({ object: "error", message: "EngineCore died on gpu-3.example.net", code: 500 });
  assert.equal(crash.action, "retry");
  assert.equal(crash.error.status, 502);
  assert.equal(crash.error.message, "The model's upstream server failed mid-stream.");
  assert.equal(crash.upstreamMessage, "EngineCore died on gpu-3.example.net");
});

test("words for the log are freed of control characters and our key, and cut to 2,000 characters", () => {
  const message = upstreamWordsForLog(`a\u0000b sk-our-key-123 ${"x ".repeat(1500)}`, ["sk-our-key-123"]);
  assert.ok(message.length <= 2000);
  assert.ok(message.startsWith("a b (redacted)"));
});
