/**
 * `POST /v1/embeddings` end to end on the embedded engine, with the clients RAG pipelines use: the
 * official `openai` SDK (float, and base64 which it asks for by default and decodes: the same
 * vectors), LangChain's `OpenAIEmbeddings` and the Vercel AI SDK's `embed`/`embedMany`. The model
 * is `embeddingModelPath()` (stories260K with mean pooling: an embedding GGUF, detected as one with
 * no setting), declared Matryoshka at 16 and 32 of its 64 dimensions; a chat model beside it. Then
 * metering with the entry's embeddings price, on SQLite and PostgreSQL.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import { OpenAIEmbeddings } from "@langchain/openai";
import { embed, embedMany, cosineSimilarity } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import type { Kysely } from "kysely";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { backends, freshPostgresSchema } from "./helpers/databases.ts";
import { billedExactly, meteredKey } from "./helpers/metered.ts";
import { postJson, startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { embeddingModelPath } from "./helpers/test-models.ts";
import { cosine } from "./helpers/vectors.ts";

/** stories260K's embedding width. */
const DIMENSIONS = 64;
const CONTEXT = 256;
const CREDIT = 1_000_000;
const pricing = { prompt: 3_000_000, cached_prompt: 1_000_000, completion: 9_000_000 };
const EMBEDDINGS_PRICE = 2_000_000;

const texts = [
  "Once upon a time there was a little cat who liked to play in the garden.",
  "The dog ran away.",
  "Lily and Ben went to the park. They saw a big red ball under a tree.",
];

function writeConfig(): string {
  const configFile = path.join(temporaryDirectory(), "turnpike.json");
  fs.writeFileSync(
    configFile,
    JSON.stringify({
      models: [
        { id: "embed", path: embeddingModelPath(), embeddings: { matryoshka: [16, 32] }, pricing: { ...pricing, embeddings: EMBEDDINGS_PRICE } },
        { id: "story", path: storiesModel, pricing },
      ],
      plans: [{ id: "funded", name: "Funded", price: { amount: 100, currency: "usd" }, credit: CREDIT }],
    }),
  );
  return configFile;
}


/**
 * How far a vector decoded in a batch may be from the same input's decoded alone, element by
 * element. On most x86 machines the two agree to 1e-6; on an AMD Zen 4 VM (family 25, model 17,
 * AVX-512 hidden, llama.cpp's haswell kernels) they differ by up to ~1.5e-4, the same at the
 * commit before this tolerance: the sums run in another order for a batch of sequences. Vectors
 * of different texts differ by far more (checked below), so an input given another's vector, or
 * a vector cut from the wrong place in a batch, still fails.
 */
const SAME_VECTOR = 1e-3;

function assertClose(actual: readonly number[], expected: readonly number[], what: string): void {
  assert.equal(actual.length, expected.length, what);
  const worst = Math.max(...actual.map((value, index) => Math.abs(value - expected[index]!)));
  assert.ok(worst < SAME_VECTOR, `${what}: differs by ${worst}`);
}

