/**
 * End-to-end: structured output and tool calls through the Vercel AI SDK (`@ai-sdk/openai-compatible`)
 * and LangChain (`@langchain/openai`), pointed at a real server with the stories260K model, served
 * in-process and, the same suite again, from an upstream (a second Turnpike node in front of the first).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { concat } from "@langchain/core/utils/stream";
import { ChatOpenAI } from "@langchain/openai";
import { generateObject, generateText, stepCountIs, streamObject, streamText, tool } from "ai";
import { z } from "zod";
import fs from "node:fs";
import path from "node:path";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

/** The server the suite talks to: the embedded model, or a node serving it from another node. */
type Target = { name: string; start(): Promise<{ test: TestServer; close(): Promise<void> }> };

const targets: Target[] = [
  {
    name: "embedded",
    start: async () => {
      const test = await startTestServer();
      return { test, close: () => test.close() };
    },
  },
  {
    name: "upstream",
    start: async () => {
      const upstream = await startTestServer({ flags: { models: [storiesModel], parallel: "2" } });
      const configDir = temporaryDirectory("turnpike-sdk-upstream-");
      const configFile = path.join(configDir, "turnpike.json");
      fs.writeFileSync(configFile, JSON.stringify({ models: [{ id: "stories260K", upstream: { urls: [upstream.baseURL], api_key_env: "TURNPIKE_TEST_SDK_UPSTREAM_KEY" } }] }));
      const test = await startTestServer({ configFile, env: { TURNPIKE_TEST_SDK_UPSTREAM_KEY: upstream.key } });
      return {
        test,
        close: async () => {
          await test.close();
          await upstream.close();
          fs.rmSync(configDir, { recursive: true, force: true });
        },
      };
    },
  },
];

for (const target of targets) describe(`SDKs against a model served ${target.name === "embedded" ? "in-process" : "from an upstream"}`, () => {
let test: TestServer;
let running: { close(): Promise<void> } | undefined;

before(async () => {
  const started = await target.start();
  test = started.test;
  running = started;
});
after(async () => {
  await running?.close();
});

const pet = z.object({
  name: z.string().max(20),
  legs: z.number().int(),
  kind: z.enum(["cat", "dog", "bird"]),
});
const weatherInput = z.object({ city: z.string().max(20), days: z.number().int() });

describe("Vercel AI SDK", () => {
  const model = () =>
    createOpenAICompatible({ name: "turnpike", baseURL: test.baseURL, apiKey: test.key, supportsStructuredOutputs: true, includeUsage: true })("stories260K");

  it("generates an object that validates (generateObject)", async () => {
    const result = await generateObject({ model: model(), schema: pet, prompt: "Describe a pet.", temperature: 0, maxOutputTokens: 200, maxRetries: 0 });
    pet.parse(result.object);
    assert.equal(result.finishReason, "stop");
    assert.ok((result.usage.outputTokens ?? 0) > 0);
  });

  it("streams an object that validates (streamObject)", async () => {
    const result = streamObject({ model: model(), schema: pet, prompt: "Describe a pet.", temperature: 0, maxOutputTokens: 200, maxRetries: 0 });
    let partials = 0;
    for await (const _partial of result.partialObjectStream) partials++;
    pet.parse(await result.object);
    assert.ok(partials > 1, "the object arrives in pieces");
  });

  const weather = (calls: unknown[]) =>
    tool({
      description: "The weather forecast for a city.",
      inputSchema: weatherInput,
      execute: async (input) => {
        calls.push(input);
        return { forecast: "sunny" };
      },
    });

  it("calls a tool and runs it (generateText)", async () => {
    const calls: unknown[] = [];
    const result = await generateText({
      model: model(),
      prompt: "What is the weather in Paris?",
      tools: { get_weather: weather(calls) },
      toolChoice: { type: "tool", toolName: "get_weather" },
      stopWhen: stepCountIs(1),
      temperature: 0,
      maxOutputTokens: 200,
      maxRetries: 0,
    });
    assert.equal(result.finishReason, "tool-calls");
    assert.equal(result.toolCalls.length, 1);
    assert.equal(result.toolCalls[0]!.toolName, "get_weather");
    weatherInput.parse(result.toolCalls[0]!.input);
    assert.equal(calls.length, 1);
    assert.deepEqual(result.toolResults[0]!.output, { forecast: "sunny" });
  });

  it("calls a tool, then answers from its result in a second step (streamText)", async () => {
    const calls: unknown[] = [];
    const result = streamText({
      model: model(),
      prompt: "What is the weather in Paris?",
      tools: { get_weather: weather(calls) },
      prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? { type: "tool" as const, toolName: "get_weather" as const } : ("none" as const) }),
      stopWhen: stepCountIs(2),
      temperature: 0,
      maxOutputTokens: 150,
      maxRetries: 0,
    });
    const steps = await result.steps;
    assert.equal(steps.length, 2);
    assert.equal(steps[0]!.finishReason, "tool-calls");
    weatherInput.parse(steps[0]!.toolCalls[0]!.input);
    assert.equal(calls.length, 1);
    assert.equal(steps[1]!.toolCalls.length, 0);
    assert.equal(typeof (await result.text), "string");
  });
});

describe("LangChain", () => {
  const chat = () =>
    new ChatOpenAI({ model: "stories260K", apiKey: test.key, configuration: { baseURL: test.baseURL }, temperature: 0, maxTokens: 200, maxRetries: 0 });

  for (const method of ["jsonSchema", "functionCalling"] as const) {
    it(`returns a validated object from withStructuredOutput (${method})`, async () => {
      const structured = chat().withStructuredOutput(pet, { method, name: "pet" });
      pet.parse(await structured.invoke("Describe a pet."));
    });
  }

  it("streams withStructuredOutput", async () => {
    const structured = chat().withStructuredOutput(pet, { method: "jsonSchema", name: "pet" });
    let last: unknown;
    for await (const value of await structured.stream("Describe a pet.")) last = value;
    pet.parse(last);
  });

  const weatherTool = { type: "function" as const, function: { name: "get_weather", description: "The weather forecast for a city.", parameters: z.toJSONSchema(weatherInput) } };

  it("binds tools and reads the call (bindTools)", async () => {
    const message = await chat().bindTools([weatherTool], { tool_choice: "get_weather" }).invoke("What is the weather in Paris?");
    assert.equal(message.tool_calls?.length, 1);
    assert.equal(message.tool_calls![0]!.name, "get_weather");
    assert.match(message.tool_calls![0]!.id ?? "", /^call_/);
    weatherInput.parse(message.tool_calls![0]!.args);
    assert.equal(message.response_metadata.finish_reason, "tool_calls");
  });

  it("streams a bound tool's call in chunks that add up", async () => {
    const stream = await chat().bindTools([weatherTool], { tool_choice: "get_weather" }).stream("What is the weather in Paris?");
    let whole;
    let chunks = 0;
    for await (const chunk of stream) {
      whole = whole === undefined ? chunk : concat(whole, chunk);
      chunks++;
    }
    assert.ok(chunks > 2);
    assert.equal(whole!.tool_calls?.length, 1);
    weatherInput.parse(whole!.tool_calls![0]!.args);
  });
});
});
