import { test } from "node:test";
import assert from "node:assert/strict";
import { detectContextLength, originOf } from "./context-length.ts";
import type { UpstreamClient } from "./upstream-client.ts";

/** A client answering probes from a table of URL → JSON (undefined: no answer). */
function client(answers: Record<string, unknown>, asked: string[] = []): UpstreamClient {
  return {
    getJson: async (url: string, _signal: AbortSignal, body?: unknown) => {
      asked.push(body === undefined ? url : `${url} ${JSON.stringify(body)}`);
      return answers[url];
    },
  } as unknown as UpstreamClient;
}

const signal = new AbortController().signal;

test("the server's root is the base URL without /v1", () => {
  assert.equal(originOf("http://h:8000/v1"), "http://h:8000");
  assert.equal(originOf("http://h:8000/prefix/v1/"), "http://h:8000/prefix");
});

test("vLLM and SGLang: max_model_len of the model in /v1/models; the next member when one does not answer", async () => {
  const answers = { "http://b/v1/models": { data: [{ id: "other", max_model_len: 1 }, { id: "qwen", max_model_len: 40960 }] } };
  assert.deepEqual(await detectContextLength({ client: client(answers), kind: "sglang", baseUrls: ["http://a/v1", "http://b/v1"], model: "qwen", signal }), { contextLength: 40960 });
});

test("llama-server: the per-slot n_ctx of /props", async () => {
  const asked: string[] = [];
  const answers = { "http://a/props": { default_generation_settings: { n_ctx: 8192 } } };
  assert.deepEqual(await detectContextLength({ client: client(answers, asked), kind: "llama-server", baseUrls: ["http://a/v1"], model: "m", signal }), { contextLength: 8192 });
  assert.deepEqual(asked, ["http://a/props"]);
});

test("Ollama: num_ctx from /api/show when the model sets it, else its default with a note", async () => {
  const withNumCtx = { "http://o/api/show": { parameters: "stop <|eot_id|>\nnum_ctx 16384", model_info: { "llama.context_length": 131072 } } };
  assert.deepEqual(await detectContextLength({ client: client(withNumCtx), kind: "ollama", baseUrls: ["http://o/v1"], model: "llama3.2", signal }), { contextLength: 16384 });
  const without = { "http://o/api/show": { parameters: "stop <|eot_id|>", model_info: { "llama.context_length": 131072 } } };
  const found = await detectContextLength({ client: client(without), kind: "ollama", baseUrls: ["http://o/v1"], model: "llama3.2", signal });
  assert.equal(found.contextLength, 4096);
  assert.match("note" in found ? (found.note ?? "") : "", /context_length/);
});

test("an unknown kind tries /v1/models, then /props, then /api/show", async () => {
  const asked: string[] = [];
  const answers = { "http://x/api/show": { parameters: "num_ctx 2048" } };
  assert.deepEqual(await detectContextLength({ client: client(answers, asked), kind: undefined, baseUrls: ["http://x/v1"], model: "m", signal }), { contextLength: 2048 });
  assert.deepEqual(asked, ["http://x/v1/models", "http://x/props", 'http://x/api/show {"model":"m"}']);
});

test("an OpenAI-compatible gateway: context_length (or context_window) of the model in /v1/models", async () => {
  const answers = { "http://g/v1/models": { data: [{ id: "story", context_length: 2048 }] } };
  assert.deepEqual(await detectContextLength({ client: client(answers), kind: "openai", baseUrls: ["http://g/v1"], model: "story", signal }), { contextLength: 2048 });
  const windowed = { "http://g/v1/models": { data: [{ id: "story", context_window: 8192 }] } };
  assert.deepEqual(await detectContextLength({ client: client(windowed), kind: "openai", baseUrls: ["http://g/v1"], model: "story", signal }), { contextLength: 8192 });
});

test("OpenAI, or no answer at all: the entry must say", async () => {
  const openai = await detectContextLength({ client: client({}), kind: "openai", baseUrls: ["https://api.openai.com/v1"], model: "gpt", signal });
  assert.equal(openai.contextLength, undefined);
  const silent = await detectContextLength({ client: client({}), kind: "vllm", baseUrls: ["http://a/v1"], model: "m", signal });
  assert.equal(silent.contextLength, undefined);
  assert.match("reason" in silent ? silent.reason : "", /context_length/);
});
