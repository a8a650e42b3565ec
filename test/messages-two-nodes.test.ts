/**
 * The Messages API through a second Turnpike node: node A serves stories260K in-process; node B's
 * model is an upstream of kind `openai` pointing at A's `/v1`, with an operator key of A as the
 * upstream's API key. A client speaks the Messages API to B with the official `@anthropic-ai/sdk`
 * and gets what A gives the same request directly (the same text at temperature 0, the same
 * prompt and output counts), streams that follow Anthropic's event grammar event by event, a
 * forced tool use and a `tool_result` turn, the `max_tokens` stop; `count_tokens` at A is exactly
 * what B reports as the prompt, and at B (an `openai` upstream has no tokenizer) an upper bound
 * of it. B bills its metered account exactly from A's reported usage (cached prompt tokens once,
 * at the cached price), and A's usage records for its operator key hold the same counts, token
 * for token.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type Anthropic from "@anthropic-ai/sdk";
import type { Kysely } from "kysely";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { checkedMessagesClient, countParamsOf, GREEDY, promptOf, textOf, weatherTool, type CheckedMessagesClient, type Message, type Params } from "./helpers/messages-client.ts";
import { billedExactly, costOfUsage, meteredKey } from "./helpers/metered.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

/** 1 credit per prompt token, half for cached ones, 2 per completion token. */
const pricing = { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 };
const CREDIT = 1_000_000;
const MODEL = "story-via-a";

/** What a message's usage costs: its prompt is input + cache read (+ cache creation, always 0 here), its cached part at the cached price. */
function costOfMessage(usage: Anthropic.Usage): number {
  const cached = usage.cache_read_input_tokens ?? 0;
  return costOfUsage(pricing, { promptTokens: usage.input_tokens + cached + (usage.cache_creation_input_tokens ?? 0), cachedPromptTokens: cached, completionTokens: usage.output_tokens });
}

