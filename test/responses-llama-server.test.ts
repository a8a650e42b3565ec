/**
 * The Responses API through a real llama.cpp `llama-server` member: stories260K-chatml behind an
 * in-process Turnpike whose model entry is `{ upstream: { kind: "llama-server" } }`. A response
 * says what the same chat completion says (the same text at temperature 0, the same usage, from
 * llama-server's own counts), its stream follows the specification's event grammar and ends with
 * what `GET` returns, a forced custom tool's grammar is enforced by llama-server's own grammar option, and a metered
 * key is billed exactly from llama-server's usage. Skipped outside CI when llama-server is not
 * built (see helpers/llama-server.ts).
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
import { skipWithoutLlamaServer, startLlamaServer, type RunningLlamaServer } from "./helpers/llama-server.ts";
import { checkEventGrammar, responseResourceSchema } from "./helpers/responses-schemas.ts";
import { startTestServer, storiesChatmlModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

const pricing = { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 };
const CREDIT = 1_000_000;
const MODEL = "story-llama";

/** The SSE events of a response stream, parsed: each `data:` line's JSON, `[DONE]` dropped. */
async function sseEvents(response: Response): Promise<{ events: Array<Record<string, unknown>>; names: string[]; done: boolean }> {
  const text = await response.text();
  const events: Array<Record<string, unknown>> = [];
  const names: string[] = [];
  let done = false;
  for (const block of text.split("\n\n")) {
    let name: string | undefined;
    for (const line of block.split("\n")) {
      if (line.startsWith("event: ")) name = line.slice(7);
      if (!line.startsWith("data: ")) continue;
      const data = line.slice(6);
      if (data === "[DONE]") done = true;
      else {
        const event = JSON.parse(data) as Record<string, unknown>;
        events.push(event);
        names.push(name ?? "");
      }
    }
  }
  return { events, names, done };
}

