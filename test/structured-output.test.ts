/**
 * End-to-end: JSON mode and JSON schemas on the real stories260K model, through the official
 * `openai` client (`chat.completions.parse` with zod, streaming and not). The story model
 * writes nonsense, but the grammar makes it nonsense of the right shape.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";
import { isJsonPrefix } from "./helpers/json.ts";
import { postJson, startTestServer, storiesChatmlModel, storiesModel, type TestServer } from "./helpers/server.ts";

type Params = OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming;

let test: TestServer;

before(async () => {
  test = await startTestServer({ flags: { models: [storiesModel, `chatml=${storiesChatmlModel}`] } });
});
after(async () => {
  await test?.close();
});

/** The reply text, finish reason and usage, streamed (deltas concatenated) or not. */
async function run(params: Params, stream: boolean) {
  if (!stream) {
    const completion = await test.client.chat.completions.create(params);
    const choice = completion.choices[0]!;
    return { content: choice.message.content ?? "", finishReason: choice.finish_reason, usage: completion.usage! };
  }
  const chunks = [];
  for await (const chunk of await test.client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } })) chunks.push(chunk);
  const choiceChunks = chunks.filter((chunk) => chunk.choices.length > 0);
  const finish = choiceChunks.filter((chunk) => chunk.choices[0]!.finish_reason !== null);
  assert.equal(finish.length, 1, "exactly one chunk has a finish_reason");
  return {
    content: choiceChunks.map((chunk) => chunk.choices[0]!.delta.content ?? "").join(""),
    finishReason: finish[0]!.choices[0]!.finish_reason,
    usage: chunks.at(-1)!.usage!,
  };
}

const person = z.object({
  name: z.string().max(24),
  age: z.number().int().nullable(),
  kind: z.enum(["cat", "dog", "bird"]),
  friends: z.array(z.object({ name: z.string().max(12), close: z.boolean() })).max(2),
  note: z.union([z.string().max(16), z.null()]),
});

const ask = [{ role: "user" as const, content: "Tell me about a pet." }];

describe("response_format json_schema", () => {
  for (const stream of [false, true]) {
    it(`always writes JSON that validates against the schema (${stream ? "streaming" : "non-streaming"})`, async () => {
      for (const model of ["stories260K", "chatml"]) {
        const result = await run({ model, messages: ask, temperature: 0, max_tokens: 400, response_format: zodResponseFormat(person, "person") }, stream);
        assert.equal(result.finishReason, "stop", result.content);
        const parsed = person.parse(JSON.parse(result.content));
        assert.ok(parsed.friends.length <= 2);
      }
    });
  }

  it("streams the same text it answers whole, with the same usage", async () => {
    const params: Params = { model: "stories260K", messages: ask, temperature: 0, max_tokens: 400, response_format: zodResponseFormat(person, "person") };
    const whole = await run(params, false);
    const streamed = await run(params, true);
    assert.equal(streamed.content, whole.content);
    assert.deepEqual(streamed.usage, whole.usage);
  });

  it("parses into typed objects with the SDK's chat.completions.parse", async () => {
    const completion = await test.client.chat.completions.parse({
      model: "stories260K",
      messages: ask,
      temperature: 0,
      max_tokens: 400,
      response_format: zodResponseFormat(person, "person"),
    });
    const message = completion.choices[0]!.message;
    assert.ok(message.parsed !== null);
    assert.ok(["cat", "dog", "bird"].includes(message.parsed.kind));
    assert.equal(message.parsed.name.length <= 24, true);
  });

  it("parses a streamed reply with the SDK's chat.completions.stream", async () => {
    const stream = test.client.chat.completions.stream({
      model: "stories260K",
      messages: ask,
      temperature: 0,
      max_tokens: 400,
      response_format: zodResponseFormat(person, "person"),
    });
    const final = await stream.finalChatCompletion();
    assert.ok(final.choices[0]!.message.parsed !== null);
    person.parse(final.choices[0]!.message.parsed);
  });

  it("handles $defs references and recursion", async () => {
    const schema = {
      type: "object",
      properties: { tree: { $ref: "#/$defs/node" } },
      required: ["tree"],
      additionalProperties: false,
      $defs: {
        node: {
          type: "object",
          properties: { label: { type: "string", maxLength: 8 }, children: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 1 } },
          required: ["label", "children"],
          additionalProperties: false,
        },
      },
    };
    const result = await run({ model: "stories260K", messages: ask, temperature: 0, max_tokens: 300, response_format: { type: "json_schema", json_schema: { name: "tree", schema, strict: true } } }, false);
    const parsed = JSON.parse(result.content) as { tree: { label: string; children: unknown[] } };
    assert.equal(typeof parsed.tree.label, "string");
    assert.ok(Array.isArray(parsed.tree.children));
  });

  for (const stream of [false, true]) {
    it(`answers finish_reason length with a JSON prefix when max_tokens cuts the reply (${stream ? "streaming" : "non-streaming"})`, async () => {
      const result = await run({ model: "stories260K", messages: ask, temperature: 0, max_tokens: 6, response_format: zodResponseFormat(person, "person") }, stream);
      assert.equal(result.finishReason, "length");
      assert.equal(result.usage.completion_tokens, 6);
      assert.ok(isJsonPrefix(result.content), result.content);
      assert.throws(() => JSON.parse(result.content));
    });
  }
});