describe("POST /v1/embeddings on the embedded engine", { timeout: 180_000 }, () => {
  let server: TestServer;
  /** Each text's vector, asked for alone as floats. */
  const alone = new Map<string, number[]>();

  before(async () => {
    server = await startTestServer({ configFile: writeConfig(), flags: { context_size: String(CONTEXT) } });
    for (const text of texts) alone.set(text, (await server.client.embeddings.create({ model: "embed", input: text, encoding_format: "float" })).data[0]!.embedding);
  });
  after(async () => {
    await server?.close();
  });

  it("lists the embedding model with /v1/embeddings only, detected from its GGUF", async () => {
    const models = await server.client.models.list();
    const endpoints = Object.fromEntries(models.data.map((model) => [model.id, (model as unknown as { endpoints: string[] }).endpoints]));
    assert.deepEqual(endpoints.embed, ["/v1/embeddings"]);
    assert.ok(!endpoints.story!.includes("/v1/embeddings"));
    const embedModel = models.data.find((model) => model.id === "embed") as unknown as { embeddings: unknown; context_length: number };
    assert.deepEqual(embedModel.embeddings, { dimensions: DIMENSIONS, matryoshka: [16, 32] });
    assert.equal(embedModel.context_length, CONTEXT);
  });

  it("gives unit vectors of the model's width; float and base64 (the SDK's default) decode to the same numbers", async () => {
    const floats = await server.client.embeddings.create({ model: "embed", input: texts, encoding_format: "float" });
    const decoded = await server.client.embeddings.create({ model: "embed", input: texts });
    assert.equal(floats.object, "list");
    assert.equal(floats.model, "embed");
    for (const [index, item] of floats.data.entries()) {
      assert.equal(item.embedding.length, DIMENSIONS);
      assert.ok(Math.abs(Math.hypot(...item.embedding) - 1) < 1e-5, "L2-normalised");
      // A float32 written as JSON reads back to the same float32.
      assert.deepEqual(Array.from(Float32Array.from(item.embedding)), decoded.data[index]!.embedding);
    }
    assert.ok(floats.usage.prompt_tokens > 0);
    assert.equal(floats.usage.total_tokens, floats.usage.prompt_tokens);
  });

  it("keeps each input's vector at its index in a batch, the vector it has alone; identical inputs give identical vectors", async () => {
    const batch = [texts[2]!, texts[0]!, texts[1]!, texts[0]!];
    const answer = await server.client.embeddings.create({ model: "embed", input: batch, encoding_format: "float" });
    assert.deepEqual(answer.data.map((item) => item.index), [0, 1, 2, 3]);
    for (const [index, text] of batch.entries()) assertClose(answer.data[index]!.embedding, alone.get(text)!, `input ${index}`);
    assert.deepEqual(answer.data[1]!.embedding, answer.data[3]!.embedding);
    assert.ok(cosine(answer.data[0]!.embedding, answer.data[2]!.embedding) < 0.9999, "different texts, different vectors");
    for (const [a, b] of [[0, 1], [0, 2], [1, 2]] as const) {
      const apart = Math.max(...alone.get(texts[a]!)!.map((value, index) => Math.abs(value - alone.get(texts[b]!)![index]!)));
      assert.ok(apart > 20 * SAME_VECTOR, `texts ${a} and ${b} differ by ${apart}: far more than a batch moves a vector`);
    }
  });

  it("answers concurrent requests each with its own vectors, as alone", async () => {
    const requests = Array.from({ length: 16 }, (_, index) => [texts[index % texts.length]!, `${index} little cats`]);
    const answers = await Promise.all(requests.map((input) => server.client.embeddings.create({ model: "embed", input, encoding_format: "float" })));
    const singles = await Promise.all(requests.map(([, own]) => server.client.embeddings.create({ model: "embed", input: own!, encoding_format: "float" })));
    for (const [index, answer] of answers.entries()) {
      assertClose(answer.data[0]!.embedding, alone.get(requests[index]![0]!)!, `request ${index}, input 0`);
      assertClose(answer.data[1]!.embedding, singles[index]!.data[0]!.embedding, `request ${index}, input 1`);
    }
  });

  it("embeds token ids, one array or several, and refuses an id outside the vocabulary naming it", async () => {
    const single = await server.client.embeddings.create({ model: "embed", input: [1, 300, 301, 302], encoding_format: "float" });
    assert.equal(single.data.length, 1);
    const several = await server.client.embeddings.create({ model: "embed", input: [[1, 300, 301, 302], [1, 42, 7]], encoding_format: "float" });
    assert.equal(several.data.length, 2);
    assertClose(several.data[0]!.embedding, single.data[0]!.embedding, "the same ids, the same vector");
    assert.ok(several.usage.prompt_tokens >= 7);
    const refused = await postJson(`${server.baseURL}/embeddings`, { model: "embed", input: [[1, 2], [1, 999_999]] }, { authorization: `Bearer ${server.key}` });
    assert.equal(refused.status, 400);
    assert.match(String(refused.body.error.param), /^input/);
    assert.match(refused.body.error.message, /'input\[1\]'/);
  });

  it("cuts vectors to a declared Matryoshka length and normalises them again; refuses another length naming dimensions", async () => {
    const full = alone.get(texts[0]!)!;
    const short = await server.client.embeddings.create({ model: "embed", input: texts[0]!, dimensions: 32, encoding_format: "float" });
    const vector = short.data[0]!.embedding;
    assert.equal(vector.length, 32);
    const norm = Math.hypot(...full.slice(0, 32));
    assertClose(vector, full.slice(0, 32).map((value) => Math.fround(value / norm)), "the first 32, renormalised");
    const base64 = await server.client.embeddings.create({ model: "embed", input: texts[0]!, dimensions: 16 });
    assert.equal(base64.data[0]!.embedding.length, 16);
    for (const dimensions of [20, DIMENSIONS + 1]) {
      const error = await server.client.embeddings.create({ model: "embed", input: "x", dimensions }).then(() => assert.fail("answered"), (caught: unknown) => caught);
      assert.ok(error instanceof OpenAI.BadRequestError, String(error));
      assert.equal(error.param, "dimensions");
    }
  });

  it("refuses an input longer than the context naming it, and cuts it with truncate", async () => {
    const long = "the cat sat on the mat and ".repeat(80);
    const refused = await postJson(`${server.baseURL}/embeddings`, { model: "embed", input: ["short", long] }, { authorization: `Bearer ${server.key}` });
    assert.equal(refused.status, 400);
    assert.equal(refused.body.error.code, "context_length_exceeded");
    assert.match(String(refused.body.error.param), /^input/);
    assert.match(refused.body.error.message, /'input\[1\]' has at least \d+ tokens/);
    const cut = await server.client.embeddings.create({ model: "embed", input: ["short", long], truncate: true, encoding_format: "float" } as OpenAI.EmbeddingCreateParams);
    assert.equal(cut.data.length, 2);
    assert.ok(cut.usage.prompt_tokens <= CONTEXT + 10);
  });

  it("refuses chat on the embedding model and embeddings on the chat model, naming the model and what it serves", async () => {
    const chat = await server.client.chat.completions.create({ model: "embed", messages: [{ role: "user", content: "Hi" }] }).then(() => assert.fail("answered"), (caught: unknown) => caught);
    assert.ok(chat instanceof OpenAI.BadRequestError, String(chat));
    assert.equal(chat.code, "model_does_not_support_endpoint");
    assert.match(chat.message, /Model 'embed' does not serve chat: it serves embeddings \(\/v1\/embeddings\)/);
    const embeddings = await server.client.embeddings.create({ model: "story", input: "Hi" }).then(() => assert.fail("answered"), (caught: unknown) => caught);
    assert.ok(embeddings instanceof OpenAI.BadRequestError, String(embeddings));
    assert.equal(embeddings.code, "model_does_not_support_endpoint");
    assert.match(embeddings.message, /Model 'story' does not serve embeddings: it serves chat/);
  });

  it("serves LangChain's OpenAIEmbeddings: embedQuery and embedDocuments give the SDK's vectors", async () => {
    const embeddings = new OpenAIEmbeddings({ model: "embed", apiKey: server.key, configuration: { baseURL: server.baseURL }, maxRetries: 0, batchSize: 2 });
    const query = await embeddings.embedQuery(texts[0]!);
    assertClose(query, alone.get(texts[0]!)!, "embedQuery");
    const documents = await embeddings.embedDocuments(texts);
    assert.equal(documents.length, texts.length);
    for (const [index, text] of texts.entries()) assertClose(documents[index]!, alone.get(text)!, `document ${index}`);
  });

  it("serves the Vercel AI SDK's embed and embedMany", async () => {
    const provider = createOpenAI({ baseURL: server.baseURL, apiKey: server.key });
    const model = provider.embedding("embed");
    const one = await embed({ model, value: texts[1]!, maxRetries: 0 });
    assertClose(one.embedding, alone.get(texts[1]!)!, "embed");
    assert.ok((one.usage?.tokens ?? 0) > 0);
    const many = await embedMany({ model, values: texts, maxRetries: 0 });
    assert.equal(many.embeddings.length, texts.length);
    for (const [index, text] of texts.entries()) assertClose(many.embeddings[index]!, alone.get(text)!, `embedMany ${index}`);
    assert.ok(cosineSimilarity(many.embeddings[0]!, many.embeddings[0]!) > 0.99999);
  });

  it("logs each request once, with its inputs and tokens", () => {
    const lines = server.logs().filter((line) => line.msg === "embeddings" && line.status === 200);
    assert.ok(lines.length >= 5);
    assert.ok(lines.every((line) => typeof line.prompt_tokens === "number" && (line.prompt_tokens as number) > 0 && line.model === "embed"));
  });
});

