/**
 * `POST /v1/embeddings` around the engine, on the scripted fake engine (whose vectors depend only
 * on the input, and whose runs can be held at a gate): metering at the embeddings price on SQLite
 * and PostgreSQL (the entry's `pricing.embeddings`, else its prompt price), an account without
 * credit refused before anything is prepared or held, a client that leaves mid-run aborting the
 * engine's work and billing nothing, a full queue refused, the request caps and `dimensions`
 * (Matryoshka lists) with 400s naming the field, and the endpoint refusals both ways.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import type { Kysely } from "kysely";
import { FakeEngine, FakeGate, fakeEmbedding, fakeEmbeddingTokens } from "../src/engines/fake/fake-engine.ts";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { backends, freshPostgresSchema } from "./helpers/databases.ts";
import { billedExactly, meteredKey } from "./helpers/metered.ts";
import { postJson, startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";

const DIMENSIONS = 16;
const CREDIT = 1_000_000;
/** The chat model's prices; the embedding model bills its inputs at `EMBEDDINGS_PRICE`, the other embedding model at its prompt price. */
const pricing = { prompt: 3_000_000, cached_prompt: 1_000_000, completion: 9_000_000 };
const EMBEDDINGS_PRICE = 2_000_000;

/** The fake's count of an embeddings request's tokens. */
const tokensOf = (texts: string[]) => texts.reduce((sum, text) => sum + fakeEmbeddingTokens({ text }), 0);

function writeConfig(): string {
  const configFile = path.join(temporaryDirectory(), "turnpike.json");
  fs.writeFileSync(
    configFile,
    JSON.stringify({
      models: [
        { id: "embed", path: "embed.gguf", serves: ["embeddings"], embeddings: { matryoshka: [4, 8] }, pricing: { ...pricing, embeddings: EMBEDDINGS_PRICE } },
        { id: "embed-any", path: "embed-any.gguf", serves: ["embeddings"], embeddings: { matryoshka: true }, pricing },
        { id: "embed-narrow", path: "embed-narrow.gguf", serves: ["embeddings"] },
        { id: "gated", path: "gated.gguf", serves: ["embeddings"], pricing },
        { id: "chat", path: "chat.gguf", pricing },
        { id: "later", path: "later.gguf" },
      ],
      plans: [{ id: "funded", name: "Funded", price: { amount: 100, currency: "usd" }, credit: CREDIT }],
    }),
  );
  return configFile;
}

const embeddingCapabilities = { services: ["embeddings"] as const, embeddingDimensions: DIMENSIONS };

