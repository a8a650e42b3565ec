/**
 * The Messages API's shapes on the scripted fake engine, where what matters is the order and form
 * of what is sent, not the model: thinking, text and a tool use streamed as blocks 0, 1, 2 (tool
 * input as JSON fragments after `input: {}`), `ping` events while the generation is quiet, a
 * failure mid-stream ending with one `error` event, cached prompt tokens reported once, and a
 * full queue answered 529 `overloaded_error` with `retry-after`. Raw streams are checked event by
 * event against the spec's grammar, and the SDK's `finalMessage()` against the non-streamed answer.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import { FakeEngine, FakeGate, fakePromptTokens, type ChoiceScript } from "../src/engines/fake/fake-engine.ts";
import type { GenerationRequest } from "../src/engines/engine.ts";
import { checkMessageStream, messageSchema } from "./helpers/messages-schemas.ts";
import { parseSse } from "./helpers/sse-events.ts";
import { postJson, startTestServer, type TestServer } from "./helpers/server.ts";

/** What each model's fake generates, by the request's first user text. */
const SCRIPTS: Record<string, ChoiceScript> = {
  "think and call": {
    steps: [{ reasoning: "The user" }, { reasoning: " wants weather." }, { text: "Let me" }, { text: " look." }, { toolCall: { id: "call_42", name: "get_weather", arguments: ['{"city":', ' "Paris"', "}"] } }],
    finish: "tool_calls",
  },
  "slow": { steps: [{ text: "Wait" }, { waitMs: 700 }, { text: " for it." }] },
  "fail": { steps: [{ text: "Half" }, { fail: new Error("the upstream broke mid-stream") }] },
};

function firstText(request: GenerationRequest): string {
  return request.messages.find((message) => message.role === "user")?.content ?? "";
}

let server: TestServer;
let client: Anthropic;
const gate = new FakeGate();
const engine = new FakeEngine({ script: (request) => [SCRIPTS[firstText(request)] ?? { steps: [{ text: "Hello" }] }], cachedPromptTokens: 4 });
const narrow = new FakeEngine({ capacity: 1, queueSize: 0, script: () => [{ steps: [{ gate }, { text: "done" }] }] });
const headers = (key: string) => ({ "x-api-key": key, "anthropic-version": "2023-06-01" });
/** The affinity key of each request the `recording` model got (what an upstream pool routes by). */
const affinityKeys: Array<string | undefined> = [];
const recording = new FakeEngine({
  script: (request) => {
    affinityKeys.push(request.affinityKey);
    return [{ steps: [{ text: "ok" }] }];
  },
});

before(async () => {
  // A keep-alive of 0.2 s: the slow script's 0.7 s pause gets pings.
  server = await startTestServer({ engines: { fake: engine, narrow, recording }, flags: { keep_alive_interval: "0.2" } });
  client = new Anthropic({ baseURL: server.url, apiKey: server.key, maxRetries: 0 });
});
after(async () => {
  gate.release();
  await server?.close();
});

/** A raw stream: its events checked against the grammar. */
async function rawStream(body: Record<string, unknown>) {
  const response = await fetch(`${server.url}/v1/messages`, { method: "POST", headers: { "content-type": "application/json", ...headers(server.key) }, body: JSON.stringify({ ...body, stream: true }) });
  assert.equal(response.status, 200);
  assert.match(response.headers.get("content-type") ?? "", /^text\/event-stream/);
  assert.match(response.headers.get("request-id") ?? "", /\S/);
  const text = await response.text();
  return { text, events: parseSse(text), ...checkMessageStream(parseSse(text)) };
}

