import { test } from "node:test";
import assert from "node:assert/strict";
import type { GenerationRequest } from "../engine.ts";
import { UnsupportedParameterError } from "../../protocol/errors.ts";
import { checkRequestForDialect, COMMON_DIALECT, DIALECTS, dialectFor, namesTheOnlyTool, parametersInUse } from "./dialects.ts";

function request(overrides: Partial<GenerationRequest> = {}, sampling: Partial<GenerationRequest["sampling"]> = {}): GenerationRequest {
  return {
    messages: [{ role: "user", content: "Hi" }],
    sampling: { temperature: 1, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: [], ...sampling },
    choices: 1,
    ...overrides,
  };
}

test("a plain request uses no parameter any kind could ignore", () => {
  assert.deepEqual(parametersInUse(request()), []);
  for (const dialect of Object.values(DIALECTS)) checkRequestForDialect(request(), dialect, []);
});

test("default values ask nothing: n 1, tool_choice auto, parallel_tool_calls true", () => {
  const tools = [{ name: "f" }];
  assert.deepEqual(parametersInUse(request({ tools, toolChoice: "auto", parallelToolCalls: true })), ["tools"]);
  checkRequestForDialect(request({ tools, toolChoice: "auto", parallelToolCalls: true }), DIALECTS.ollama, []);
});

test("Ollama refuses what it would ignore, naming the parameter", () => {
  const cases: [Partial<GenerationRequest>, Partial<GenerationRequest["sampling"]>, string][] = [
    [{}, { logitBias: new Map([[5, -100]]) }, "logit_bias"],
    [{ logprobs: { top: 0 } }, {}, "logprobs"],
    [{ choices: 2 }, {}, "n"],
    [{ tools: [{ name: "f" }], toolChoice: "required" }, {}, "tool_choice"],
    [{ tools: [{ name: "f" }], parallelToolCalls: false }, {}, "parallel_tool_calls"],
  ];
  for (const [overrides, sampling, param] of cases) {
    assert.throws(
      () => checkRequestForDialect(request(overrides, sampling), DIALECTS.ollama, []),
      (error: unknown) => error instanceof UnsupportedParameterError && error.param === param && error.message.includes("ollama"),
      param,
    );
  }
});

test("llama-server refuses n > 1 and a named tool_choice among several tools; vLLM takes both", () => {
  assert.throws(() => checkRequestForDialect(request({ choices: 3 }), DIALECTS["llama-server"], []), (error: unknown) => error instanceof UnsupportedParameterError && error.param === "n");
  const named = request({ tools: [{ name: "f" }, { name: "g" }], toolChoice: { name: "f" } });
  assert.throws(() => checkRequestForDialect(named, DIALECTS["llama-server"], []), (error: unknown) => error instanceof UnsupportedParameterError && error.param === "tool_choice");
  checkRequestForDialect(named, DIALECTS.vllm, []);
  checkRequestForDialect(request({ choices: 3 }), DIALECTS.vllm, []);
});

test("llama-server takes a tool_choice naming the only tool (it goes as required, which asks the same)", () => {
  const only = request({ tools: [{ name: "f" }], toolChoice: { name: "f" } });
  assert.ok(namesTheOnlyTool(only));
  checkRequestForDialect(only, DIALECTS["llama-server"], []);
  const other = request({ tools: [{ name: "f" }], toolChoice: { name: "g" } });
  assert.ok(!namesTheOnlyTool(other));
  assert.throws(() => checkRequestForDialect(other, DIALECTS["llama-server"], []), (error: unknown) => error instanceof UnsupportedParameterError && error.param === "tool_choice");
  assert.ok(!namesTheOnlyTool(request({ tools: [{ name: "f" }], toolChoice: "required" })));
});

test("vendor fields outside the allowed list are refused", () => {
  const withTopK = request({ vendor: { top_k: 40 } });
  checkRequestForDialect(withTopK, DIALECTS.vllm, DIALECTS.vllm.vendorFields);
  assert.throws(() => checkRequestForDialect(withTopK, DIALECTS.openai, DIALECTS.openai.vendorFields), (error: unknown) => error instanceof UnsupportedParameterError && error.param === "top_k");
});

test("an unknown kind gets only what every kind honours", () => {
  assert.equal(dialectFor(undefined), COMMON_DIALECT);
  for (const parameter of ["n", "logit_bias", "logprobs", "tool_choice", "parallel_tool_calls"]) assert.ok(!COMMON_DIALECT.supportedParameters.includes(parameter as never), parameter);
  for (const parameter of ["temperature", "seed", "stop", "tools", "response_format"]) assert.ok(COMMON_DIALECT.supportedParameters.includes(parameter as never), parameter);
});

test("OpenAI is sent max_completion_tokens, the others max_tokens; only vLLM asks for continuous usage", () => {
  assert.equal(DIALECTS.openai.maxTokensField, "max_completion_tokens");
  for (const kind of ["vllm", "sglang", "llama-server", "ollama"] as const) assert.equal(DIALECTS[kind].maxTokensField, "max_tokens");
  assert.deepEqual(
    Object.values(DIALECTS).filter((dialect) => dialect.continuousUsage).map((dialect) => dialect.kind),
    ["vllm"],
  );
});
