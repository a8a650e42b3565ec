/**
 * The Messages API through a real llama.cpp `llama-server` member: stories260K-chatml behind an
 * in-process Turnpike whose model entry is `{ upstream: { kind: "llama-server" } }`, called with
 * the official `@anthropic-ai/sdk`, each case with `messages.create` and with
 * `messages.stream(...).finalMessage()` (the stream's raw events checked one by one against
 * Anthropic's grammar). A message says what the same chat completion says (the same text at
 * temperature 0, the same usage, from llama-server's own counts); a system prompt, a multi-turn
 * conversation, a forced tool use (`tool_choice` naming the only tool reaches llama-server as
 * `required`, seen through a recorder between the two; naming one of several is a 400 naming
 * `tool_choice`; llama-server lets text come before a required call, so the 260K model writes a
 * story to `max_tokens` rather than a call) and a `tool_result` turn; a stop sequence ends the reply as `end_turn` with
 * `stop_sequence: null` (llama-server does not say which sequence it met, and Turnpike does not
 * guess); `max_tokens` stops, a large one lowered to what llama-server's exact count of the prompt
 * leaves of the slot's context; `count_tokens` equal to the prompt the message reports (input +
 * cache read); a metered key billed exactly from llama-server's usage, cached tokens once, at the
 * cached price. Skipped outside CI when llama-server is not built (see helpers/llama-server.ts).
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import AnthropicClient from "@anthropic-ai/sdk";
import type Anthropic from "@anthropic-ai/sdk";
import type { Kysely } from "kysely";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { HttpRecorder } from "./helpers/http-recorder.ts";
import { skipWithoutLlamaServer, startLlamaServer, type RunningLlamaServer } from "./helpers/llama-server.ts";
import { checkedMessagesClient, countParamsOf, GREEDY, promptOf, textOf, weatherTool, type CheckedMessagesClient, type Message, type Params } from "./helpers/messages-client.ts";
import { billedExactly, costOfUsage, meteredKey } from "./helpers/metered.ts";
import { startTestServer, storiesChatmlModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

/** 1 credit per prompt token, half for cached ones, 2 per completion token. */
const pricing = { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 };
const CREDIT = 1_000_000;
const MODEL = "story-llama";
/** Tokens shared by llama-server's two slots: 1,024 per slot. */
const CONTEXT_SIZE = 2048;
const PARALLEL = 2;

/** The finish reason llama-server gave in a chat completion it answered (JSON, or a stream of chunks); undefined: none. */
function upstreamFinishOf(body: string): unknown {
  if (!body.trimStart().startsWith("data:")) return (JSON.parse(body) as { choices?: Array<{ finish_reason?: unknown }> }).choices?.[0]?.finish_reason;
  let finish: unknown;
  for (const line of body.split("\n")) {
    if (!line.startsWith("data: {")) continue;
    const chunk = JSON.parse(line.slice("data: ".length)) as { choices?: Array<{ finish_reason?: unknown }> };
    finish = chunk.choices?.[0]?.finish_reason ?? finish;
  }
  return finish;
}

/** What a message's usage costs: its prompt is input + cache read (+ cache creation, always 0 here), its cached part at the cached price. */
function costOfMessage(usage: Anthropic.Usage): number {
  const cached = usage.cache_read_input_tokens ?? 0;
  return costOfUsage(pricing, { promptTokens: usage.input_tokens + cached + (usage.cache_creation_input_tokens ?? 0), cachedPromptTokens: cached, completionTokens: usage.output_tokens });
}

