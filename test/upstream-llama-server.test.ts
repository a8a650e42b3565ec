/**
 * A real llama.cpp `llama-server` as Turnpike's upstream: stories260K-chatml on one thread with
 * two slots, behind an in-process Turnpike whose model entry is `{ upstream: { kind:
 * "llama-server" } }`, called with the official `openai` client. Through Turnpike the client gets
 * what llama-server gives directly (the same text at temperature 0, the same usage), `/v1/models`
 * shows llama-server's per-slot context, a metered key is billed exactly from llama-server's
 * usage, a client that leaves mid-stream stops llama-server's slot at once (and is billed for
 * what was generated), a parameter llama-server cannot honour is refused by name, and a JSON
 * schema is followed. Skipped outside CI when llama-server is not built (see helpers/llama-server.ts).
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
import { startTestServer, storiesChatmlModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

/** 1 credit per prompt token, half for cached ones, 2 per completion token (as in upstream-two-hops). */
const pricing = { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 };
const CREDIT = 1_000_000;
const MODEL = "story-llama";
/**
 * Tokens shared by llama-server's slots: 2,048 per slot (the model's training context, which
 * llama-server would cap a larger slot to), so a long stream runs for seconds.
 */
const CONTEXT_SIZE = 4096;
const PARALLEL = 2;

/**
 * One slot of llama-server's `/slots`; the task and counts only while it is processing. The prompt
 * is `n_prompt_tokens_processed` + `n_prompt_tokens_cache` (`n_prompt_tokens` counts the generated
 * tokens too).
 */
type SlotState = {
  id: number;
  is_processing: boolean;
  id_task?: number;
  n_prompt_tokens_processed?: number;
  n_prompt_tokens_cache?: number;
  next_token?: Array<{ n_decoded: number }>;
};

