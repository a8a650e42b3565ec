/**
 * Exact prompt counts from vLLM's chat-form /tokenize and llama-server's /apply-template +
 * /tokenize, with every failure falling back to undefined (an upper bound, for the caller).
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { FaultUpstream, sendJson, type RouteHandler } from "../../../test/helpers/fault-upstream.ts";
import { countPromptTokens, countsPromptsExactly } from "./tokenize.ts";

const messages = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "Hi" },
];
const tools = [{ type: "function", function: { name: "lookup", parameters: { type: "object" } } }];

const started: FaultUpstream[] = [];
async function server(routes: Record<string, RouteHandler>): Promise<FaultUpstream> {
  const upstream = await FaultUpstream.start({ routes });
  started.push(upstream);
  return upstream;
}
after(() => Promise.all(started.map((upstream) => upstream.close())));

describe("countPromptTokens", () => {
  it("counts with vLLM's chat-form /tokenize, tools and template arguments included", async () => {
    const asked: unknown[] = [];
    const upstream = await server({
      "POST /tokenize": (body, response, request) => {
        asked.push({ body, authorization: request.headers.authorization });
        sendJson(response, 200, { count: 21, max_model_len: 4096, tokens: Array(21).fill(1) });
      },
    });
    const counted = await countPromptTokens({ kind: "vllm", baseUrl: upstream.baseUrl, model: "m", messages, tools, chatTemplateKwargs: { enable_thinking: false }, apiKey: "sk-t" });
    assert.deepEqual(counted, { tokens: 21 });
    assert.deepEqual(asked, [
      { body: { model: "m", messages, tools, chat_template_kwargs: { enable_thinking: false }, add_generation_prompt: true }, authorization: "Bearer sk-t" },
    ]);
  });

  it("counts with llama-server's /v1/chat/completions/input_tokens, images included", async () => {
    const asked: unknown[] = [];
    const upstream = await server({
      "POST /v1/chat/completions/input_tokens": (body, response) => {
        asked.push(body);
        sendJson(response, 200, { input_tokens: 35, object: "response.input_tokens" });
      },
    });
    const withImage = [{ role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }] }];
    assert.deepEqual(await countPromptTokens({ kind: "llama-server", baseUrl: upstream.baseUrl, model: "m", messages: withImage, tools }), { tokens: 35 });
    assert.deepEqual(asked, [{ model: "m", messages: withImage, tools }]);
  });

  it("counts with an older llama-server's /apply-template then /tokenize", async () => {
    const asked: unknown[] = [];
    const upstream = await server({
      "POST /apply-template": (body, response) => {
        asked.push(body);
        sendJson(response, 200, { prompt: "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" });
      },
      "POST /tokenize": (body, response) => {
        asked.push(body);
        sendJson(response, 200, { tokens: [1, 2, 3, 4, 5, 6, 7, 8, 9] });
      },
    });
    assert.deepEqual(await countPromptTokens({ kind: "llama-server", baseUrl: upstream.baseUrl, model: "m", messages }), { tokens: 9 });
    assert.deepEqual(asked[0], { messages });
    assert.deepEqual(asked[1], { content: "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", add_special: true, parse_special: true });
  });

  it("falls back for kinds without a chat tokenizer, and for prompts with images", async () => {
    assert.deepEqual((["vllm", "sglang", "llama-server", "ollama", "openai", undefined] as const).map((kind) => countsPromptsExactly(kind)), [true, false, true, false, false, false]);
    const upstream = await server({ "POST /tokenize": (_body, response) => sendJson(response, 200, { count: 3, tokens: [1, 2, 3] }) });
    for (const kind of ["sglang", "ollama", "openai"] as const) assert.equal(await countPromptTokens({ kind, baseUrl: upstream.baseUrl, model: "m", messages }), undefined);
    const withImage = [{ role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }] }];
    assert.equal(await countPromptTokens({ kind: "vllm", baseUrl: upstream.baseUrl, model: "m", messages: withImage }), undefined);
  });

  it("falls back when the server fails, answers nonsense or takes too long", async () => {
    const failing = await server({ "POST /tokenize": (_body, response) => sendJson(response, 500, {}) });
    assert.equal(await countPromptTokens({ kind: "vllm", baseUrl: failing.baseUrl, model: "m", messages }), undefined);
    const nonsense = await server({ "POST /tokenize": (_body, response) => sendJson(response, 200, { count: -4 }) });
    assert.equal(await countPromptTokens({ kind: "vllm", baseUrl: nonsense.baseUrl, model: "m", messages }), undefined);
    const slow = await server({ "POST /apply-template": (_body, response) => void setTimeout(() => sendJson(response, 200, { prompt: "x" }), 500).unref() });
    const started = Date.now();
    assert.equal(await countPromptTokens({ kind: "llama-server", baseUrl: slow.baseUrl, model: "m", messages, timeoutMs: 100 }), undefined);
    assert.ok(Date.now() - started < 400);
    const missing = await server({});
    assert.equal(await countPromptTokens({ kind: "llama-server", baseUrl: missing.baseUrl, model: "m", messages }), undefined, "an older server without /apply-template");
  });
});
