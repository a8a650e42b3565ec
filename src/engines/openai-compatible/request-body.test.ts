import { test } from "node:test";
import assert from "node:assert/strict";
import type { GenerationRequest } from "../engine.ts";
import { DIALECTS } from "./dialects.ts";
import { buildRequestBody } from "./request-body.ts";

const base: GenerationRequest = {
  messages: [{ role: "user", content: "Hi" }],
  sampling: { temperature: 0.5, topP: 0.9, frequencyPenalty: 0, presencePenalty: 0, stop: [] },
  choices: 1,
};

test("always streams, always asks for usage, always carries the computed completion bound", () => {
  const body = buildRequestBody(base, { dialect: DIALECTS.sglang, model: "qwen", maxTokens: 123 });
  assert.deepEqual(body, {
    model: "qwen",
    messages: [{ role: "user", content: "Hi" }],
    stream: true,
    stream_options: { include_usage: true },
    max_tokens: 123,
    temperature: 0.5,
    top_p: 0.9,
  });
});

test("vLLM gets continuous usage; OpenAI gets max_completion_tokens", () => {
  const vllm = buildRequestBody(base, { dialect: DIALECTS.vllm, model: "m", maxTokens: 7 });
  assert.deepEqual(vllm.stream_options, { include_usage: true, continuous_usage_stats: true });
  const openai = buildRequestBody(base, { dialect: DIALECTS.openai, model: "gpt", maxTokens: 7 });
  assert.equal(openai.max_completion_tokens, 7);
  assert.equal(openai.max_tokens, undefined);
});

test("content parts keep their order, images as image_url with their detail", () => {
  const request: GenerationRequest = {
    ...base,
    messages: [
      {
        role: "user",
        content: "before after",
        images: [{ url: "data:image/png;base64,AAAA", detail: "low" }],
        parts: [
          { type: "text", text: "before " },
          { type: "image", image: { url: "data:image/png;base64,AAAA", detail: "low" } },
          { type: "text", text: "after" },
        ],
      },
    ],
  };
  const body = buildRequestBody(request, { dialect: DIALECTS.vllm, model: "m", maxTokens: 1 });
  assert.deepEqual((body.messages as unknown[])[0], {
    role: "user",
    content: [
      { type: "text", text: "before " },
      { type: "image_url", image_url: { url: "data:image/png;base64,AAAA", detail: "low" } },
      { type: "text", text: "after" },
    ],
  });
});

test("tool calls, tool results, tools with strict, tool_choice and parallel_tool_calls", () => {
  const request: GenerationRequest = {
    ...base,
    messages: [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Weather?" },
      { role: "assistant", content: "", toolCalls: [{ id: "call_1", name: "weather", arguments: '{"city":"Oslo"}' }] },
      { role: "tool", content: "rain", toolCallId: "call_1" },
    ],
    tools: [{ name: "weather", description: "Gets the weather", parameters: { type: "object" }, strict: true }],
    toolChoice: { name: "weather" },
    parallelToolCalls: false,
  };
  const body = buildRequestBody(request, { dialect: DIALECTS.vllm, model: "m", maxTokens: 1 });
  assert.deepEqual(body.messages, [
    { role: "system", content: "Be brief." },
    { role: "user", content: "Weather?" },
    { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "weather", arguments: '{"city":"Oslo"}' } }] },
    { role: "tool", tool_call_id: "call_1", content: "rain" },
  ]);
  assert.deepEqual(body.tools, [{ type: "function", function: { name: "weather", description: "Gets the weather", parameters: { type: "object" }, strict: true } }]);
  assert.deepEqual(body.tool_choice, { type: "function", function: { name: "weather" } });
  assert.equal(body.parallel_tool_calls, false);
  // llama-server takes no named choice: naming the only tool is `required`.
  const llama = buildRequestBody(request, { dialect: DIALECTS["llama-server"], model: "m", maxTokens: 1 });
  assert.equal(llama.tool_choice, "required");
  assert.deepEqual(llama.tools, body.tools);
});

test("sampling, n, logprobs, logit_bias, response_format and vendor fields (renamed for llama-server)", () => {
  const request: GenerationRequest = {
    ...base,
    sampling: { temperature: 0, topP: 1, seed: 42, frequencyPenalty: 0.5, presencePenalty: -0.5, stop: ["\n\n"], logitBias: new Map([[50256, -100]]) },
    choices: 2,
    logprobs: { top: 3 },
    responseFormat: { type: "json_schema", name: "answer", schema: { type: "object" }, strict: true },
    vendor: { top_k: 40, repetition_penalty: 1.1, model: "evil" },
  };
  const body = buildRequestBody(request, { dialect: DIALECTS["llama-server"], model: "m", maxTokens: 9 });
  assert.equal(body.model, "m", "a vendor field cannot replace the model");
  assert.equal(body.seed, 42);
  assert.equal(body.frequency_penalty, 0.5);
  assert.equal(body.presence_penalty, -0.5);
  assert.deepEqual(body.stop, ["\n\n"]);
  assert.deepEqual(body.logit_bias, { "50256": -100 });
  assert.equal(body.n, 2);
  assert.equal(body.logprobs, true);
  assert.equal(body.top_logprobs, 3);
  assert.deepEqual(body.response_format, { type: "json_schema", json_schema: { name: "answer", schema: { type: "object" }, strict: true } });
  assert.equal(body.top_k, 40);
  assert.equal(body.repeat_penalty, 1.1);
  assert.equal(body.repetition_penalty, undefined);
});

test("OpenAI is not sent temperature or top_p at its defaults (its reasoning models refuse them); others always are", () => {
  const defaults: GenerationRequest = { ...base, sampling: { ...base.sampling, temperature: 1, topP: 1 } };
  const openai = buildRequestBody(defaults, { dialect: DIALECTS.openai, model: "o4-mini", maxTokens: 5 });
  assert.equal("temperature" in openai, false);
  assert.equal("top_p" in openai, false);
  assert.equal(buildRequestBody(base, { dialect: DIALECTS.openai, model: "gpt", maxTokens: 5 }).temperature, 0.5);
  const ollama = buildRequestBody(defaults, { dialect: DIALECTS.ollama, model: "llama3.2", maxTokens: 5 });
  assert.equal(ollama.temperature, 1);
  assert.equal(ollama.top_p, 1);
});

test("parallel_tool_calls is always said when tools are given (llama-server's default is false, OpenAI's true)", () => {
  const body = buildRequestBody({ ...base, tools: [{ name: "f" }] }, { dialect: DIALECTS["llama-server"], model: "m", maxTokens: 5 });
  assert.equal(body.parallel_tool_calls, true);
  assert.equal("parallel_tool_calls" in buildRequestBody(base, { dialect: DIALECTS.vllm, model: "m", maxTokens: 5 }), false);
});

test("llama-server is asked for its running counts on every chunk (timings_per_token); other kinds are not", () => {
  assert.equal(buildRequestBody(base, { dialect: DIALECTS["llama-server"], model: "m", maxTokens: 5 }).timings_per_token, true);
  for (const kind of ["vllm", "sglang", "ollama", "openai"] as const) {
    assert.equal("timings_per_token" in buildRequestBody(base, { dialect: DIALECTS[kind], model: "m", maxTokens: 5 }), false, kind);
  }
});
