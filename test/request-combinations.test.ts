/**
 * Features of the request used together: several choices (`n`) with tools or a JSON schema,
 * and log probabilities with JSON mode. Real stories260K, the openai client, streamed and not.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type OpenAI from "openai";
import { startTestServer, type TestServer } from "./helpers/server.ts";

let test: TestServer;
before(async () => {
  test = await startTestServer();
});
after(async () => {
  await test?.close();
});

const weather: OpenAI.Chat.Completions.ChatCompletionTool = {
  type: "function",
  function: {
    name: "get_weather",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"], additionalProperties: false },
  },
};
const petSchema = {
  type: "object",
  properties: { name: { type: "string", maxLength: 10 }, legs: { type: "integer" } },
  required: ["name", "legs"],
  additionalProperties: false,
};
const messages = [{ role: "user" as const, content: "Tell me" }];

describe("several choices with tools", () => {
  it("calls the named tool in every choice, not streamed", async () => {
    const completion = await test.client.chat.completions.create({
      model: "stories260K",
      messages,
      n: 3,
      seed: 7,
      temperature: 0.8,
      max_tokens: 60,
      tools: [weather],
      tool_choice: { type: "function", function: { name: "get_weather" } },
    });
    assert.deepEqual(
      completion.choices.map((choice) => choice.index),
      [0, 1, 2],
    );
    for (const choice of completion.choices) {
      assert.equal(choice.finish_reason, "tool_calls");
      assert.equal(choice.message.content, null);
      const call = choice.message.tool_calls![0]!;
      assert.equal(call.type === "function" && call.function.name, "get_weather");
      assert.equal(typeof JSON.parse((call as { function: { arguments: string } }).function.arguments).city, "string");
    }
    assert.ok(completion.usage!.completion_tokens >= 3);
  });

  it("streams each choice's calls under its own index", async () => {
    const stream = await test.client.chat.completions.create({
      model: "stories260K",
      messages,
      n: 2,
      temperature: 0,
      max_tokens: 60,
      tools: [weather],
      tool_choice: "required",
      parallel_tool_calls: false,
      stream: true,
    });
    const argumentsOf = new Map<number, string>();
    const finished = new Map<number, string>();
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        for (const call of choice.delta.tool_calls ?? []) {
          if (call.id !== undefined) assert.equal(call.function?.name, "get_weather");
          argumentsOf.set(choice.index, (argumentsOf.get(choice.index) ?? "") + (call.function?.arguments ?? ""));
        }
        if (choice.finish_reason) finished.set(choice.index, choice.finish_reason);
      }
    }
    assert.deepEqual([...finished.entries()].sort(), [
      [0, "tool_calls"],
      [1, "tool_calls"],
    ]);
    for (const index of [0, 1]) assert.equal(typeof JSON.parse(argumentsOf.get(index)!).city, "string");
    // Greedy: both choices are the same call.
    assert.equal(argumentsOf.get(0), argumentsOf.get(1));
  });
});

describe("several choices with a JSON schema", () => {
  it("makes every choice valid against the schema", async () => {
    const completion = await test.client.chat.completions.create({
      model: "stories260K",
      messages,
      n: 2,
      seed: 3,
      max_tokens: 80,
      response_format: { type: "json_schema", json_schema: { name: "pet", schema: petSchema, strict: true } },
    });
    for (const choice of completion.choices) {
      const pet = JSON.parse(choice.message.content!);
      assert.equal(typeof pet.name, "string");
      assert.ok(Number.isInteger(pet.legs));
    }
  });
});

describe("log probabilities with JSON output", () => {
  it("reports tokens that spell out the JSON content", async () => {
    const completion = await test.client.chat.completions.create({
      model: "stories260K",
      messages,
      temperature: 0,
      max_tokens: 80,
      logprobs: true,
      top_logprobs: 2,
      response_format: { type: "json_schema", json_schema: { name: "pet", schema: petSchema, strict: true } },
    });
    const choice = completion.choices[0]!;
    const tokens = choice.logprobs!.content!;
    assert.equal(tokens.map((token) => token.token).join(""), choice.message.content);
    for (const token of tokens) {
      assert.ok(token.logprob <= 0);
      assert.ok(token.top_logprobs.length <= 2);
    }
    JSON.parse(choice.message.content!);
  });
});
