/**
 * End-to-end: the Vercel AI SDK's OpenAI provider, whose default language model speaks the
 * Responses API (`createOpenAI({ baseURL, apiKey }).responses(modelId)`), against a real server on
 * the stories260K models: `generateText` and `streamText`, with text and with a forced function
 * call. What the provider sent is recorded (through its `fetch` option) and checked; what it
 * parsed from our answers must match what the server stored.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, jsonSchema, streamText, tool } from "ai";
import { startTestServer, storiesChatmlModel, storiesModel, type TestServer } from "./helpers/server.ts";

let test: TestServer;
/** The JSON bodies the provider POSTed, in order. */
const sent: Array<{ url: string; body: Record<string, any> }> = [];
let openai: ReturnType<typeof createOpenAI>;

before(async () => {
  test = await startTestServer({ flags: { models: [storiesModel, `chatml=${storiesChatmlModel}`] } });
  openai = createOpenAI({
    baseURL: test.baseURL,
    apiKey: test.key,
    fetch: async (input, init) => {
      if (typeof init?.body === "string") sent.push({ url: String(input), body: JSON.parse(init.body) as Record<string, any> });
      return fetch(input, init);
    },
  });
});
after(async () => {
  await test?.close();
});

async function stored(id: string): Promise<Record<string, any>> {
  const response = await fetch(`${test.baseURL}/responses/${id}`, { headers: { authorization: `Bearer ${test.key}` } });
  assert.equal(response.status, 200);
  return (await response.json()) as Record<string, any>;
}

function lastSent() {
  const last = sent.at(-1)!;
  assert.equal(last.url, `${test.baseURL}/responses`, "the provider's default model speaks the Responses API");
  return last.body;
}

const storedText = (resource: Record<string, any>) => resource.output[0].content[0].text as string;

const weather = tool({
  description: "The weather in a city.",
  inputSchema: jsonSchema<{ city: string }>({ type: "object", properties: { city: { type: "string", maxLength: 20 } }, required: ["city"], additionalProperties: false }),
});

describe("the AI SDK's OpenAI provider (the Responses API)", () => {
  it("generateText: sends a Responses request, and reads the text, the finish reason and the usage", async () => {
    const result = await generateText({ model: openai.responses("stories260K"), system: "You tell stories.", prompt: "Once upon a time", maxOutputTokens: 16, temperature: 0 });
    const body = lastSent();
    assert.equal(body.model, "stories260K");
    assert.equal(body.max_output_tokens, 16);
    assert.equal(body.temperature, 0);
    assert.equal(body.stream, undefined);
    assert.deepEqual(body.input[0], { role: "system", content: "You tell stories." });
    assert.deepEqual(body.input[1], { role: "user", content: [{ type: "input_text", text: "Once upon a time" }] });
    const id = result.response.id;
    assert.match(id, /^resp_/);
    const resource = await stored(id);
    assert.equal(result.text, storedText(resource));
    assert.ok(result.text.length > 0);
    assert.equal(result.finishReason, "length", "incomplete at max_output_tokens reads as length");
    assert.equal(result.usage.inputTokens, resource.usage.input_tokens);
    assert.equal(result.usage.outputTokens, 16);
    assert.equal(result.response.modelId, "stories260K");
    assert.deepEqual(result.warnings, []);
  });

  it("streamText: reads the streamed text, finish reason and usage, equal to the stored response", async () => {
    const result = streamText({ model: openai.responses("stories260K"), prompt: "Once upon a time", maxOutputTokens: 16, temperature: 0 });
    let streamedText = "";
    const errors: unknown[] = [];
    for await (const part of result.fullStream) {
      if (part.type === "text-delta") streamedText += part.text;
      if (part.type === "error") errors.push(part.error);
    }
    assert.deepEqual(errors, []);
    assert.equal(lastSent().stream, true);
    const resource = await stored((await result.response).id);
    assert.equal(streamedText, storedText(resource));
    assert.equal(await result.text, streamedText);
    assert.equal(await result.finishReason, "length");
    const usage = await result.usage;
    assert.equal(usage.inputTokens, resource.usage.input_tokens);
    assert.equal(usage.outputTokens, 16);
    // The same answer as generateText at temperature 0.
    const generated = await generateText({ model: openai.responses("stories260K"), prompt: "Once upon a time", maxOutputTokens: 16, temperature: 0 });
    assert.equal(generated.text, streamedText);
  });

  for (const stream of [false, true]) {
    it(`a function call forced by toolChoice (${stream ? "streamText" : "generateText"}): sent as a function tool and a named tool_choice, parsed as a tool call`, async () => {
      const options = {
        model: openai.responses("chatml"),
        prompt: "What is the weather in Paris?",
        tools: { get_weather: weather },
        toolChoice: { type: "tool", toolName: "get_weather" } as const,
        maxOutputTokens: 64,
        temperature: 0,
      };
      let toolCalls: Array<{ toolCallId: string; toolName: string; input: unknown }>;
      let finishReason: string;
      let id: string;
      if (stream) {
        const result = streamText(options);
        const errors: unknown[] = [];
        let inputDeltas = "";
        for await (const part of result.fullStream) {
          if (part.type === "error") errors.push(part.error);
          if (part.type === "tool-input-delta") inputDeltas += part.delta;
        }
        assert.deepEqual(errors, []);
        toolCalls = await result.toolCalls;
        finishReason = await result.finishReason;
        id = (await result.response).id;
        assert.equal(inputDeltas, (await stored(id)).output[0].arguments, "the argument deltas spell the arguments");
      } else {
        const result = await generateText(options);
        toolCalls = result.toolCalls;
        finishReason = result.finishReason;
        id = result.response.id;
      }
      const body = lastSent();
      assert.deepEqual(body.tool_choice, { type: "function", name: "get_weather" });
      assert.equal(body.tools.length, 1);
      assert.equal(body.tools[0].type, "function");
      assert.equal(body.tools[0].name, "get_weather");
      assert.deepEqual(body.tools[0].parameters.required, ["city"]);
      const resource = await stored(id);
      assert.equal(resource.output.length, 1);
      const call = resource.output[0];
      assert.equal(call.type, "function_call");
      assert.equal(toolCalls.length, 1);
      assert.equal(toolCalls[0]!.toolName, "get_weather");
      assert.equal(toolCalls[0]!.toolCallId, call.call_id);
      assert.deepEqual(toolCalls[0]!.input, JSON.parse(call.arguments));
      assert.equal(typeof (toolCalls[0]!.input as { city: string }).city, "string");
      assert.equal(finishReason, "tool-calls");
    });
  }

  it("continues with the tool's result: the provider's function_call and function_call_output items are accepted", async () => {
    const first = await generateText({
      model: openai.responses("chatml"),
      prompt: "What is the weather in Paris?",
      tools: { get_weather: tool({ ...weather, execute: async () => ({ weather: "sunny" }) }) },
      toolChoice: { type: "tool", toolName: "get_weather" },
      maxOutputTokens: 64,
      temperature: 0,
    });
    assert.equal(first.toolResults.length, 1);
    const second = await generateText({ model: openai.responses("chatml"), messages: [{ role: "user", content: "What is the weather in Paris?" }, ...first.response.messages], maxOutputTokens: 16, temperature: 0 });
    const body = lastSent();
    const types = (body.input as Array<{ type?: string; role?: string }>).map((item) => item.type ?? item.role);
    // The provider sends the call back as an item, then its output.
    assert.deepEqual(types, ["user", "function_call", "function_call_output"]);
    assert.ok(second.text.length > 0);
    assert.equal((await stored(second.response.id)).status, "incomplete");
  });
});
