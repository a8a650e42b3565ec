/**
 * The Messages API is metered exactly as chat completions, on SQLite and PostgreSQL, on the real
 * tiny model: the balance drops by the prompt's tokens × the prompt price, its cached part at the
 * cached price, + output tokens × the completion price, where the prompt is `input_tokens +
 * cache_read_input_tokens` (each token counted once); a message and a stream alike. An account
 * without credit is refused before anything is prepared or held, in Anthropic's shape (400, the
 * SDK's BadRequestError); an account with a little credit still runs a request asking for 32,000
 * tokens, whose hold is what the context leaves, not 32,000.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import type { Kysely } from "kysely";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { backends, freshPostgresSchema } from "./helpers/databases.ts";
import { billedExactly, costOfUsage, meteredKey } from "./helpers/metered.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

/** Greedy sampling (`temperature` 0): the Messages API takes it, though the newest SDK types no longer list it. */
const GREEDY: object = { temperature: 0 };

const pricing = { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 };
const CREDIT = 1_000_000;
/** Enough for a prompt and what a 1,024-token context leaves (2 credits a completion token), far from 32,000 completion tokens. */
const SMALL_CREDIT = 5_000;
const CONTEXT = 1024;

/** What a message's usage costs: its prompt is input + cache read (+ cache creation, always 0 here). */
function costOfMessage(usage: Anthropic.Usage): number {
  const cached = usage.cache_read_input_tokens ?? 0;
  return costOfUsage(pricing, { promptTokens: usage.input_tokens + cached + (usage.cache_creation_input_tokens ?? 0), cachedPromptTokens: cached, completionTokens: usage.output_tokens });
}

for (const backend of backends) {
  describe(`the Messages API is billed as chat completions are (${backend})`, { timeout: 120_000 }, () => {
    let server: TestServer;
    let database: Kysely<Database>;
    let dropSchema: (() => Promise<void>) | undefined;
    let prepared = 0;

    before(async () => {
      const directory = temporaryDirectory();
      const configFile = path.join(directory, "turnpike.json");
      fs.writeFileSync(
        configFile,
        JSON.stringify({
          models: [{ id: "story", path: storiesModel, pricing }],
          plans: [
            { id: "funded", name: "Funded", price: { amount: 100, currency: "usd" }, credit: CREDIT },
            { id: "small", name: "Small", price: { amount: 1, currency: "usd" }, credit: SMALL_CREDIT },
          ],
        }),
      );
      let databaseUrl = "";
      if (backend === "postgres") ({ url: databaseUrl, drop: dropSchema } = await freshPostgresSchema());
      server = await startTestServer({ configFile, flags: { database_url: databaseUrl, context_size: String(CONTEXT) } });
      database = await openStore({ dataDir: server.dataDir, databaseUrl });
      const engine = server.server.catalog.get("story").engine;
      const prepare = engine.prepare.bind(engine);
      engine.prepare = (request, bound) => {
        prepared++;
        return prepare(request, bound);
      };
    });
    after(async () => {
      await database?.destroy();
      await server?.close();
      await dropSchema?.();
    });

    const clientOf = (key: string) => new Anthropic({ baseURL: server.url, apiKey: key, maxRetries: 0 });

    it("bills a message exactly, as the same chat completion is, its cached prompt tokens once, at the cached price", async () => {
      const chatKey = await meteredKey(database, "funded");
      const messagesKey = await meteredKey(database, "funded");
      const prompt = `Once upon a time ${backend}`;
      const completion = await server.client.chat.completions.create(
        { model: "story", messages: [{ role: "user", content: prompt }], max_tokens: 24, temperature: 0 },
        { headers: { authorization: `Bearer ${chatKey.key}` } },
      );
      await billedExactly(database, chatKey.accountId, CREDIT, pricing, 1);
      // The same prompt again: its prefix is in the engine's cache now.
      const message = await clientOf(messagesKey.key).messages.create({ model: "story", max_tokens: 24, ...GREEDY, messages: [{ role: "user", content: prompt }] });
      const { records, balance } = await billedExactly(database, messagesKey.accountId, CREDIT, pricing, 1);
      const usage = message.usage;
      assert.ok((usage.cache_read_input_tokens ?? 0) > 0, "the repeated prompt was read from the cache");
      assert.equal(usage.input_tokens + (usage.cache_read_input_tokens ?? 0), completion.usage!.prompt_tokens, "input + cache read is the whole prompt, once");
      assert.equal(usage.output_tokens, completion.usage!.completion_tokens);
      assert.equal(message.content[0]?.type === "text" && message.content[0].text, completion.choices[0]!.message.content);
      assert.equal(records[0]!.prompt_tokens, completion.usage!.prompt_tokens);
      assert.equal(records[0]!.cached_prompt_tokens, usage.cache_read_input_tokens);
      assert.equal(CREDIT - balance, costOfMessage(usage), "prompt × price with the cached part at the cached price, output × completion price");
    });

    it("bills a streamed message exactly, by its final usage", async () => {
      const { accountId, key } = await meteredKey(database, "funded");
      const final = await clientOf(key).messages.stream({ model: "story", max_tokens: 24, ...GREEDY, messages: [{ role: "user", content: `A streamed story ${backend}` }] }).finalMessage();
      const { records, balance } = await billedExactly(database, accountId, CREDIT, pricing, 1);
      assert.equal(records[0]!.completion_tokens, final.usage.output_tokens);
      assert.equal(records[0]!.prompt_tokens, final.usage.input_tokens + (final.usage.cache_read_input_tokens ?? 0));
      assert.equal(CREDIT - balance, costOfMessage(final.usage));
    });

    it("refuses an account without credit in Anthropic's shape (BadRequestError), before preparing or holding anything", async () => {
      const { accountId, key } = await meteredKey(database, null);
      const before = prepared;
      for (const stream of [false, true]) {
        const error = await clientOf(key)
          .messages.create({ model: "story", max_tokens: 16, stream, messages: [{ role: "user", content: "Hi" }] } as Anthropic.MessageCreateParamsNonStreaming)
          .then(() => assert.fail("answered"), (caught: unknown) => caught);
        assert.ok(error instanceof Anthropic.BadRequestError, String(error));
        assert.equal(error.type, "invalid_request_error");
        assert.match(error.message, /credit balance is too low/);
      }
      assert.equal(prepared, before, "nothing was prepared");
      const holds = await database.selectFrom("holds").select("id").where("account_id", "=", accountId).execute();
      assert.equal(holds.length, 0, "no hold was placed");
    });

    it("runs a request asking for 32,000 tokens on a little credit: the hold is what the context leaves", async () => {
      const { accountId, key } = await meteredKey(database, "small");
      const final = await clientOf(key).messages.stream({ model: "story", max_tokens: 32_000, messages: [{ role: "user", content: "Once upon a time" }] }).finalMessage();
      assert.equal(final.stop_reason, "max_tokens");
      const prompt = final.usage.input_tokens + (final.usage.cache_read_input_tokens ?? 0);
      assert.equal(prompt + final.usage.output_tokens, CONTEXT, "generated to the end of the context");
      const { balance } = await billedExactly(database, accountId, SMALL_CREDIT, pricing, 1);
      assert.equal(SMALL_CREDIT - balance, costOfMessage(final.usage));
    });
  });
}