describe("the Messages API through llama-server", { skip: skipWithoutLlamaServer(), timeout: 300_000 }, () => {
  let llama: RunningLlamaServer;
  let turnpike: TestServer;
  let database: Kysely<Database>;
  let client: CheckedMessagesClient;
  /** Between Turnpike and llama-server: what Turnpike asks of llama-server. */
  let recorder: HttpRecorder;
  const configDir = temporaryDirectory("turnpike-llama-messages-");

  before(async () => {
    llama = await startLlamaServer({ model: storiesChatmlModel, threads: 1, parallel: PARALLEL, contextSize: CONTEXT_SIZE });
    recorder = new HttpRecorder(llama.url);
    await recorder.open();
    const configFile = path.join(configDir, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [{ id: MODEL, upstream: { kind: "llama-server", urls: [recorder.url] }, pricing }],
        plans: [{ id: "funded", name: "Funded", price: { amount: 100, currency: "usd" }, credit: CREDIT }],
      }),
    );
    turnpike = await startTestServer({ configFile });
    database = await openStore({ dataDir: turnpike.dataDir, databaseUrl: "" });
    client = checkedMessagesClient(turnpike.url, turnpike.key);
  });

  after(async () => {
    await database?.destroy();
    await turnpike?.close();
    await recorder?.close();
    await llama?.close();
    fs.rmSync(configDir, { recursive: true, force: true });
  });

  const story: Params = {
    model: MODEL,
    max_tokens: 32,
    ...GREEDY,
    system: "You tell short stories.",
    messages: [{ role: "user", content: "Tell me a story about a cat." }],
  };
  const multiTurn: Params = {
    model: MODEL,
    max_tokens: 16,
    ...GREEDY,
    system: [
      { type: "text", text: "You tell stories.", cache_control: { type: "ephemeral" } },
      { type: "text", text: "Short ones." },
    ],
    messages: [
      { role: "user", content: "Tell me about a cat." },
      { role: "assistant", content: [{ type: "text", text: "The cat sat on the mat." }] },
      { role: "user", content: [{ type: "text", text: "And then?", cache_control: { type: "ephemeral" } }] },
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

  /** `count_tokens` for `params`: exactly the prompt `message` reports (llama-server counts it with its own template and tokenizer). */
  async function assertCounted(params: Params, message: Message): Promise<void> {
    const counted = await client.client.messages.countTokens(countParamsOf(params));
    assert.equal(counted.input_tokens, promptOf(message), `count_tokens (${counted.input_tokens}) = input + cache read ${JSON.stringify(message.usage)}`);
  }

  for (const stream of [false, true]) {
    const mode = stream ? "streamed" : "not streamed";

    it(`answers a text prompt with a system prompt as the same chat completion does: the same text and usage (${mode})`, async () => {
      const chat = await turnpike.client.chat.completions.create({
        model: MODEL,
        max_tokens: 32,
        temperature: 0,
        messages: [
          { role: "system", content: "You tell short stories." },
          { role: "user", content: "Tell me a story about a cat." },
        ],
      });
      const message = await client.create(story, stream);
      assert.equal(message.model, MODEL);
      assert.equal(message.role, "assistant");
      assert.ok(textOf(message).length > 0);
      assert.equal(textOf(message), chat.choices[0]!.message.content);
      assert.equal(message.stop_reason, chat.choices[0]!.finish_reason === "length" ? "max_tokens" : "end_turn");
      assert.equal(message.stop_sequence, null);
      assert.equal(promptOf(message), chat.usage!.prompt_tokens, "input + cache read is llama-server's prompt, once");
      assert.equal(message.usage.output_tokens, chat.usage!.completion_tokens);
      assert.equal(message.usage.cache_creation_input_tokens, 0);
      await assertCounted(story, message);
    });

    it(`takes system blocks and a multi-turn conversation (${mode})`, async () => {
      const message = await client.create(multiTurn, stream);
      assert.ok(textOf(message).length > 0);
      await assertCounted(multiTurn, message);
      const withoutSystem = await client.client.messages.countTokens(countParamsOf({ ...multiTurn, system: undefined }));
      assert.ok(withoutSystem.input_tokens < promptOf(message), "the system blocks are in the prompt");
    });

    it(`sends a tool_choice naming the only tool to llama-server as required, and answers what it gives in shape (${mode})`, async () => {
      const sent = recorder.exchanges.length;
      const message = await client.create(forcedTool, stream);
      const asked = recorder.exchanges.slice(sent).filter((exchange) => exchange.path === "/v1/chat/completions");
      assert.equal(asked.length, 1);
      const body = JSON.parse(asked[0]!.requestBody) as { tool_choice: unknown; tools: Array<{ type: string; function: { name: string } }> };
      assert.equal(body.tool_choice, "required", "llama-server takes no named choice; naming the only tool asks the same");
      assert.deepEqual(
        body.tools.map((tool) => [tool.type, tool.function.name]),
        [["function", "get_weather"]],
      );
      // llama-server's grammar for `required` lets text come before the call (and a template
      // without tool syntax, as this model's, adds none): the 260K model writes a story to
      // max_tokens. Whatever comes, `tool_use` is said exactly when a tool use is in the content.
      const uses = message.content.filter((block) => block.type === "tool_use");
      assert.equal(message.stop_reason === "tool_use", uses.length > 0, JSON.stringify(message));
      for (const use of uses) {
        assert.equal(use.name, "get_weather");
        assert.match(use.id, /^toolu_/);
        assert.equal(typeof use.input, "object");
      }
      if (uses.length === 0) assert.equal(message.stop_reason, "max_tokens", JSON.stringify(message));
      await assertCounted(forcedTool, message);
    });

    it(`refuses a tool_choice naming one of several tools, which llama-server cannot force, naming tool_choice (${mode})`, async () => {
      const clock: Anthropic.Tool = { name: "get_time", description: "The time in a city", input_schema: { type: "object", properties: { city: { type: "string" } } } };
      const error = await (stream ? client.client.messages.stream({ ...forcedTool, tools: [weatherTool, clock] }).finalMessage() : client.client.messages.create({ ...forcedTool, tools: [weatherTool, clock] })).then(
        () => assert.fail("answered"),
        (caught: unknown) => caught,
      );
      assert.ok(error instanceof AnthropicClient.BadRequestError, String(error));
      assert.equal(error.type, "invalid_request_error");
      assert.match(error.message, /tool_choice/);
    });

    it(`answers after a tool_result turn (${mode})`, async () => {
      const message = await client.create(toolResult, stream);
      assert.ok(["end_turn", "max_tokens", "tool_use"].includes(message.stop_reason!), message.stop_reason!);
      await assertCounted(toolResult, message);
      const withoutResult = await client.client.messages.countTokens(countParamsOf({ ...toolResult, messages: toolResult.messages.slice(0, 1) }));
      assert.ok(withoutResult.input_tokens < promptOf(message), "the tool use and its result are in the prompt");
    });

    it(`ends at a stop sequence as end_turn with stop_sequence null: llama-server does not say which it met (${mode})`, async (t) => {
      const free = await client.create({ ...story, max_tokens: 48 }, false);
      // A word the model writes at temperature 0, after its first token.
      const word = textOf(free).split(/\s+/).filter((candidate) => candidate.length >= 3).at(1);
      assert.ok(word !== undefined, textOf(free));
      const sent = recorder.exchanges.length;
      const message = await client.create({ ...story, max_tokens: 48, stop_sequences: [word] }, stream);
      // What llama-server answered Turnpike, to say in a failure (its text and finish differ by CPU).
      const upstream = recorder.exchanges.slice(sent).filter((exchange) => exchange.path === "/v1/chat/completions");
      // The last is the one answered (one before it would be an attempt given up before any content).
      const last = upstream.at(-1);
      assert.ok(last !== undefined, "Turnpike asked llama-server");
      const answered = upstreamFinishOf(last.responseBody);
      const seen = `free: ${JSON.stringify(textOf(free))} (${free.usage.output_tokens} tokens), stop ${JSON.stringify(word)}, ${upstream.length} upstream request(s), llama-server's finish ${answered}: ${last.responseBody.slice(-1_500)}`;
      assert.ok(!textOf(message).includes(word), `${JSON.stringify(textOf(message))} holds ${word}; ${seen}`);
      assert.ok(textOf(free).startsWith(textOf(message)), `the text up to the stop sequence: ${JSON.stringify(textOf(message))}; ${seen}`);
      assert.ok(message.usage.output_tokens < free.usage.output_tokens, `stopped early; ${seen}`);
      // Turnpike says what llama-server said: `end_turn` for its `stop`, and no sequence, as it names none. One CI
      // run saw llama-server answer `length` for a reply the sequence had cut short: said, not failed, as it is
      // llama-server's answer (and the diagnostic holds its stream for when it comes again).
      assert.ok(answered === "stop" || answered === "length", seen);
      if (answered !== "stop") t.diagnostic(`llama-server said ${answered} for a reply cut short by its stop sequence; ${seen}`);
      assert.deepEqual([message.stop_reason, message.stop_sequence], [answered === "stop" ? "end_turn" : "max_tokens", null], seen);
      await assertCounted({ ...story, stop_sequences: [word] }, message);
    });

    it(`stops at max_tokens; a large max_tokens is lowered to what the exact prompt leaves of the slot's context (${mode})`, async () => {
      const short = await client.create({ ...story, max_tokens: 5 }, stream);
      assert.equal(short.stop_reason, "max_tokens");
      assert.equal(short.usage.output_tokens, 5);
      const models = (await turnpike.client.models.list()).data as unknown as Array<{ id: string; context_length: number }>;
      const context = models.find((candidate) => candidate.id === MODEL)!.context_length;
      assert.equal(context, CONTEXT_SIZE / PARALLEL, "one slot's context");
      // The SDK refuses a non-streamed request it expects to take over 10 minutes (max_tokens over ~21,000).
      const long = await client.create({ ...story, max_tokens: stream ? 64_000 : 20_000 }, stream);
      assert.equal(long.stop_reason, "max_tokens", JSON.stringify(long.usage));
      assert.equal(promptOf(long) + long.usage.output_tokens, context, "prompt + completion fill the slot's context");
    });
  }

  it("bills a metered key exactly from llama-server's usage: input at the prompt price, cache read at the cached price, output at the completion price", async () => {
    const { accountId, key } = await meteredKey(database, "funded");
    const metered = checkedMessagesClient(turnpike.url, key);
    // The story twice: the second reads its prompt from the slot's cache.
    const messages = [await metered.create(story, false), await metered.create(story, true), await metered.create(forcedTool, true), await metered.create(toolResult, false)];
    assert.ok(messages.some((message) => (message.usage.cache_read_input_tokens ?? 0) > 0), `some prompt was read from llama-server's cache: ${JSON.stringify(messages.map((message) => message.usage))}`);
    const { records, balance } = await billedExactly(database, accountId, CREDIT, pricing, messages.length);
    const sources = await database.selectFrom("usage_records").select("usage_source").where("account_id", "=", accountId).orderBy("created_at").execute();
    assert.deepEqual(
      sources.map((row) => row.usage_source),
      messages.map(() => "upstream"),
    );
    assert.deepEqual(
      records.map((record) => [record.prompt_tokens, record.cached_prompt_tokens, record.completion_tokens]),
      messages.map((message) => [promptOf(message), message.usage.cache_read_input_tokens ?? 0, message.usage.output_tokens]),
      "each record is the message's usage: input + cache read as the prompt, the cache read once",
    );
    assert.deepEqual(
      records.map((record) => record.cost),
      messages.map((message) => costOfMessage(message.usage)),
    );
    assert.equal(balance, CREDIT - messages.reduce((sum, message) => sum + costOfMessage(message.usage), 0));
  });
});
