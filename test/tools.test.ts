/**
 * End-to-end: tool calls on the real stories260K model through the official `openai` client
 * (create, streaming as the SDK assembles it, `runTools`), conversations that carry tool calls
 * and results, and the 400s for malformed tool requests. The story model has no tool-aware
 * template, so these are the grammar-constrained calls in node-llama-cpp's generic syntax.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type OpenAI from "openai";
import { z } from "zod";
import { postJson, startTestServer, storiesChatmlModel, storiesModel, type TestServer } from "./helpers/server.ts";

type Params = OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming;
type ToolCall = { id: string; type: string; function: { name: string; arguments: string } };

let test: TestServer;

before(async () => {
  test = await startTestServer({ flags: { models: [storiesModel, `chatml=${storiesChatmlModel}`] } });
});
after(async () => {
  await test?.close();
});

const weatherArguments = z.object({ city: z.string().max(20), days: z.number().int() }).strict();
const weather: OpenAI.Chat.Completions.ChatCompletionTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather forecast for a city.",
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 20 }, days: { type: "integer" } },
      required: ["city", "days"],
      additionalProperties: false,
    },
  },
};

/** get_weather for the SDK's runTools: arguments parsed with zod, then handed to `run`. */
const runnableWeather = <Result,>(run: (args: z.infer<typeof weatherArguments>) => Result) => ({
  type: "function" as const,
  function: {
    name: "get_weather",
    description: "The weather forecast for a city.",
    parameters: weather.function.parameters!,
    parse: (text: string) => weatherArguments.parse(JSON.parse(text)),
    function: run,
  },
});
const clock: OpenAI.Chat.Completions.ChatCompletionTool = {
  type: "function",
  function: { name: "get_time", description: "The current time.", parameters: { type: "object", properties: {} } },
};
const ask = [{ role: "user" as const, content: "What is the weather in Paris?" }];

/** The reply as the SDK sees it, streamed or not; streamed chunks are checked against OpenAI's shape. */
async function run(params: Params, stream: boolean) {
  if (!stream) {
    const completion = await test.client.chat.completions.create(params);
    const choice = completion.choices[0]!;
    return { content: choice.message.content, toolCalls: (choice.message.tool_calls ?? []) as ToolCall[], finishReason: choice.finish_reason, usage: completion.usage! };
  }
  const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
  for await (const chunk of await test.client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } })) chunks.push(chunk);
  const choiceChunks = chunks.filter((chunk) => chunk.choices.length > 0);
  const calls: ToolCall[] = [];
  let content = "";
  for (const chunk of choiceChunks) {
    const delta = chunk.choices[0]!.delta;
    content += delta.content ?? "";
    for (const call of delta.tool_calls ?? []) {
      if (call.index === calls.length) {
        // A call's first delta: index, id, type, name and empty arguments.
        assert.match(call.id ?? "", /^call_/);
        assert.equal(call.type, "function");
        assert.equal(typeof call.function?.name, "string");
        assert.equal(call.function?.arguments, "");
        calls.push({ id: call.id!, type: call.type!, function: { name: call.function!.name!, arguments: "" } });
      } else {
        // Later deltas: the index and a piece of the arguments only.
        assert.equal(call.index, calls.length - 1);
        assert.deepEqual(Object.keys(call).sort(), ["function", "index"]);
        assert.deepEqual(Object.keys(call.function!), ["arguments"]);
        calls[call.index]!.function.arguments += call.function!.arguments;
      }
    }
  }
  const finish = choiceChunks.filter((chunk) => chunk.choices[0]!.finish_reason !== null);
  assert.equal(finish.length, 1);
  assert.equal(finish[0], choiceChunks.at(-1), "the finish_reason chunk is the last choice chunk");
  return { content: calls.length > 0 && content === "" ? null : content, toolCalls: calls, finishReason: finish[0]!.choices[0]!.finish_reason, usage: chunks.at(-1)!.usage! };
}