describe("the Messages API through a second Turnpike node as upstream", { timeout: 300_000 }, () => {
  let nodeA: TestServer;
  let nodeB: TestServer;
  let databaseA: Kysely<Database>;
  let databaseB: Kysely<Database>;
  /** The Anthropic client of node B's operator key, and of node A's (the same key B uses upstream). */
  let viaB: CheckedMessagesClient;
  let direct: CheckedMessagesClient;
  const configDir = temporaryDirectory("turnpike-messages-two-nodes-");

  before(async () => {
    nodeA = await startTestServer({ flags: { models: [`story=${storiesModel}`], parallel: "2" } });
    const configFile = path.join(configDir, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [{ id: MODEL, upstream: { kind: "openai", urls: [nodeA.baseURL], model: "story", api_key_env: "TURNPIKE_TEST_HOP_KEY" }, pricing }],
        plans: [{ id: "funded", name: "Funded", price: { amount: 100, currency: "usd" }, credit: CREDIT }],
      }),
    );
    nodeB = await startTestServer({ configFile, env: { TURNPIKE_TEST_HOP_KEY: nodeA.key } });
    databaseA = await openStore({ dataDir: nodeA.dataDir, databaseUrl: "" });
    databaseB = await openStore({ dataDir: nodeB.dataDir, databaseUrl: "" });
    viaB = checkedMessagesClient(nodeB.url, nodeB.key);
    direct = checkedMessagesClient(nodeA.url, nodeA.key);
  });

  after(async () => {
    await databaseA?.destroy();
    await databaseB?.destroy();
    await nodeB?.close();
    await nodeA?.close();
    fs.rmSync(configDir, { recursive: true, force: true });
  });

  const story: Params = {
    model: MODEL,
    max_tokens: 24,
    ...GREEDY,
    system: "You tell short stories.",
    messages: [{ role: "user", content: "Tell me a story about a cat." }],
  };
  const multiTurn: Params = {
    ...story,
    system: [{ type: "text", text: "You tell short stories.", cache_control: { type: "ephemeral" } }],
    messages: [
      { role: "user", content: "Tell me a story about a cat." },
      { role: "assistant", content: [{ type: "text", text: "The cat sat on the mat." }] },
      { role: "user", content: [{ type: "text", text: "And then?" }] },
    ],
  };
  const forcedTool: Params = {
    model: MODEL,
    max_tokens: 200,
    ...GREEDY,
    tools: [weatherTool],
    tool_choice: { type: "tool", name: "get_weather" },
    messages: [{ role: "user", content: "Weather in Paris?" }],
  };
  const toolResult: Params = {
    model: MODEL,
    max_tokens: 16,
    ...GREEDY,
    tools: [weatherTool],
    messages: [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: [{ type: "tool_use", id: "toolu_paris", name: "get_weather", input: { city: "Paris" } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_paris", content: "Sunny, 22 degrees" }] },
    ],
  };
  /** The same request to node A, whose model is `story`. */
  const atA = (params: Params): Params => ({ ...params, model: "story" });

  /** Checks `count_tokens` for `params` against what `message` (from B) reports: exact at A, an upper bound at B. */
  async function assertCounted(params: Params, message: Message): Promise<void> {
    const exact = await direct.client.messages.countTokens(countParamsOf(atA(params)));
    assert.equal(exact.input_tokens, promptOf(message), "A counts the prompt exactly as B reports it (input + cache read)");
    const bound = await viaB.client.messages.countTokens(countParamsOf(params));
    assert.ok(bound.input_tokens >= promptOf(message), `B's count (${bound.input_tokens}) bounds the prompt (${promptOf(message)}): an openai upstream has no tokenizer`);
  }

  it("lists the upstream model with the Messages API among its endpoints, ready", async () => {
    const models = (await nodeB.client.models.list()).data as unknown as Array<{ id: string; endpoints: string[]; status: { state: string } }>;
    const model = models.find((candidate) => candidate.id === MODEL);
    assert.ok(model !== undefined);
    assert.equal(model.status.state, "ready");
    assert.ok(model.endpoints.includes("/v1/messages"), JSON.stringify(model.endpoints));
  });

  for (const stream of [false, true]) {
    const mode = stream ? "streamed" : "not streamed";

    it(`answers a text prompt with a system prompt as node A answers it directly (${mode})`, async () => {
      const message = await viaB.create(story, stream);
      const reference = await direct.create(atA(story), stream);
      assert.equal(message.model, MODEL);
      assert.match(message.id, /^msg_/);
      assert.ok(textOf(message).length > 0);
      assert.equal(textOf(message), textOf(reference));
      assert.equal(message.stop_reason, reference.stop_reason);
      assert.equal(message.stop_sequence, null);
      assert.equal(promptOf(message), promptOf(reference), "the same prompt, counted once");
      assert.equal(message.usage.output_tokens, reference.usage.output_tokens);
      assert.equal(message.usage.cache_creation_input_tokens, 0);
      await assertCounted(story, message);
    });

    it(`answers a multi-turn conversation with system blocks (${mode})`, async () => {
      const message = await viaB.create(multiTurn, stream);
      const reference = await direct.create(atA(multiTurn), false);
      assert.equal(textOf(message), textOf(reference));
      assert.equal(promptOf(message), promptOf(reference));
      await assertCounted(multiTurn, message);
      assert.ok(promptOf(message) > promptOf(await viaB.create(story, false)), "the earlier turns are in the prompt");
    });

    it(`calls the tool tool_choice forces, its input a JSON object (${mode})`, async () => {
      const message = await viaB.create(forcedTool, stream);
      assert.equal(message.stop_reason, "tool_use");
      const uses = message.content.filter((block) => block.type === "tool_use");
      assert.equal(uses.length, 1, JSON.stringify(message.content));
      assert.equal(uses[0]!.name, "get_weather");
      assert.match(uses[0]!.id, /^toolu_/);
      assert.equal(typeof (uses[0]!.input as { city?: unknown }).city, "string");
      if (stream) {
        const events = viaB.lastStream()!.names;
        assert.ok(events.includes("content_block_delta"), "the tool's input came as input_json_delta fragments");
      }
      await assertCounted(forcedTool, message);
    });

    it(`answers after a tool_result turn (${mode})`, async () => {
      const message = await viaB.create(toolResult, stream);
      assert.ok(["end_turn", "max_tokens", "tool_use"].includes(message.stop_reason!), message.stop_reason!);
      const reference = await direct.create(atA(toolResult), false);
      assert.equal(promptOf(message), promptOf(reference), "the tool use and its result reach A's prompt as A's own Messages route puts them");
      await assertCounted(toolResult, message);
    });

    it(`stops at max_tokens, a large max_tokens lowered to what the prompt's bound leaves of the context (${mode})`, async () => {
      const short = await viaB.create({ ...story, max_tokens: 5 }, stream);
      assert.equal(short.stop_reason, "max_tokens");
      assert.equal(short.usage.output_tokens, 5);
      // The SDK refuses a non-streamed request it expects to take over 10 minutes (max_tokens over ~21,000).
      const long = await viaB.create({ ...story, max_tokens: stream ? 64_000 : 20_000 }, stream);
      assert.equal(long.stop_reason, "max_tokens");
      const models = (await nodeB.client.models.list()).data as unknown as Array<{ id: string; context_length: number }>;
      const context = models.find((candidate) => candidate.id === MODEL)!.context_length;
      // Without a tokenizer upstream, B lowers max_tokens to what its bound of the prompt (count_tokens' answer) leaves.
      const bound = (await viaB.client.messages.countTokens(countParamsOf(story))).input_tokens;
      assert.equal(long.usage.output_tokens, context - bound, "the completion ran to what the bound left");
      assert.ok(promptOf(long) + long.usage.output_tokens <= context);
    });
  }

  it("bills B's metered account exactly from A's usage, and A's usage records for its operator key hold the same counts", async () => {
    const { accountId, key } = await meteredKey(databaseB, "funded");
    const metered = checkedMessagesClient(nodeB.url, key);
    const recordsAtA = async () =>
      (await databaseA.selectFrom("usage_records").selectAll().where("key_id", "=", nodeA.keyId).orderBy("created_at").execute()).map((record) => ({
        prompt_tokens: Number(record.prompt_tokens),
        cached_prompt_tokens: Number(record.cached_prompt_tokens),
        completion_tokens: Number(record.completion_tokens),
        finish_reason: record.finish_reason,
      }));
    // A writes its usage records in its group commit after each answer: the earlier tests' first.
    await nodeA.server.usageWritten();
    const before = (await recordsAtA()).length;
    // The story twice: the second reads its prompt from A's cache.
    const messages = [
      await metered.create(story, false),
      await metered.create(story, true),
      await metered.create(forcedTool, false),
      await metered.create(forcedTool, true),
      await metered.create(toolResult, true),
    ];
    assert.ok(messages.some((message) => (message.usage.cache_read_input_tokens ?? 0) > 0), "some prompt was read from A's cache");
    const { records, balance } = await billedExactly(databaseB, accountId, CREDIT, pricing, messages.length);
    const sources = await databaseB.selectFrom("usage_records").select("usage_source").where("account_id", "=", accountId).execute();
    assert.deepEqual(
      sources.map((row) => row.usage_source),
      messages.map(() => "upstream"),
      "B billed A's counts",
    );
    const expected = messages.map((message) => ({
      prompt_tokens: promptOf(message),
      cached_prompt_tokens: message.usage.cache_read_input_tokens ?? 0,
      completion_tokens: message.usage.output_tokens,
    }));
    assert.deepEqual(
      records.map((record) => ({ prompt_tokens: record.prompt_tokens, cached_prompt_tokens: record.cached_prompt_tokens, completion_tokens: record.completion_tokens })),
      expected,
      "B's records hold what each message reported, input + cache read as the prompt, the cache read once",
    );
    assert.deepEqual(
      records.map((record) => record.cost),
      messages.map((message) => costOfMessage(message.usage)),
    );
    assert.equal(balance, CREDIT - messages.reduce((sum, message) => sum + costOfMessage(message.usage), 0));

    // A's records are written as its answers end; wait for all five.
    let atA = await recordsAtA();
    for (let attempt = 0; attempt < 400 && atA.length < before + messages.length; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 25));
      atA = await recordsAtA();
    }
    const ours = atA.slice(before);
    assert.equal(ours.length, messages.length, "A recorded one usage record per request B sent");
    assert.deepEqual(
      ours.map(({ finish_reason: _reason, ...tokens }) => tokens),
      expected,
      "A's operator key was recorded the same counts, token for token",
    );
    assert.deepEqual(
      ours.map((record) => record.finish_reason),
      records.map((record) => record.finish_reason),
    );
  });
});
