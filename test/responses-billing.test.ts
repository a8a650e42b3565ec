/**
 * The Responses API is metered exactly as chat completions, on SQLite and PostgreSQL, on the real
 * tiny models: the balance drops by input tokens × the prompt price (cached at the cached price)
 * + output tokens × the completion price, for a response and a stream alike, the same as the same
 * request costs on `/v1/chat/completions`; a stream its client cuts mid-way is billed for what was
 * generated and stored `cancelled`; a key that cannot pay, or is over its rate limit, is refused
 * before anything is prepared, held or stored.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { Kysely } from "kysely";
import OpenAI from "openai";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { backends, freshPostgresSchema } from "./helpers/databases.ts";
import { billedExactly, costOfUsage, meteredKey } from "./helpers/metered.ts";
import { forEachSseEvent } from "./helpers/crash-streams.ts";
import { modelsDir, postJson, startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

const randomModel = path.join(modelsDir, "llama-2-tiny-random.gguf");
const pricing = { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 };
const CREDIT = 1_000_000;

for (const backend of backends) {
  describe(`the Responses API is billed as chat completions are (${backend})`, { timeout: 120_000 }, () => {
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
          models: [
            { id: "story", path: storiesModel, pricing },
            { id: "random", path: randomModel, pricing },
          ],
          plans: [{ id: "funded", name: "Funded", price: { amount: 100, currency: "usd" }, credit: CREDIT }],
        }),
      );
      let databaseUrl = "";
      if (backend === "postgres") ({ url: databaseUrl, drop: dropSchema } = await freshPostgresSchema());
      server = await startTestServer({ configFile, flags: { database_url: databaseUrl, context_size: "4096" } });
      database = await openStore({ dataDir: server.dataDir, databaseUrl });
      for (const id of ["story", "random"]) {
        const engine = server.server.catalog.get(id).engine;
        const prepare = engine.prepare.bind(engine);
        engine.prepare = (request, bound) => {
          prepared++;
          return prepare(request, bound);
        };
      }
    });
    after(async () => {
      await database?.destroy();
      await server?.close();
      await dropSchema?.();
    });

    const clientOf = (key: string) => new OpenAI({ baseURL: server.baseURL, apiKey: key, maxRetries: 0 });
    /** The account's rows in the database, once the node wrote what it holds (a finished response waits for the commit window). */
    const storedOf = async (accountId: string) => {
      await server.server.responses.drain();
      return database.selectFrom("responses").select(["id", "status"]).where("account_id", "=", accountId).execute();
    };

    it("bills a response exactly, as the same chat completion is, cached prompt tokens at the cached price", async () => {
      const chatKey = await meteredKey(database, "funded");
      const responsesKey = await meteredKey(database, "funded");
      const prompt = `Once upon a time ${backend}`;
      const completion = await clientOf(chatKey.key).chat.completions.create({ model: "story", messages: [{ role: "user", content: prompt }], max_tokens: 24, temperature: 0 });
      const chatUsage = completion.usage!;
      const chat = await billedExactly(database, chatKey.accountId, CREDIT, pricing, 1);
      assert.equal(
        CREDIT - chat.balance,
        costOfUsage(pricing, { promptTokens: chatUsage.prompt_tokens, cachedPromptTokens: chatUsage.prompt_tokens_details?.cached_tokens ?? 0, completionTokens: chatUsage.completion_tokens }),
      );
      // The same prompt again: its prefix is in the engine's cache now.
      const response = await clientOf(responsesKey.key).responses.create({ model: "story", input: prompt, max_output_tokens: 24, temperature: 0 });
      const usage = response.usage!;
      const { balance } = await billedExactly(database, responsesKey.accountId, CREDIT, pricing, 1);
      assert.equal(usage.input_tokens, chatUsage.prompt_tokens, "the same prompt");
      assert.equal(usage.output_tokens, chatUsage.completion_tokens, "the same generation");
      assert.equal(response.output_text, completion.choices[0]!.message.content);
      assert.ok(usage.input_tokens_details.cached_tokens > 0, "the repeated prompt was cached");
      assert.equal(
        CREDIT - balance,
        costOfUsage(pricing, { promptTokens: usage.input_tokens, cachedPromptTokens: usage.input_tokens_details.cached_tokens, completionTokens: usage.output_tokens }),
        "input × prompt price, cached input at the cached price, output × completion price",
      );
    });

    it("bills a streamed response exactly, by its final event's usage", async () => {
      const { accountId, key } = await meteredKey(database, "funded");
      const stream = await clientOf(key).responses.create({ model: "story", input: "Once upon a time", max_output_tokens: 24, temperature: 0, stream: true });
      let final: OpenAI.Responses.Response | undefined;
      for await (const event of stream) if (event.type === "response.completed" || event.type === "response.incomplete") final = event.response;
      assert.ok(final?.usage);
      const { records, balance } = await billedExactly(database, accountId, CREDIT, pricing, 1);
      assert.equal(records[0]!.completion_tokens, final.usage.output_tokens);
      assert.equal(records[0]!.prompt_tokens, final.usage.input_tokens);
      assert.equal(
        CREDIT - balance,
        costOfUsage(pricing, { promptTokens: final.usage.input_tokens, cachedPromptTokens: final.usage.input_tokens_details.cached_tokens, completionTokens: final.usage.output_tokens }),
      );
      const { output_text: _text, ...stored } = await clientOf(key).responses.retrieve(final.id);
      assert.deepEqual(stored, final, "GET returns what the terminal event carried");
    });

    it("bills a stream its client cut mid-way for what was generated, and stores it cancelled", async () => {
      const { accountId, key } = await meteredKey(database, "funded");
      const controller = new AbortController();
      const response = await fetch(`${server.baseURL}/responses`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify({ model: "random", input: "Go", max_output_tokens: 3000, stream: true }),
        signal: controller.signal,
      });
      assert.equal(response.status, 200);
      let id: string | undefined;
      let delivered = 0;
      await forEachSseEvent(response, (event) => {
        const data = event.split("\n").find((line) => line.startsWith("data: "));
        if (data === undefined) return;
        const payload = JSON.parse(data.slice(6)) as { type: string; response?: { id: string } };
        if (payload.type === "response.created") id = payload.response!.id;
        if (payload.type === "response.output_text.delta" && ++delivered === 40) controller.abort();
      });
      assert.equal(delivered, 40);
      const { records } = await billedExactly(database, accountId, CREDIT, pricing, 1);
      const billed = records[0]!.completion_tokens;
      assert.ok(billed >= 40 && billed < 3000, `billed ${billed} tokens for a stream cut after 40 deltas`);
      assert.equal(records[0]!.finish_reason, "cancelled");
      await server.server.responses.drain();
      const stored = await clientOf(key).responses.retrieve(id!);
      assert.equal(stored.status, "cancelled");
      assert.equal(stored.usage!.output_tokens, billed, "the stored usage is what was billed");
    });

    it("refuses a key that cannot pay with insufficient_quota before preparing, holding or storing anything", async () => {
      const { accountId, key } = await meteredKey(database, null);
      const before = prepared;
      for (const body of [{ stream: false }, { stream: true }, { background: true }]) {
        const refused = await postJson(`${server.baseURL}/responses`, { model: "story", input: "Hi", max_output_tokens: 16, ...body }, { authorization: `Bearer ${key}` });
        assert.equal(refused.status, 429, refused.text);
        assert.equal(refused.body.error.code, "insufficient_quota");
      }
      assert.equal(prepared, before, "nothing was prepared");
      assert.deepEqual(await storedOf(accountId), [], "nothing was stored");
      const holds = await database.selectFrom("holds").select("id").where("account_id", "=", accountId).execute();
      assert.equal(holds.length, 0, "no hold was placed");
    });

    it("applies the key's rate limits, refusing over them before preparing or storing anything", async () => {
      const { accountId, key } = await meteredKey(database, "funded", { rpm: 1 });
      const first = await clientOf(key).responses.create({ model: "story", input: "Hi", max_output_tokens: 16 });
      const before = prepared;
      const refused = await postJson(`${server.baseURL}/responses`, { model: "story", input: "Hi", max_output_tokens: 16 }, { authorization: `Bearer ${key}` });
      assert.equal(refused.status, 429, refused.text);
      assert.equal(refused.body.error.code, "rate_limit_exceeded");
      assert.equal(prepared, before);
      assert.deepEqual((await storedOf(accountId)).map((row) => row.id), [first.id], "only the admitted response was stored");
      await billedExactly(database, accountId, CREDIT, pricing, 1);
    });
  });
}