for (const backend of backends) {
  describe(`embeddings are admitted, billed and settled as generations are (${backend})`, { timeout: 120_000 }, () => {
    let server: TestServer;
    let database: Kysely<Database>;
    let dropSchema: (() => Promise<void>) | undefined;
    const gate = new FakeGate();
    const embed = new FakeEngine({ capabilities: embeddingCapabilities, contextLength: 64 });
    const embedAny = new FakeEngine({ capabilities: embeddingCapabilities });
    const narrow = new FakeEngine({ capabilities: embeddingCapabilities, capacity: 1, queueSize: 0, embeddingGate: gate });
    const gated = new FakeEngine({ capabilities: embeddingCapabilities, embeddingGate: gate });
    const chat = new FakeEngine();
    const later = new FakeEngine();

    before(async () => {
      let databaseUrl = "";
      if (backend === "postgres") ({ url: databaseUrl, drop: dropSchema } = await freshPostgresSchema());
      server = await startTestServer({
        configFile: writeConfig(),
        flags: { database_url: databaseUrl },
        engines: { embed, "embed-any": embedAny, "embed-narrow": narrow, gated, chat, later },
      });
      database = await openStore({ dataDir: server.dataDir, databaseUrl });
    });
    after(async () => {
      gate.release();
      await database?.destroy();
      await server?.close();
      await dropSchema?.();
    });

    const clientOf = (key: string) => new OpenAI({ baseURL: server.baseURL, apiKey: key, maxRetries: 0 });

    it("bills the inputs' tokens at the entry's embeddings price, and a model without one at its prompt price", async () => {
      const texts = ["A first text to embed.", "A second, somewhat longer text to embed."];
      const priced = await meteredKey(database, "funded");
      const answer = await clientOf(priced.key).embeddings.create({ model: "embed", input: texts, encoding_format: "float" });
      assert.equal(answer.usage.prompt_tokens, tokensOf(texts));
      assert.equal(answer.usage.total_tokens, answer.usage.prompt_tokens);
      const embeddingsPricing = { prompt: EMBEDDINGS_PRICE, cached_prompt: EMBEDDINGS_PRICE, completion: 0 };
      const { records, balance } = await billedExactly(database, priced.accountId, CREDIT, embeddingsPricing, 1);
      assert.deepEqual(
        { prompt: records[0]!.prompt_tokens, completion: records[0]!.completion_tokens, status: records[0]!.status, finish: records[0]!.finish_reason },
        { prompt: tokensOf(texts), completion: 0, status: 200, finish: "stop" },
      );
      assert.equal(CREDIT - balance, Math.ceil((tokensOf(texts) * EMBEDDINGS_PRICE) / 1_000_000));

      const plain = await meteredKey(database, "funded");
      await clientOf(plain.key).embeddings.create({ model: "embed-any", input: texts });
      const { balance: plainBalance } = await billedExactly(database, plain.accountId, CREDIT, { prompt: pricing.prompt, cached_prompt: pricing.prompt, completion: 0 }, 1);
      assert.equal(CREDIT - plainBalance, Math.ceil((tokensOf(texts) * pricing.prompt) / 1_000_000));
    });

    it("refuses an account without credit with 429 insufficient_quota before preparing or holding anything", async () => {
      const { accountId, key } = await meteredKey(database, null);
      const before = embed.embedded;
      const error = await clientOf(key)
        .embeddings.create({ model: "embed", input: "Hello there" })
        .then(() => assert.fail("answered"), (caught: unknown) => caught);
      assert.ok(error instanceof OpenAI.RateLimitError, String(error));
      assert.equal(error.code, "insufficient_quota");
      assert.equal(embed.embedded, before, "nothing ran");
      const holds = await database.selectFrom("holds").select("id").where("account_id", "=", accountId).execute();
      assert.equal(holds.length, 0, "no hold was placed");
    });

    it("aborts the engine's run when the client leaves, and bills nothing", async () => {
      const { accountId, key } = await meteredKey(database, "funded");
      const controller = new AbortController();
      const signalsBefore = gated.signals.length;
      const request = clientOf(key).embeddings.create({ model: "gated", input: "held at the gate" }, { signal: controller.signal });
      request.catch(() => {});
      for (let waited = 0; gated.signals.length === signalsBefore && waited < 200; waited++) await delay(25);
      assert.equal(gated.signals.length, signalsBefore + 1, "the run started");
      controller.abort();
      const signal = gated.signals.at(-1)!;
      for (let waited = 0; !signal.aborted && waited < 200; waited++) await delay(25);
      assert.ok(signal.aborted, "the engine's run was aborted");
      const { records, balance } = await billedExactly(database, accountId, CREDIT, pricing, 1);
      assert.equal(records[0]!.status, 499);
      assert.equal(records[0]!.cost, 0);
      assert.equal(balance, CREDIT);
    });

    it("refuses a request with 503 engine_overloaded while the model's queue is full", async () => {
      const first = postJson(`${server.baseURL}/embeddings`, { model: "embed-narrow", input: "first" }, { authorization: `Bearer ${server.key}` });
      for (let waited = 0; narrow.running === 0 && waited < 200; waited++) await delay(25);
      const second = await postJson(`${server.baseURL}/embeddings`, { model: "embed-narrow", input: "second" }, { authorization: `Bearer ${server.key}` });
      assert.equal(second.status, 503);
      assert.equal(second.body.error.code, "engine_overloaded");
      assert.ok(second.headers.get("retry-after") !== null);
      gate.release();
      assert.equal((await first).status, 200);
    });

    it("answers float and base64 alike, each input's vector in its index, equal inputs equal vectors", async () => {
      const texts = ["same", "other", "same"];
      const floats = await server.client.embeddings.create({ model: "embed", input: texts, encoding_format: "float" });
      // The SDK asks for base64 when no format is given, and decodes it to numbers.
      const decoded = await server.client.embeddings.create({ model: "embed", input: texts });
      assert.deepEqual(floats.data.map((item) => item.index), [0, 1, 2]);
      for (const [index, text] of texts.entries()) {
        assert.deepEqual(floats.data[index]!.embedding, Array.from(fakeEmbedding({ text }, DIMENSIONS)));
        assert.deepEqual(decoded.data[index]!.embedding, floats.data[index]!.embedding);
      }
      assert.deepEqual(floats.data[0]!.embedding, floats.data[2]!.embedding);
      const raw = await postJson(`${server.baseURL}/embeddings`, { model: "embed", input: "same", encoding_format: "base64" }, { authorization: `Bearer ${server.key}` });
      const bytes = Buffer.from(raw.body.data[0].embedding as string, "base64");
      assert.equal(bytes.length, DIMENSIONS * 4);
      assert.deepEqual(Array.from({ length: DIMENSIONS }, (_, index) => bytes.readFloatLE(index * 4)), floats.data[0]!.embedding);
      assert.equal(raw.body.object, "list");
      assert.equal(raw.body.model, "embed");
    });

    it("shortens vectors to a declared Matryoshka length and normalises them again; refuses other lengths naming dimensions", async () => {
      const full = Array.from(fakeEmbedding({ text: "nested" }, DIMENSIONS));
      const short = await server.client.embeddings.create({ model: "embed", input: "nested", dimensions: 4, encoding_format: "float" });
      const vector = short.data[0]!.embedding;
      assert.equal(vector.length, 4);
      const norm = Math.hypot(...full.slice(0, 4));
      for (const [index, value] of vector.entries()) assert.ok(Math.abs(value - full[index]! / norm) < 1e-6);
      assert.ok(Math.abs(Math.hypot(...vector) - 1) < 1e-5, "unit length");
      assert.equal((await server.client.embeddings.create({ model: "embed", input: "nested", dimensions: DIMENSIONS })).data[0]!.embedding.length, DIMENSIONS);
      assert.equal((await server.client.embeddings.create({ model: "embed-any", input: "nested", dimensions: 3 })).data[0]!.embedding.length, 3);
      for (const [model, dimensions, message] of [
        ["embed", 5, /cannot shorten its vectors to 5 dimensions; it gives 4, 8, 16/],
        ["embed", DIMENSIONS + 1, /makes vectors of 16 dimensions/],
        ["embed-narrow", 8, /only 16 \(its entry does not declare it Matryoshka-trained/],
      ] as const) {
        const refused = await postJson(`${server.baseURL}/embeddings`, { model, input: "x", dimensions }, { authorization: `Bearer ${server.key}` });
        assert.equal(refused.status, 400, JSON.stringify(refused.body));
        assert.equal(refused.body.error.param, "dimensions");
        assert.match(refused.body.error.message, message);
      }
    });

    it("refuses empty inputs, too many inputs, an input over the context and too many tokens, each naming what is wrong", async () => {
      const cases: Array<[body: Record<string, unknown>, param: string, code: string]> = [
        [{ input: "" }, "input", "invalid_request_error"],
        [{ input: ["a", ""] }, "input[1]", "invalid_request_error"],
        [{ input: [[1, 2], []] }, "input[1]", "invalid_request_error"],
        [{ input: [] }, "input", "invalid_request_error"],
        [{ input: Array.from({ length: 2049 }, () => "a") }, "input", "invalid_request_error"],
        // The embed model's context is 64 tokens: 65 × 4 characters are 65 tokens.
        [{ input: ["short", "x".repeat(260)] }, "input", "context_length_exceeded"],
        [{ input: Array.from({ length: 2000 }, () => "y".repeat(604)) }, "input", "max_tokens_per_request"],
      ];
      for (const [body, param, code] of cases) {
        const refused = await postJson(`${server.baseURL}/embeddings`, { model: "embed-any", ...body, ...(code === "context_length_exceeded" ? { model: "embed" } : {}) }, { authorization: `Bearer ${server.key}` });
        assert.equal(refused.status, 400, `${param}: ${JSON.stringify(refused.body.error ?? refused.body.usage)}`);
        assert.equal(refused.body.error.param, param);
        assert.equal(refused.body.error.code, code);
      }
      const truncated = await server.client.embeddings.create({ model: "embed", input: ["short", "x".repeat(260)], truncate: true } as OpenAI.EmbeddingCreateParams);
      assert.equal(truncated.usage.prompt_tokens, fakeEmbeddingTokens({ text: "short" }) + 64, "the long input was cut to the context");
    });

    it("refuses an embedding model asked for chat, and a chat model asked for embeddings, naming the model and what it serves", async () => {
      const chatOnEmbed = await postJson(`${server.baseURL}/chat/completions`, { model: "embed", messages: [{ role: "user", content: "Hi" }] }, { authorization: `Bearer ${server.key}` });
      assert.equal(chatOnEmbed.status, 400);
      assert.equal(chatOnEmbed.body.error.code, "model_does_not_support_endpoint");
      assert.match(chatOnEmbed.body.error.message, /Model 'embed' does not serve chat: it serves embeddings \(\/v1\/embeddings\)/);
      const embedOnChat = await postJson(`${server.baseURL}/embeddings`, { model: "chat", input: "Hi" }, { authorization: `Bearer ${server.key}` });
      assert.equal(embedOnChat.status, 400);
      assert.equal(embedOnChat.body.error.code, "model_does_not_support_endpoint");
      assert.equal(embedOnChat.body.error.param, "model");
      assert.match(embedOnChat.body.error.message, /Model 'chat' does not serve embeddings: it serves chat/);
      const models = await server.client.models.list();
      const endpoints = Object.fromEntries(models.data.map((model) => [model.id, (model as unknown as { endpoints: string[] }).endpoints]));
      assert.deepEqual(endpoints.embed, ["/v1/embeddings"]);
      assert.ok(endpoints.chat!.includes("/v1/chat/completions") && !endpoints.chat!.includes("/v1/embeddings"));
      const described = Object.fromEntries(models.data.map((model) => [model.id, model as unknown as { embeddings?: unknown; pricing: { embeddings?: number } }]));
      assert.deepEqual(described.embed!.embeddings, { dimensions: DIMENSIONS, matryoshka: [4, 8] });
      assert.equal(described.embed!.pricing.embeddings, EMBEDDINGS_PRICE);
      assert.deepEqual(described["embed-narrow"]!.embeddings, { dimensions: DIMENSIONS, matryoshka: false });
      assert.equal(described["embed-any"]!.pricing.embeddings, pricing.prompt, "the prompt price where the entry sets none");
      assert.equal(described.chat!.embeddings, undefined);
      assert.equal(described.chat!.pricing.embeddings, undefined);
    });

    it("charges the key's tokens per minute the tokens embedded, and refuses past them with 429 before running", async () => {
      const { key } = await meteredKey(database, "funded", { tpm: 40 });
      const text = "x".repeat(100);
      const first = await postJson(`${server.baseURL}/embeddings`, { model: "embed", input: text }, { authorization: `Bearer ${key}` });
      assert.equal(first.status, 200);
      assert.equal(first.headers.get("x-ratelimit-limit-tokens"), "40");
      const remaining = Number(first.headers.get("x-ratelimit-remaining-tokens"));
      // The bucket refills continuously (40 a minute): within a token of the charge.
      assert.ok(Math.abs(remaining - (40 - fakeEmbeddingTokens({ text }))) <= 1, `remaining ${remaining}`);
      const before = embed.embedded;
      const refused = await postJson(`${server.baseURL}/embeddings`, { model: "embed", input: [text, text] }, { authorization: `Bearer ${key}` });
      assert.equal(refused.status, 429);
      assert.equal(refused.body.error.code, "rate_limit_exceeded");
      assert.equal(embed.embedded, before, "nothing ran");
    });

    it("refuses a key not allowed the model with 403 before anything runs", async () => {
      const { key } = await meteredKey(database, "funded", { models: ["chat"] });
      const refused = await postJson(`${server.baseURL}/embeddings`, { model: "embed", input: "Hi" }, { authorization: `Bearer ${key}` });
      assert.equal(refused.status, 403);
      assert.equal(refused.body.error.code, "model_not_allowed");
    });

    it("answers 503 model_not_ready, not a refusal, while a model whose entry says nothing of what it serves is loading", async () => {
      later.status_ = { state: "loading" };
      const loading = await postJson(`${server.baseURL}/embeddings`, { model: "later", input: "Hi" }, { authorization: `Bearer ${server.key}` });
      assert.equal(loading.status, 503);
      assert.equal(loading.body.error.code, "model_not_ready");
      later.status_ = { state: "ready" };
      const loaded = await postJson(`${server.baseURL}/embeddings`, { model: "later", input: "Hi" }, { authorization: `Bearer ${server.key}` });
      assert.equal(loaded.status, 400);
      assert.equal(loaded.body.error.code, "model_does_not_support_endpoint");
    });
  });
}