describe("the Responses API through llama-server", { skip: skipWithoutLlamaServer() }, () => {
  let llama: RunningLlamaServer;
  let turnpike: TestServer;
  const configDir = temporaryDirectory("turnpike-llama-responses-");

  before(async () => {
    llama = await startLlamaServer({ model: storiesChatmlModel, threads: 1, parallel: 2, contextSize: 2048 });
    const configFile = path.join(configDir, "turnpike.json");
    fs.writeFileSync(configFile, JSON.stringify({ models: [{ id: MODEL, upstream: { kind: "llama-server", urls: [llama.url] }, pricing }] }));
    turnpike = await startTestServer({ configFile });
  });

  after(async () => {
    await turnpike?.close();
    await llama?.close();
    fs.rmSync(configDir, { recursive: true, force: true });
  });

  const question = "Tell me a story about a cat.";

  it("answers what the same chat completion answers: the same text and usage, streamed and not", async () => {
    const chat = await turnpike.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: question }], temperature: 0, max_tokens: 40 });
    const response = await turnpike.client.responses.create({ model: MODEL, input: question, temperature: 0, max_output_tokens: 40 });
    assert.equal(responseResourceSchema.safeParse(response).success, true, JSON.stringify(responseResourceSchema.safeParse(response).error?.issues?.slice(0, 3)));
    assert.equal(response.output_text, chat.choices[0]!.message.content);
    assert.equal(response.usage?.input_tokens, chat.usage?.prompt_tokens);
    assert.equal(response.usage?.output_tokens, chat.usage?.completion_tokens);
    assert.equal(response.status, chat.choices[0]!.finish_reason === "length" ? "incomplete" : "completed");

    const stream = turnpike.client.responses.stream({ model: MODEL, input: question, temperature: 0, max_output_tokens: 40 });
    let text = "";
    for await (const event of stream) if (event.type === "response.output_text.delta") text += event.delta;
    const final = await stream.finalResponse();
    assert.equal(text, chat.choices[0]!.message.content);
    assert.equal(final.output_text, text);
    assert.equal(final.usage?.output_tokens, chat.usage?.completion_tokens);
  });

  it("streams in the specification's event grammar, its last response equal to what GET returns", async () => {
    const response = await fetch(`${turnpike.baseURL}/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${turnpike.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, input: question, temperature: 0, max_output_tokens: 24, stream: true }),
    });
    assert.equal(response.status, 200);
    const { events, names, done } = await sseEvents(response);
    assert.ok(done, "the stream ends with [DONE]");
    assert.deepEqual(names, events.map((event) => event.type), "every event is named as its type");
    const terminal = events.at(-1) as { response: { id: string } };
    const stored = await (await fetch(`${turnpike.baseURL}/responses/${terminal.response.id}`, { headers: { authorization: `Bearer ${turnpike.key}` } })).json();
    assert.deepEqual(checkEventGrammar(events, { finalResource: stored }), []);
  });

  it("answers a forced custom tool with a custom_tool_call whose input matches its grammar, enforced by llama-server's own grammar option", async () => {
    const pattern = "[A-Z][a-z]{2,9}( [A-Z][a-z]{2,9})?";
    for (const stream of [false, true]) {
      const body = {
        model: MODEL,
        input: "Which city is the story in?",
        tools: [{ type: "custom", name: "set_city", description: "Names the city.", format: { type: "grammar", syntax: "regex", definition: pattern } }],
        tool_choice: { type: "custom", name: "set_city" },
        temperature: 0.8,
        max_output_tokens: 64,
        stream,
      };
      const response = await fetch(`${turnpike.baseURL}/responses`, {
        method: "POST",
        headers: { authorization: `Bearer ${turnpike.key}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      assert.equal(response.status, 200, await response.clone().text());
      const resource = stream ? ((await sseEvents(response)).events.at(-1) as { response: Record<string, unknown> }).response : ((await response.json()) as Record<string, unknown>);
      const output = resource.output as Array<{ type: string; name?: string; input?: string }>;
      const call = output.find((item) => item.type === "custom_tool_call");
      assert.ok(call !== undefined, JSON.stringify(output));
      assert.equal(call.name, "set_city");
      assert.match(call.input!, new RegExp(`^(?:${pattern})$`), `${stream ? "streamed" : "whole"}: ${JSON.stringify(call.input)}`);
    }
  });

  it("bills a metered key exactly from llama-server's usage", async () => {
    const database = await openStore({ dataDir: turnpike.dataDir, databaseUrl: "" });
    let accountId: string;
    let client: OpenAI;
    try {
      const account = await createAccount(database, { email: "llama-responses@example.com" });
      accountId = account.id;
      await grantCredit(database, { accountId, amount: CREDIT, source: "test:llama-responses" });
      const key = await createApiKey(database, { name: "metered", accountId });
      client = new OpenAI({ baseURL: turnpike.baseURL, apiKey: key.key, maxRetries: 0, timeout: 60_000 });
    } finally {
      await database.destroy();
    }
    const response = await client.responses.create({ model: MODEL, input: question, temperature: 0, max_output_tokens: 30 });
    const usage = response.usage!;
    const expected = costOf(
      { prompt: pricing.prompt, cachedPrompt: pricing.cached_prompt, completion: pricing.completion },
      { promptTokens: usage.input_tokens, cachedPromptTokens: usage.input_tokens_details.cached_tokens, completionTokens: usage.output_tokens },
    );
    const check = await openStore({ dataDir: turnpike.dataDir, databaseUrl: "" });
    try {
      let ledger = await checkLedger(check, accountId);
      for (let attempt = 0; attempt < 100 && ledger.activeHolds > 0; attempt++) {
        await delay(20);
        ledger = await checkLedger(check, accountId);
      }
      const records = await check.selectFrom("usage_records").selectAll().where("account_id", "=", accountId).execute();
      assert.equal(records.length, 1);
      assert.equal(records[0]!.usage_source, "upstream");
      assert.deepEqual([records[0]!.prompt_tokens, records[0]!.completion_tokens], [usage.input_tokens, usage.output_tokens]);
      assert.equal(ledger.balance, CREDIT - expected);
    } finally {
      await check.destroy();
    }
  });
});