describe("llama-server as an upstream of Turnpike", { skip: skipWithoutLlamaServer() }, () => {
  let llama: RunningLlamaServer;
  let turnpike: TestServer;
  let direct: OpenAI;
  const configDir = temporaryDirectory("turnpike-llama-upstream-");

  /** A key of a new account holding `credit`, and the account's id. */
  async function meteredClient(email: string, credit = CREDIT): Promise<{ client: OpenAI; accountId: string }> {
    const database = await openStore({ dataDir: turnpike.dataDir, databaseUrl: "" });
    try {
      const account = await createAccount(database, { email });
      await grantCredit(database, { accountId: account.id, amount: credit, source: `test:llama-upstream:${email}` });
      const key = await createApiKey(database, { name: "metered", accountId: account.id });
      return { client: new OpenAI({ baseURL: turnpike.baseURL, apiKey: key.key, maxRetries: 0, timeout: 60_000 }), accountId: account.id };
    } finally {
      await database.destroy();
    }
  }

  /** The account's usage records (oldest first) and ledger, once no hold is left open. */
  async function settledRecords(accountId: string) {
    const database = await openStore({ dataDir: turnpike.dataDir, databaseUrl: "" });
    try {
      let check = await checkLedger(database, accountId);
      for (let attempt = 0; attempt < 100 && check.activeHolds > 0; attempt++) {
        await delay(20);
        check = await checkLedger(database, accountId);
      }
      const records = await database.selectFrom("usage_records").selectAll().where("account_id", "=", accountId).orderBy("created_at").execute();
      return { check, records };
    } finally {
      await database.destroy();
    }
  }

  async function slots(): Promise<SlotState[]> {
    const response = await fetch(`${llama.url}/slots`);
    return (await response.json()) as SlotState[];
  }

  before(async () => {
    llama = await startLlamaServer({ model: storiesChatmlModel, threads: 1, parallel: PARALLEL, contextSize: CONTEXT_SIZE });
    direct = new OpenAI({ baseURL: `${llama.url}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
    const configFile = path.join(configDir, "turnpike.json");
    fs.writeFileSync(configFile, JSON.stringify({ models: [{ id: MODEL, upstream: { kind: "llama-server", urls: [llama.url] }, pricing }] }));
    turnpike = await startTestServer({ configFile });
  });

  after(async () => {
    await turnpike?.close();
    await llama?.close();
    fs.rmSync(configDir, { recursive: true, force: true });
  });

  const ask = { messages: [{ role: "user" as const, content: "Tell me a story about a cat." }], temperature: 0, seed: 42, max_tokens: 40 };

  /** The text and usage of a streamed completion (usage asked for). */
  async function streamed(client: OpenAI, model: string, request: typeof ask) {
    const stream = await client.chat.completions.create({ model, ...request, stream: true, stream_options: { include_usage: true } });
    let text = "";
    let usage: OpenAI.CompletionUsage | undefined;
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
    }
    return { text, usage, finish };
  }

  it("lists the model ready with its one member and llama-server's per-slot context from /props", async () => {
    const props = (await (await fetch(`${llama.url}/props`)).json()) as { default_generation_settings: { n_ctx: number } };
    assert.equal(props.default_generation_settings.n_ctx, CONTEXT_SIZE / PARALLEL, "n_ctx in /props is per slot");
    const models = await turnpike.client.models.list();
    const model = models.data.find((candidate) => candidate.id === MODEL) as unknown as {
      context_length: number;
      status: { state: string; members_healthy: number; members_total: number };
    };
    assert.ok(model !== undefined, "the model is listed");
    assert.deepEqual(model.status, { state: "ready", members_healthy: 1, members_total: 1 });
    assert.equal(model.context_length, props.default_generation_settings.n_ctx);
  });

  it("gives the same text and usage as llama-server called directly, streamed and not", async () => {
    const straight = await direct.chat.completions.create({ model: "any", ...ask });
    const through = await turnpike.client.chat.completions.create({ model: MODEL, ...ask });
    assert.ok((straight.choices[0]!.message.content ?? "").length > 0);
    assert.equal(through.choices[0]!.message.content, straight.choices[0]!.message.content);
    assert.equal(through.choices[0]!.finish_reason, straight.choices[0]!.finish_reason);
    assert.equal(through.model, MODEL);
    assert.equal(through.usage?.prompt_tokens, straight.usage?.prompt_tokens);
    assert.equal(through.usage?.completion_tokens, straight.usage?.completion_tokens);

    const straightStream = await streamed(direct, "any", ask);
    const throughStream = await streamed(turnpike.client, MODEL, ask);
    assert.equal(throughStream.text, straightStream.text);
    assert.equal(throughStream.text, straight.choices[0]!.message.content, "streamed and not agree");
    assert.equal(throughStream.finish, straightStream.finish);
    assert.equal(throughStream.usage?.prompt_tokens, straightStream.usage?.prompt_tokens);
    assert.equal(throughStream.usage?.completion_tokens, straightStream.usage?.completion_tokens);
  });

  it("bills a metered key exactly from llama-server's usage, streamed and not, and says so in the usage record", async () => {
    const { client, accountId } = await meteredClient("llama-billing@example.com");
    const completion = await client.chat.completions.create({ model: MODEL, ...ask });
    const streamedUsage = (await streamed(client, MODEL, ask)).usage!;
    const prices = { prompt: pricing.prompt, cachedPrompt: pricing.cached_prompt, completion: pricing.completion };
    const expected = (usage: OpenAI.CompletionUsage) =>
      costOf(prices, { promptTokens: usage.prompt_tokens, cachedPromptTokens: usage.prompt_tokens_details?.cached_tokens ?? 0, completionTokens: usage.completion_tokens });
    const { check, records } = await settledRecords(accountId);
    assert.equal(check.activeHolds, 0);
    assert.equal(records.length, 2);
    for (const record of records) {
      assert.equal(record.usage_source, "upstream");
      assert.equal(record.status, 200);
    }
    assert.deepEqual(
      records.map((record) => [record.prompt_tokens, record.cached_prompt_tokens, record.completion_tokens]),
      [completion.usage!, streamedUsage].map((usage) => [usage.prompt_tokens, usage.prompt_tokens_details?.cached_tokens ?? 0, usage.completion_tokens]),
    );
    const costs = records.map((record) => Number(record.cost));
    assert.deepEqual(costs, [expected(completion.usage!), expected(streamedUsage)]);
    assert.equal(check.balance, CREDIT - costs[0]! - costs[1]!);
  });

  it("stops llama-server's slot within a second when the client leaves mid-stream, and bills what was generated", async () => {
    // The hold reserves every completion token asked for: 2 credits each.
    const credit = 10_000 * CREDIT;
    const { client, accountId } = await meteredClient("llama-disconnect@example.com", credit);
    const maxTokens = 1_900;
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "Tell me a long story about a dog." }],
      temperature: 0,
      max_tokens: maxTokens,
      // The end-of-text token banned: the story cannot end (and the slot go idle) before the client leaves.
      logit_bias: { "2": -100 },
      stream: true,
      stream_options: { include_usage: true },
    });
    // Read by hand: leaving a `for await` over the SDK's stream (break) aborts the request at once,
    // and the cancellation would race the look at /slots below.
    const chunks = stream[Symbol.asyncIterator]();
    let received = 0;
    while (received < 20) {
      const next = await chunks.next();
      assert.ok(next.done !== true, `the stream ended after ${received} content chunks`);
      if ((next.value.choices[0]?.delta.content ?? "") !== "") received++;
    }
    const busy = (await slots()).find((slot) => slot.is_processing);
    assert.ok(busy !== undefined, "llama-server is still generating when the client leaves");
    const decodedWhenLeft = busy.next_token?.[0]?.n_decoded ?? 0;
    stream.controller.abort();
    const left = performance.now();

    let idleAfterMs: number | undefined;
    while (performance.now() - left < 3_000) {
      if ((await slots()).every((slot) => !slot.is_processing)) {
        idleAfterMs = performance.now() - left;
        break;
      }
      await delay(10);
    }
    assert.ok(idleAfterMs !== undefined && idleAfterMs < 1_000, `llama-server's slot went idle ${idleAfterMs?.toFixed(0) ?? "> 3000"} ms after the client left`);
    // llama-server logs the cancellation, then the slot's tokens (prompt + generated) as it releases
    // it; the line may reach us through the pipe a moment after /slots says idle.
    const releasePattern = new RegExp(`task ${busy.id_task} \\| stop processing: n_tokens = (\\d+)`);
    let release = releasePattern.exec(llama.logs());
    for (let attempt = 0; attempt < 200 && release === null; attempt++) {
      await delay(10);
      release = releasePattern.exec(llama.logs());
    }
    assert.ok(release !== null, "llama-server logged the slot's release");
    assert.match(llama.logs(), new RegExp(`cancel task, id_task = ${busy.id_task}\\b`), "llama-server saw the request cancelled");
    const promptByLlama = busy.n_prompt_tokens_processed! + busy.n_prompt_tokens_cache!;
    const generatedByLlama = Number(release[1]) - promptByLlama;
    assert.ok(generatedByLlama < maxTokens / 2, `llama-server generated ${generatedByLlama} of ${maxTokens} tokens (${decodedWhenLeft} when the client left)`);

    const { check, records } = await settledRecords(accountId);
    assert.equal(check.activeHolds, 0);
    assert.equal(records.length, 1);
    const record = records[0]!;
    assert.equal(record.status, 499, "logged as a request whose client left");
    assert.ok(record.usage_source === "estimated" || record.usage_source === "upstream", `usage source ${record.usage_source}`);
    assert.ok(record.completion_tokens >= received, `billed ${record.completion_tokens} completion tokens, the client received ${received}`);
    // The slot's tokens leave out the last token sampled (and maybe sent) but not yet evaluated: one more at most.
    assert.ok(record.completion_tokens <= generatedByLlama + 1, `billed ${record.completion_tokens} completion tokens, llama-server generated ${generatedByLlama}`);
    // The prompt as llama-server counted it (its running counts on every chunk), not the engine's upper bound.
    assert.equal(record.prompt_tokens, promptByLlama);
    assert.equal(record.cached_prompt_tokens, busy.n_prompt_tokens_cache);
    assert.ok(Number(record.cost) > 0);
    assert.equal(check.balance, credit - Number(record.cost));
  });

  it("refuses a parameter llama-server cannot honour (n: 2) with 400 unsupported_parameter naming it", async () => {
    for (const stream of [false, true]) {
      await assert.rejects(
        turnpike.client.chat.completions.create({ model: MODEL, ...ask, n: 2, stream }),
        (error: unknown) => {
          assert.ok(error instanceof OpenAI.APIError, String(error));
          assert.equal(error.status, 400);
          assert.equal(error.code, "unsupported_parameter");
          assert.equal(error.param, "n");
          assert.match(error.message, /'n'/);
          return true;
        },
        `stream: ${stream}`,
      );
    }
  });

  it("follows a JSON schema response_format through llama-server's grammar, streamed and not", async () => {
    const request = {
      model: MODEL,
      messages: ask.messages,
      temperature: 0,
      max_tokens: 80,
      response_format: {
        type: "json_schema" as const,
        json_schema: {
          name: "pet",
          strict: true,
          schema: {
            type: "object",
            properties: { name: { type: "string", maxLength: 10 }, age: { type: "integer", minimum: 0, maximum: 20 } },
            required: ["name", "age"],
            additionalProperties: false,
          },
        },
      },
    };
    const completion = await turnpike.client.chat.completions.create(request);
    const stream = await turnpike.client.chat.completions.create({ ...request, stream: true });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    for (const content of [completion.choices[0]!.message.content!, text]) {
      const parsed = JSON.parse(content) as Record<string, unknown>;
      assert.deepEqual(Object.keys(parsed).sort(), ["age", "name"]);
      assert.equal(typeof parsed.name, "string");
      assert.ok((parsed.name as string).length <= 10, `name ${JSON.stringify(parsed.name)} is at most 10 characters`);
      assert.ok(Number.isInteger(parsed.age) && (parsed.age as number) >= 0 && (parsed.age as number) <= 20, `age ${String(parsed.age)}`);
    }
    assert.equal(text, completion.choices[0]!.message.content);
  });
});
