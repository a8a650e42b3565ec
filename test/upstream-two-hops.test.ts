/**
 * A Turnpike node as another's upstream: node A serves stories260K-chatml in-process; node B
 * serves the same model from A through the OpenAI-compatible upstream engine. Through two hops
 * the official `openai` client gets what A gives directly (the same text at temperature 0, the
 * same usage, tools, JSON schema, `n`, log probabilities), and B bills its metered key exactly
 * from the upstream's usage.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import OpenAI from "openai";
import { createAccount } from "../src/accounts/accounts.ts";
import { createApiKey } from "../src/auth/api-keys.ts";
import { checkLedger, grantCredit } from "../src/billing/ledger.ts";
import { costOf } from "../src/protocol/price.ts";
import { openStore } from "../src/store/open.ts";
import { startTestServer, storiesChatmlModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

/** 1 credit per prompt token, half for cached ones, 2 per completion token. */
const pricing = { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 };
const CREDIT = 1_000_000;

describe("a Turnpike node as the upstream of another", () => {
  let nodeA: TestServer;
  let nodeB: TestServer;
  let metered: OpenAI;
  let accountId: string;
  const configDir = temporaryDirectory("turnpike-two-hops-");

  before(async () => {
    nodeA = await startTestServer({ flags: { models: [`story=${storiesChatmlModel}`], parallel: "2" } });
    const configFile = path.join(configDir, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [{ id: "story-via-a", upstream: { urls: [nodeA.baseURL], model: "story", api_key_env: "TURNPIKE_TEST_HOP_KEY" }, pricing }],
      }),
    );
    nodeB = await startTestServer({ configFile, env: { TURNPIKE_TEST_HOP_KEY: nodeA.key } });
    const database = await openStore({ dataDir: nodeB.dataDir, databaseUrl: "" });
    try {
      const account = await createAccount(database, { email: "two-hops@example.com" });
      accountId = account.id;
      await grantCredit(database, { accountId, amount: CREDIT, source: "test:two-hops" });
      const key = await createApiKey(database, { name: "metered", accountId });
      metered = new OpenAI({ baseURL: nodeB.baseURL, apiKey: key.key, maxRetries: 0, timeout: 60_000 });
    } finally {
      await database.destroy();
    }
  });

  after(async () => {
    await nodeB?.close();
    await nodeA?.close();
    fs.rmSync(configDir, { recursive: true, force: true });
  });

  const ask = { messages: [{ role: "user" as const, content: "Tell me a story about a cat." }], temperature: 0, max_tokens: 24 };

  it("lists the upstream model as ready with its members and the upstream's context length", async () => {
    const models = await nodeB.client.models.list();
    const model = models.data.find((candidate) => candidate.id === "story-via-a") as unknown as {
      context_length: number;
      status: { state: string; members_healthy: number; members_total: number };
    };
    assert.ok(model !== undefined);
    assert.deepEqual(model.status, { state: "ready", members_healthy: 1, members_total: 1 });
    const direct = (await nodeA.client.models.list()).data.find((candidate) => candidate.id === "story") as unknown as { context_length: number };
    assert.equal(model.context_length, direct.context_length);
  });

  it("gives the same text and usage as the upstream called directly, streamed and not", async () => {
    const direct = await nodeA.client.chat.completions.create({ model: "story", ...ask });
    const viaB = await nodeB.client.chat.completions.create({ model: "story-via-a", ...ask });
    assert.equal(viaB.choices[0]!.message.content, direct.choices[0]!.message.content);
    assert.equal(viaB.choices[0]!.finish_reason, direct.choices[0]!.finish_reason);
    assert.equal(viaB.model, "story-via-a");
    assert.equal(viaB.usage?.prompt_tokens, direct.usage?.prompt_tokens);
    assert.equal(viaB.usage?.completion_tokens, direct.usage?.completion_tokens);

    const stream = await nodeB.client.chat.completions.create({ model: "story-via-a", ...ask, stream: true, stream_options: { include_usage: true } });
    let text = "";
    let usage: OpenAI.CompletionUsage | undefined;
    let first = true;
    for await (const chunk of stream) {
      if (first) assert.equal(chunk.choices[0]?.delta.role, "assistant", "the role comes first");
      first = false;
      assert.equal(chunk.model, "story-via-a");
      text += chunk.choices[0]?.delta.content ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(text, direct.choices[0]!.message.content);
    assert.equal(usage?.completion_tokens, direct.usage?.completion_tokens);
  });

  it("omits the usage chunk when the client did not ask for it (it is always asked upstream)", async () => {
    const stream = await nodeB.client.chat.completions.create({ model: "story-via-a", ...ask, stream: true });
    for await (const chunk of stream) assert.equal(chunk.usage, undefined);
  });

  it("passes tools through: a required call comes back as a tool call with JSON arguments", async () => {
    const tools: OpenAI.ChatCompletionTool[] = [
      { type: "function", function: { name: "get_weather", description: "Weather in a city.", parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"] } } },
    ];
    for (const stream of [false, true]) {
      const request = { model: "story-via-a", messages: ask.messages, max_tokens: 200, temperature: 0, tools, tool_choice: "required" as const, parallel_tool_calls: false };
      let calls: Array<{ name: string; arguments: string }>;
      if (!stream) {
        const completion = await nodeB.client.chat.completions.create(request);
        assert.equal(completion.choices[0]!.finish_reason, "tool_calls");
        calls = (completion.choices[0]!.message.tool_calls ?? []).map((call) => ({ name: (call as OpenAI.ChatCompletionMessageFunctionToolCall).function.name, arguments: (call as OpenAI.ChatCompletionMessageFunctionToolCall).function.arguments }));
      } else {
        const runner = nodeB.client.chat.completions.stream(request);
        const completion = await runner.finalChatCompletion();
        calls = (completion.choices[0]!.message.tool_calls ?? []).map((call) => ({ name: (call as OpenAI.ChatCompletionMessageFunctionToolCall).function.name, arguments: (call as OpenAI.ChatCompletionMessageFunctionToolCall).function.arguments }));
      }
      assert.equal(calls.length, 1, `one tool call came back (stream: ${stream})`);
      assert.equal(calls[0]!.name, "get_weather");
      assert.equal(typeof (JSON.parse(calls[0]!.arguments) as { city: unknown }).city, "string");
    }
  });

  it("passes a JSON schema through: the reply is JSON that follows it", async () => {
    const completion = await nodeB.client.chat.completions.create({
      model: "story-via-a",
      messages: ask.messages,
      max_tokens: 80,
      response_format: {
        type: "json_schema",
        json_schema: { name: "pet", strict: true, schema: { type: "object", properties: { name: { type: "string", maxLength: 10 }, age: { type: "integer" } }, required: ["name", "age"], additionalProperties: false } },
      },
    });
    const parsed = JSON.parse(completion.choices[0]!.message.content!) as { name: unknown; age: unknown };
    assert.equal(typeof parsed.name, "string");
    assert.ok(Number.isInteger(parsed.age));
  });

  it("passes n and log probabilities through, matching the upstream's own", async () => {
    const request = { ...ask, max_tokens: 6, n: 2, logprobs: true, top_logprobs: 2 };
    const direct = await nodeA.client.chat.completions.create({ model: "story", ...request });
    const viaB = await nodeB.client.chat.completions.create({ model: "story-via-a", ...request });
    assert.equal(viaB.choices.length, 2);
    assert.deepEqual(viaB.choices.map((choice) => choice.index), [0, 1]);
    for (const [index, choice] of viaB.choices.entries()) {
      const expected = direct.choices[index]!.logprobs!.content!;
      const got = choice.logprobs!.content!;
      assert.deepEqual(got.map((token) => token.token), expected.map((token) => token.token));
      assert.deepEqual(got.map((token) => token.bytes), expected.map((token) => token.bytes));
      for (const [position, token] of got.entries()) {
        assert.ok(Math.abs(token.logprob - expected[position]!.logprob) < 1e-6);
        assert.equal(token.top_logprobs.length, 2);
      }
    }
  });

  it("bills a metered key exactly from the upstream's usage, and says so in the usage record", async () => {
    const completion = await metered.chat.completions.create({ model: "story-via-a", ...ask });
    const usage = completion.usage!;
    const stream = await metered.chat.completions.create({ model: "story-via-a", ...ask, stream: true, stream_options: { include_usage: true } });
    let streamed: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) if (chunk.usage) streamed = chunk.usage;
    const prices = { prompt: pricing.prompt, cachedPrompt: pricing.cached_prompt, completion: pricing.completion };
    const expected = (u: OpenAI.CompletionUsage) =>
      costOf(prices, { promptTokens: u.prompt_tokens, cachedPromptTokens: u.prompt_tokens_details?.cached_tokens ?? 0, completionTokens: u.completion_tokens });
    const database = await openStore({ dataDir: nodeB.dataDir, databaseUrl: "" });
    try {
      let check = await checkLedger(database, accountId);
      for (let attempt = 0; attempt < 100 && check.activeHolds > 0; attempt++) {
        await delay(20);
        check = await checkLedger(database, accountId);
      }
      assert.equal(check.activeHolds, 0);
      const records = await database.selectFrom("usage_records").selectAll().where("account_id", "=", accountId).orderBy("created_at").execute();
      assert.equal(records.length, 2);
      for (const record of records) assert.equal(record.usage_source, "upstream");
      const costs = records.map((record) => Number(record.cost));
      assert.deepEqual(costs, [expected(usage), expected(streamed!)]);
      assert.equal(check.balance, CREDIT - costs[0]! - costs[1]!);
    } finally {
      await database.destroy();
    }
  });
});