describe("tool calls", () => {
  for (const stream of [false, true]) {
    const mode = stream ? "streaming" : "non-streaming";

    it(`calls the named tool with arguments that validate (${mode})`, async () => {
      for (const model of ["stories260K", "chatml"]) {
        const result = await run({ model, messages: ask, temperature: 0, max_tokens: 200, tools: [weather, clock], tool_choice: { type: "function", function: { name: "get_weather" } } }, stream);
        assert.equal(result.finishReason, "tool_calls");
        assert.equal(result.content, null, "no content when only tools are called");
        assert.equal(result.toolCalls.length, 1);
        const call = result.toolCalls[0]!;
        assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
        assert.equal(call.type, "function");
        assert.equal(call.function.name, "get_weather");
        weatherArguments.parse(JSON.parse(call.function.arguments));
      }
    });

    it(`calls one tool for tool_choice required without parallel calls (${mode})`, async () => {
      const result = await run({ model: "stories260K", messages: ask, temperature: 0, max_tokens: 200, tools: [weather, clock], tool_choice: "required", parallel_tool_calls: false }, stream);
      assert.equal(result.finishReason, "tool_calls");
      assert.equal(result.toolCalls.length, 1);
      const call = result.toolCalls[0]!;
      assert.ok(["get_weather", "get_time"].includes(call.function.name));
      const parsed = JSON.parse(call.function.arguments);
      if (call.function.name === "get_weather") weatherArguments.parse(parsed);
      else assert.deepEqual(parsed, {});
    });

    it(`answers tool_choice auto with well-formed text or calls (${mode})`, async () => {
      const result = await run({ model: "stories260K", messages: ask, temperature: 0, max_tokens: 40, tools: [weather] }, stream);
      if (result.toolCalls.length > 0) {
        assert.equal(result.finishReason, "tool_calls");
        for (const call of result.toolCalls) weatherArguments.parse(JSON.parse(call.function.arguments));
      } else {
        assert.ok(["stop", "length"].includes(result.finishReason!));
        assert.equal(typeof result.content, "string");
        assert.ok(result.content!.length > 0);
      }
    });

    it(`never calls a tool for tool_choice none (${mode})`, async () => {
      const result = await run({ model: "stories260K", messages: ask, temperature: 0, max_tokens: 20, tools: [weather], tool_choice: "none" }, stream);
      assert.deepEqual(result.toolCalls, []);
      assert.equal(typeof result.content, "string");
      assert.notEqual(result.finishReason, "tool_calls");
    });

    it(`continues a conversation holding tool calls and results (${mode})`, async () => {
      const result = await run(
        {
          model: "stories260K",
          temperature: 0,
          max_tokens: 20,
          tools: [weather],
          messages: [
            ...ask,
            { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris","days":1}' } }] },
            { role: "tool", tool_call_id: "call_1", content: '{"forecast":"sunny"}' },
          ],
        },
        stream,
      );
      assert.ok(result.content === null || typeof result.content === "string");
      assert.ok(result.usage.prompt_tokens > 0);
    });
  }

  it("streams the same call it answers whole, with the same usage", async () => {
    const params: Params = { model: "stories260K", messages: ask, temperature: 0, max_tokens: 200, tools: [weather], tool_choice: { type: "function", function: { name: "get_weather" } } };
    const whole = await run(params, false);
    const streamed = await run(params, true);
    assert.equal(streamed.toolCalls[0]!.function.arguments, whole.toolCalls[0]!.function.arguments);
    assert.deepEqual(streamed.usage, whole.usage);
  });

  it("streams a first delta with null content when the reply can only be tool calls", async () => {
    const chunks = [];
    const stream = await test.client.chat.completions.create({
      model: "stories260K",
      messages: ask,
      temperature: 0,
      max_tokens: 200,
      tools: [weather],
      tool_choice: "required",
      parallel_tool_calls: false,
      stream: true,
    });
    for await (const chunk of stream) chunks.push(chunk);
    assert.deepEqual(chunks[0]!.choices[0]!.delta, { role: "assistant", content: null, refusal: null });
  });

  for (const stream of [false, true]) {
    it(`answers auto with calls or with content in the response format (${stream ? "streaming" : "non-streaming"})`, async () => {
      const reply = z.object({ answer: z.string().max(20) }).strict();
      const result = await run(
        {
          model: "stories260K",
          messages: ask,
          temperature: 0,
          max_tokens: 200,
          tools: [weather],
          tool_choice: "auto",
          parallel_tool_calls: false,
          response_format: { type: "json_schema", json_schema: { name: "reply", schema: z.toJSONSchema(reply) as Record<string, unknown> } },
        },
        stream,
      );
      if (result.toolCalls.length > 0) {
        assert.equal(result.finishReason, "tool_calls");
        assert.equal(result.toolCalls.length, 1);
        weatherArguments.parse(JSON.parse(result.toolCalls[0]!.function.arguments));
      } else {
        assert.equal(result.finishReason, "stop");
        reply.parse(JSON.parse(result.content!));
      }
    });
  }

  it("documents the tools in the prompt, which the prompt tokens show", async () => {
    const without = await run({ model: "stories260K", messages: ask, max_tokens: 1 }, false);
    const withTools = await run({ model: "stories260K", messages: ask, max_tokens: 1, tools: [weather] }, false);
    assert.ok(withTools.usage.prompt_tokens > without.usage.prompt_tokens + 20);
  });

  it("answers finish_reason length when max_tokens cuts a call", async () => {
    const result = await run({ model: "stories260K", messages: ask, temperature: 0, max_tokens: 12, tools: [weather], tool_choice: "required" }, false);
    assert.equal(result.finishReason, "length");
    assert.equal(result.usage.completion_tokens, 12);
  });

  it("runs a tool with the SDK's runTools and continues with its result", async () => {
    const seen: unknown[] = [];
    const runner = test.client.chat.completions.runTools({
      model: "stories260K",
      messages: ask,
      temperature: 0,
      max_tokens: 200,
      tool_choice: { type: "function", function: { name: "get_weather" } },
      tools: [
        runnableWeather((args) => {
          seen.push(args);
          return { forecast: "sunny", city: args.city };
        }),
      ],
    });
    await runner.done();
    assert.equal(seen.length, 1, "the tool ran once with parsed arguments");
    const messages = runner.messages;
    assert.equal(messages.at(-1)!.role, "tool");
    // The conversation the SDK built goes back to the server as it is.
    const next = await test.client.chat.completions.create({ model: "stories260K", messages, temperature: 0, max_tokens: 20, tools: [weather], tool_choice: "none" });
    assert.equal(next.choices[0]!.message.tool_calls, undefined);
    assert.equal(typeof next.choices[0]!.message.content, "string");
  });

  it("runs a tool with runTools while streaming", async () => {
    let calls = 0;
    const runner = test.client.chat.completions.runTools({
      model: "stories260K",
      messages: ask,
      temperature: 0,
      max_tokens: 200,
      stream: true,
      tool_choice: { type: "function", function: { name: "get_weather" } },
      tools: [
        runnableWeather(() => {
          calls++;
          return "sunny";
        }),
      ],
    });
    await runner.done();
    assert.equal(calls, 1);
  });
});

describe("tool request errors", () => {
  const chatUrl = () => `${test.baseURL}/chat/completions`;
  const auth = () => ({ authorization: `Bearer ${test.key}` });
  const post = (fields: Record<string, unknown>) => postJson(chatUrl(), { model: "stories260K", messages: ask, max_tokens: 5, ...fields }, auth());
  const assertError = (response: Awaited<ReturnType<typeof post>>, param: string, code = "invalid_request_error") => {
    assert.equal(response.status, 400, response.text);
    assert.deepEqual(Object.keys(response.body.error).sort(), ["code", "message", "param", "type"]);
    assert.equal(response.body.error.type, "invalid_request_error");
    assert.equal(response.body.error.code, code);
    assert.equal(response.body.error.param, param);
  };

  it("answers 400 naming tool_choice when it names an unknown function", async () => {
    assertError(await post({ tools: [weather], tool_choice: { type: "function", function: { name: "get_stock" } } }), "tool_choice");
  });

  it("answers 400 naming tool_choice when a call is required but there are no tools", async () => {
    assertError(await post({ tool_choice: "required" }), "tool_choice");
  });

  it("answers 400 naming the field of a malformed tool", async () => {
    assertError(await post({ tools: [{ type: "function", function: { description: "no name" } }] }), "tools[0].function.name");
    assertError(await post({ tools: [{ type: "function", function: { name: "has space" } }] }), "tools[0].function.name");
    assertError(await post({ tools: [{ type: "custom", custom: { name: "x" } }] }), "tools[0].type");
    assertError(await post({ tools: [weather, weather] }), "tools[1].function.name");
    assertError(await post({ tools: [weather], tool_choice: "sometimes" }), "tool_choice");
  });

  it("answers 400 naming a parameters keyword the grammar cannot enforce", async () => {
    const tool = { type: "function", function: { name: "f", parameters: { type: "object", properties: { code: { type: "string", pattern: "^[A-Z]{3}$" } } } } };
    assertError(await post({ tools: [tool] }), "tools[0].function.parameters.properties.code.pattern", "unsupported_parameter");
  });

  it("answers 400 for parameters that are not an object schema", async () => {
    assertError(await post({ tools: [{ type: "function", function: { name: "f", parameters: { type: "string" } } }] }), "tools[0].function.parameters", "unsupported_parameter");
  });

  it("answers 400 naming the tool message whose tool_call_id answers no call", async () => {
    const response = await post({
      tools: [weather],
      messages: [
        ...ask,
        { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "call_2", content: "sunny" },
      ],
    });
    assertError(response, "messages[2].tool_call_id");
    assert.match(response.body.error.message, /call_2/);
  });

  it("answers 400 naming tool call arguments that are not JSON", async () => {
    const response = await post({
      messages: [...ask, { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{city" } }] }],
    });
    assertError(response, "messages[1].tool_calls[0].function.arguments");
  });
});