for (const backend of backends) {
  describe(`embeddings on the embedded engine are billed at the entry's embeddings price (${backend})`, { timeout: 120_000 }, () => {
    let server: TestServer;
    let database: Kysely<Database>;
    let dropSchema: (() => Promise<void>) | undefined;

    before(async () => {
      let databaseUrl = "";
      if (backend === "postgres") ({ url: databaseUrl, drop: dropSchema } = await freshPostgresSchema());
      server = await startTestServer({ configFile: writeConfig(), flags: { database_url: databaseUrl, context_size: String(CONTEXT) } });
      database = await openStore({ dataDir: server.dataDir, databaseUrl });
    });
    after(async () => {
      await database?.destroy();
      await server?.close();
      await dropSchema?.();
    });

    it("charges the tokens embedded × the embeddings price, recorded with no completion", async () => {
      const { accountId, key } = await meteredKey(database, "funded");
      const client = new OpenAI({ baseURL: server.baseURL, apiKey: key, maxRetries: 0 });
      const answer = await client.embeddings.create({ model: "embed", input: texts });
      const { records, balance } = await billedExactly(database, accountId, CREDIT, { prompt: EMBEDDINGS_PRICE, cached_prompt: EMBEDDINGS_PRICE, completion: 0 }, 1);
      assert.equal(records[0]!.prompt_tokens, answer.usage.prompt_tokens);
      assert.equal(records[0]!.completion_tokens, 0);
      assert.equal(CREDIT - balance, Math.ceil((answer.usage.prompt_tokens * EMBEDDINGS_PRICE) / 1_000_000));
    });

    it("bills a client that leaves mid-batch for the inputs embedded before it left, exactly", async () => {
      const { accountId, key } = await meteredKey(database, "funded");
      /** Tokens the embedding model has decoded since start (`/metrics`). */
      const decoded = async () => {
        const text = await (await fetch(`${server.url}/metrics`)).text();
        const line = text.split("\n").find((each) => each.startsWith('turnpike_engine_batch_tokens_total{model="embed"}'));
        return line === undefined ? 0 : Number(line.split(" ").at(-1));
      };
      const before = await decoded();
      // Long enough to be cut while it runs: 1,500 inputs, one decode each.
      const many = Array.from({ length: 1500 }, (_, index) => `${texts[index % texts.length]} (${index})`);
      const controller = new AbortController();
      const sent = fetch(`${server.baseURL}/embeddings`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "embed", input: many }),
        signal: controller.signal,
      }).catch((error: unknown) => error);
      for (let attempt = 0; attempt < 600 && (await decoded()) === before; attempt++) await new Promise((resolve) => setTimeout(resolve, 10));
      controller.abort();
      await sent;
      const { records } = await billedExactly(database, accountId, CREDIT, { prompt: EMBEDDINGS_PRICE, cached_prompt: EMBEDDINGS_PRICE, completion: 0 }, 1);
      const record = records[0]!;
      assert.equal(record.status, 499);
      assert.equal(record.finish_reason, "cancelled");
      assert.ok(record.prompt_tokens > 0, "the inputs embedded before the client left are billed");
      // Every token the model decoded for it, and no more: nothing else ran meanwhile.
      assert.equal(record.prompt_tokens, (await decoded()) - before);
      assert.ok(record.prompt_tokens < many.length * 10, "the inputs never embedded are not billed");
    });

    it("refuses an account without credit before anything is held", async () => {
      const { accountId, key } = await meteredKey(database, null);
      const client = new OpenAI({ baseURL: server.baseURL, apiKey: key, maxRetries: 0 });
      const error = await client.embeddings.create({ model: "embed", input: "Hello" }).then(() => assert.fail("answered"), (caught: unknown) => caught);
      assert.ok(error instanceof OpenAI.RateLimitError, String(error));
      assert.equal(error.code, "insufficient_quota");
      const holds = await database.selectFrom("holds").select("id").where("account_id", "=", accountId).execute();
      assert.equal(holds.length, 0);
    });
  });
}