describe("response_format json_object", () => {
  for (const stream of [false, true]) {
    it(`writes a JSON object (${stream ? "streaming" : "non-streaming"})`, async () => {
      // The story model never closes an open-ended object, so the reply is cut by max_tokens:
      // what it wrote is the beginning of a JSON object, never anything else.
      const result = await run({ model: "stories260K", messages: ask, temperature: 0, max_tokens: 60, response_format: { type: "json_object" } }, stream);
      assert.ok(result.content.startsWith("{"), result.content);
      assert.ok(isJsonPrefix(result.content), result.content);
      assert.equal(result.finishReason, "length");
      assert.equal(result.usage.completion_tokens, 60);
    });
  }

  it("streams the same object it answers whole", async () => {
    const params: Params = { model: "stories260K", messages: ask, temperature: 0, max_tokens: 40, response_format: { type: "json_object" } };
    assert.equal((await run(params, true)).content, (await run(params, false)).content);
  });

  it("treats json_schema without a schema as json_object", async () => {
    const response = await postJson(
      `${test.baseURL}/chat/completions`,
      { model: "stories260K", messages: ask, temperature: 0, max_tokens: 10, response_format: { type: "json_schema", json_schema: { name: "any" } } },
      { authorization: `Bearer ${test.key}` },
    );
    assert.equal(response.status, 200, response.text);
    assert.ok(isJsonPrefix(response.body.choices[0].message.content));
  });
});

describe("response_format errors", () => {
  const chatUrl = () => `${test.baseURL}/chat/completions`;
  const auth = () => ({ authorization: `Bearer ${test.key}` });
  const post = (format: unknown) => postJson(chatUrl(), { model: "stories260K", messages: ask, response_format: format }, auth());

  it("answers 400 naming a schema keyword the grammar cannot enforce", async () => {
    const response = await post({
      type: "json_schema",
      json_schema: { name: "x", schema: { type: "object", properties: { email: { type: "string", pattern: "^.+@.+$" } } } },
    });
    assert.equal(response.status, 400, response.text);
    assert.deepEqual(Object.keys(response.body.error).sort(), ["code", "message", "param", "type"]);
    assert.equal(response.body.error.type, "invalid_request_error");
    assert.equal(response.body.error.code, "unsupported_parameter");
    assert.equal(response.body.error.param, "response_format.json_schema.schema.properties.email.pattern");
    assert.match(response.body.error.message, /pattern/);
  });

  it("answers 400 for a numeric bound from zod, naming it", async () => {
    const response = await post(zodResponseFormat(z.object({ age: z.number().min(0) }), "x"));
    assert.equal(response.status, 400, response.text);
    assert.equal(response.body.error.param, "response_format.json_schema.schema.properties.age.minimum");
  });

  it("answers 400 for an unknown response_format type and a json_schema without a name", async () => {
    let response = await post({ type: "yaml" });
    assert.equal(response.status, 400, response.text);
    assert.equal(response.body.error.param, "response_format.type");
    response = await post({ type: "json_schema", json_schema: { schema: { type: "object" } } });
    assert.equal(response.status, 400, response.text);
    assert.equal(response.body.error.param, "response_format.json_schema.name");
  });

  it("bills and logs the exact usage of a structured request", async () => {
    const completion = await test.client.chat.completions.create({
      model: "stories260K",
      messages: ask,
      temperature: 0,
      max_tokens: 400,
      response_format: zodResponseFormat(person, "person"),
    });
    const line = test.logs().filter((entry) => entry.msg === "chat completion").at(-1)!;
    assert.equal(line.prompt_tokens, completion.usage!.prompt_tokens);
    assert.equal(line.completion_tokens, completion.usage!.completion_tokens);
    assert.equal(line.finish_reason, "stop");
  });
});