describe("Messages shapes on the fake engine", () => {
  it("streams thinking, text and a tool use as blocks 0, 1, 2, the tool's input in fragments after input: {}", async () => {
    const body = { model: "fake", max_tokens: 100, messages: [{ role: "user", content: "think and call" }], tools: [{ name: "get_weather", input_schema: { type: "object" } }] };
    const { problems, replayed, events } = await rawStream(body);
    assert.deepEqual(problems, []);
    assert.deepEqual(
      replayed!.names.filter((name) => name !== "ping"),
      [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
      ],
    );
    const toolStart = JSON.parse(events.find((event) => event.data.includes('"tool_use"'))!.data);
    assert.deepEqual(toolStart, { type: "content_block_start", index: 2, content_block: { type: "tool_use", id: "toolu_call_42", name: "get_weather", input: {} } });
    const prompt = fakePromptTokens({ messages: [{ role: "user", content: "think and call" }] } as unknown as GenerationRequest);
    const usage = { input_tokens: prompt - 4, cache_creation_input_tokens: 0, cache_read_input_tokens: 4, output_tokens: 7 };
    assert.deepEqual(replayed!.message.usage, { ...usage, service_tier: "standard" }, "the cached part once, in cache_read_input_tokens; the tier from message_start");
    assert.deepEqual(JSON.parse(events[0]!.data).message.usage, { ...usage, output_tokens: 0, service_tier: "standard" }, "message_start carries the input usage and the tier");
    // The same request, not streamed and through the SDK's stream: the same content.
    const message = await client.messages.create(body as unknown as Anthropic.MessageCreateParamsNonStreaming);
    assert.ok(messageSchema.safeParse(message).success);
    const expected = [
      { type: "thinking", thinking: "The user wants weather.", signature: "" },
      { type: "text", text: "Let me look." },
      { type: "tool_use", id: "toolu_call_42", name: "get_weather", input: { city: "Paris" } },
    ];
    assert.deepEqual(message.content, expected);
    assert.deepEqual([message.stop_reason, message.stop_sequence], ["tool_use", null]);
    assert.deepEqual(replayed!.message.content, expected);
    const final = await client.messages.stream(body as unknown as Anthropic.MessageCreateParamsNonStreaming).finalMessage();
    assert.deepEqual(JSON.parse(JSON.stringify(final.content)), expected);
  });

  it("sends ping events while the generation is quiet, after message_start, and the SDK reads past them", async () => {
    const { problems, replayed, text } = await rawStream({ model: "fake", max_tokens: 100, messages: [{ role: "user", content: "slow" }] });
    assert.deepEqual(problems, []);
    const names = replayed!.names;
    assert.ok(names.includes("ping"), text);
    assert.ok(names.indexOf("ping") > names.indexOf("message_start"), "pings follow message_start");
    assert.ok(text.includes("event: ping\ndata: {\"type\":\"ping\"}"), text);
    const final = await client.messages.stream({ model: "fake", max_tokens: 100, messages: [{ role: "user", content: "slow" }] }).finalMessage();
    assert.deepEqual(final.content, [{ type: "text", text: "Wait for it." }]);
  });

  it("ends a stream that fails mid-answer with one error event, nothing after; the SDK raises it", async () => {
    const { problems, replayed, events } = await rawStream({ model: "fake", max_tokens: 100, messages: [{ role: "user", content: "fail" }] });
    assert.deepEqual(problems, []);
    assert.equal(replayed!.names.at(-1), "error");
    assert.ok(!replayed!.names.includes("message_stop"));
    assert.equal(JSON.parse(events.at(-1)!.data).error.type, "api_error");
    const failed = await client.messages.stream({ model: "fake", max_tokens: 100, messages: [{ role: "user", content: "fail" }] }).finalMessage().then(() => assert.fail("finished"), (caught: unknown) => caught);
    assert.ok(failed instanceof Anthropic.APIError, String(failed));
  });

  it("validates a large body (Claude Code's, with its tools and system prompt) in the body worker, refusing a bad one in Anthropic's shape", async () => {
    const system = [{ type: "text", text: "You are an agent. ".repeat(20_000), cache_control: { type: "ephemeral" } }];
    const tools = Array.from({ length: 20 }, (_, index) => ({ name: `tool_${index}`, description: "A tool.", input_schema: { type: "object", properties: { path: { type: "string" } } } }));
    const body = { model: "fake", max_tokens: 32_000, system, tools, metadata: { user_id: "user_abc_account__session_123" }, messages: [{ role: "user", content: "Hi" }] };
    assert.ok(JSON.stringify(body).length > 300 * 1024);
    const answered = await postJson(`${server.url}/v1/messages?beta=true`, body, { ...headers(server.key), "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14" });
    assert.equal(answered.status, 200, answered.text);
    assert.ok(messageSchema.safeParse(answered.body).success, answered.text);
    const counted = await postJson(`${server.url}/v1/messages/count_tokens?beta=true`, { model: "fake", system, tools, messages: [{ role: "user", content: "Hi" }] }, headers(server.key));
    assert.equal(counted.status, 200, counted.text);
    assert.equal(counted.body.input_tokens, answered.body.usage.input_tokens + answered.body.usage.cache_read_input_tokens);
    const refused = await postJson(`${server.url}/v1/messages`, { ...body, max_tokens: undefined }, headers(server.key));
    assert.equal(refused.status, 400, refused.text);
    assert.equal(refused.body.type, "error");
    assert.equal(refused.body.error.type, "invalid_request_error");
    assert.match(refused.body.error.message, /max_tokens/);
  });

  it("routes by the first cache_control breakpoint: turns repeating its prefix share one affinity key, another prefix gets another", async () => {
    const system = [
      { type: "text" as const, text: "billing header" },
      { type: "text" as const, text: "You are a coding agent.", cache_control: { type: "ephemeral" as const } },
    ];
    const ask = (systemBlocks: typeof system, messages: Anthropic.MessageParam[]) => client.messages.create({ model: "recording", max_tokens: 16, system: systemBlocks, messages });
    affinityKeys.length = 0;
    await ask(system, [{ role: "user", content: [{ type: "text", text: "Fix the bug.", cache_control: { type: "ephemeral" } }] }]);
    await ask(system, [
      { role: "user", content: "Fix the bug." },
      { role: "assistant", content: "Done." },
      { role: "user", content: [{ type: "text", text: "Now the tests.", cache_control: { type: "ephemeral" } }] },
    ]);
    await ask([{ type: "text", text: "billing header" }, { type: "text", text: "You are a poet.", cache_control: { type: "ephemeral" } }], [{ role: "user", content: "Fix the bug." }]);
    await ask([{ type: "text", text: "No breakpoint." }], [{ role: "user", content: "Hi" }]);
    const [first, second, other, none] = affinityKeys;
    assert.match(first ?? "", /^cache_control:[0-9a-f]{64}$/);
    assert.equal(second, first, "the next turn repeats the prefix up to the first breakpoint");
    assert.notEqual(other, first);
    assert.equal(none, undefined, "no breakpoint: the pool's own prefix affinity");
  });

  it("answers a full queue with 529 overloaded_error and retry-after (the SDK's OverloadedError)", async () => {
    const running = client.messages.create({ model: "narrow", max_tokens: 10, messages: [{ role: "user", content: "Hi" }] });
    // Wait until the first request holds the only slot.
    for (let tries = 0; tries < 200 && narrow.running === 0; tries++) await new Promise((resolve) => setTimeout(resolve, 10));
    const refused = await postJson(`${server.url}/v1/messages`, { model: "narrow", max_tokens: 10, messages: [{ role: "user", content: "Hi" }] }, headers(server.key));
    assert.equal(refused.status, 529, refused.text);
    assert.equal(refused.body.error.type, "overloaded_error");
    assert.ok(refused.headers.get("retry-after"));
    const error = await client.messages.create({ model: "narrow", max_tokens: 10, messages: [{ role: "user", content: "Hi" }] }).then(() => assert.fail("answered"), (caught: unknown) => caught);
    assert.ok(error instanceof Anthropic.InternalServerError && error.status === 529, String(error));
    gate.release();
    assert.deepEqual((await running).content, [{ type: "text", text: "done" }]);
  });
});
