/**
 * `POST /v1/embeddings` on upstream entries, end to end: an entry declares `serves: ["embeddings"]`
 * and Turnpike passes requests through to a member's `/v1/embeddings`. First a small HTTP server
 * playing OpenAI (unnormalised vectors, its own usage): the `openai` SDK gets them as unit vectors,
 * Matryoshka lengths are cut and normalised again, the upstream's usage is billed at the entry's
 * embeddings price. Then a real llama-server (`--embeddings`, mean pooling) serving
 * `embeddingModelPath()`: through Turnpike a batch gets llama-server's own answer, and each text the
 * vector the embedded engine gives for the same GGUF (cosine ≥ 0.9999, the same token counts). The second part is skipped outside CI when llama-server
 * is not built.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import type { Kysely } from "kysely";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { billedExactly, meteredKey } from "./helpers/metered.ts";
import { skipWithoutLlamaServer, startLlamaServer, type RunningLlamaServer } from "./helpers/llama-server.ts";
import { startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { embeddingModelPath } from "./helpers/test-models.ts";
import { cosine } from "./helpers/vectors.ts";

const CREDIT = 1_000_000;
const pricing = { prompt: 3_000_000, cached_prompt: 1_000_000, completion: 9_000_000, embeddings: 500_000 };


/** The fake OpenAI's vector of a text: 8 numbers from its characters, not normalised. */
function rawVector(text: string): number[] {
  return Array.from({ length: 8 }, (_, index) => (text.charCodeAt(index % text.length) % 17) + index + 1);
}

describe("embeddings through an OpenAI-compatible upstream", { timeout: 60_000 }, () => {
  let fake: Server;
  let server: TestServer;
  let database: Kysely<Database>;
  const bodies: Array<Record<string, unknown>> = [];

  before(async () => {
    fake = createServer((request, response) => {
      let text = "";
      request.on("data", (piece: Buffer) => (text += piece.toString("utf8")));
      request.on("end", () => {
        response.setHeader("content-type", "application/json");
        if (request.method === "GET" && request.url === "/v1/models") return response.end(JSON.stringify({ object: "list", data: [{ id: "text-embedding-3-small", object: "model" }] }));
        if (request.method !== "POST" || request.url !== "/v1/embeddings") {
          response.statusCode = 404;
          return response.end(JSON.stringify({ error: { message: "not here" } }));
        }
        const body = JSON.parse(text) as { input: string[] };
        bodies.push(body);
        const data = body.input.map((input, index) => ({ object: "embedding", index, embedding: rawVector(input) }));
        const tokens = body.input.reduce((sum, input) => sum + input.split(" ").length, 0);
        response.end(JSON.stringify({ object: "list", data, model: "text-embedding-3-small", usage: { prompt_tokens: tokens, total_tokens: tokens } }));
      });
    });
    await new Promise<void>((resolve) => fake.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(fake.address() as AddressInfo).port}/v1`;
    const configFile = path.join(temporaryDirectory(), "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [
          {
            id: "remote-embed",
            upstream: { kind: "openai", urls: [url], model: "text-embedding-3-small" },
            context_length: 8191,
            serves: ["embeddings"],
            embeddings: { dimensions: 8, matryoshka: true },
            pricing,
          },
        ],
        plans: [{ id: "funded", name: "Funded", price: { amount: 100, currency: "usd" }, credit: CREDIT }],
      }),
    );
    server = await startTestServer({ configFile });
    database = await openStore({ dataDir: server.dataDir, databaseUrl: "" });
  });
  after(async () => {
    await database?.destroy();
    await server?.close();
    fake?.close();
  });

  it("lists the entry with /v1/embeddings only", async () => {
    const models = await server.client.models.list();
    const model = models.data.find((candidate) => candidate.id === "remote-embed") as unknown as { endpoints: string[]; embeddings: unknown; pricing: { embeddings: number } };
    assert.deepEqual(model.endpoints, ["/v1/embeddings"]);
    assert.deepEqual(model.embeddings, { dimensions: 8, matryoshka: true }, "the entry's length, before any answer");
    assert.equal(model.pricing.embeddings, pricing.embeddings);
  });

  it("passes the inputs through and answers the upstream's vectors as unit vectors, in order, with its usage", async () => {
    const texts = ["a red fox", "the quick brown dog jumps"];
    const answer = await server.client.embeddings.create({ model: "remote-embed", input: texts, user: "someone" });
    assert.deepEqual(bodies.at(-1), { model: "text-embedding-3-small", input: texts, encoding_format: "float", user: "someone" });
    for (const [index, text] of texts.entries()) {
      const raw = rawVector(text);
      const norm = Math.hypot(...raw);
      const expected = raw.map((value) => Math.fround(value / norm));
      assert.deepEqual(answer.data[index]!.embedding.map((value) => Math.fround(value)), expected);
    }
    assert.equal(answer.usage.prompt_tokens, 3 + 5);
  });

  it("cuts vectors to a shorter length on a Matryoshka entry and normalises them again", async () => {
    const answer = await server.client.embeddings.create({ model: "remote-embed", input: "a red fox", dimensions: 3, encoding_format: "float" });
    const raw = rawVector("a red fox").slice(0, 3);
    const norm = Math.hypot(...raw);
    const vector = answer.data[0]!.embedding;
    assert.equal(vector.length, 3);
    vector.forEach((value, index) => assert.ok(Math.abs(value - raw[index]! / norm) < 1e-6));
    const refused = await server.client.embeddings.create({ model: "remote-embed", input: "x", dimensions: 9 }).then(() => assert.fail("answered"), (caught: unknown) => caught);
    assert.ok(refused instanceof OpenAI.BadRequestError);
    assert.equal(refused.param, "dimensions");
  });

  it("bills the upstream's usage at the entry's embeddings price", async () => {
    const { accountId, key } = await meteredKey(database, "funded");
    const client = new OpenAI({ baseURL: server.baseURL, apiKey: key, maxRetries: 0 });
    const answer = await client.embeddings.create({ model: "remote-embed", input: ["one two three four"] });
    const { records, balance } = await billedExactly(database, accountId, CREDIT, { prompt: pricing.embeddings, cached_prompt: pricing.embeddings, completion: 0 }, 1);
    assert.equal(records[0]!.prompt_tokens, answer.usage.prompt_tokens);
    assert.equal(CREDIT - balance, Math.ceil((4 * pricing.embeddings) / 1_000_000));
  });
});

describe("embeddings through a llama-server member match the embedded engine's", { skip: skipWithoutLlamaServer(), timeout: 120_000 }, () => {
  let llama: RunningLlamaServer;
  let server: TestServer;
  const texts = ["Once upon a time there was a little cat.", "The dog ran away.", "Lily and Ben went to the park. They saw a big red ball."];

  before(async () => {
    llama = await startLlamaServer({ model: embeddingModelPath(), parallel: 2, contextSize: 1024, extraArgs: ["--embeddings", "--pooling", "mean"] });
    const configFile = path.join(temporaryDirectory(), "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [
          { id: "embed", path: embeddingModelPath() },
          { id: "embed-upstream", upstream: { kind: "llama-server", urls: [llama.url] }, serves: ["embeddings"] },
        ],
      }),
    );
    server = await startTestServer({ configFile, flags: { context_size: "512" } });
  });
  after(async () => {
    await server?.close();
    await llama?.close();
  });

  it("passes a batch through: the member's own vectors and usage, as llama-server answers them directly", async () => {
    const direct = new OpenAI({ baseURL: `${llama.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const theirs = await direct.embeddings.create({ model: "any", input: texts, encoding_format: "float" });
    const ours = await server.client.embeddings.create({ model: "embed-upstream", input: texts });
    assert.equal(ours.usage.prompt_tokens, theirs.usage.prompt_tokens);
    for (const [index, item] of theirs.data.entries()) {
      const similarity = cosine(ours.data[index]!.embedding, item.embedding);
      assert.ok(similarity >= 0.99999, `input ${index}: cosine ${similarity}`);
    }
  });

  it("gives each text the embedded engine's unit vector and token count", async () => {
    // One text a request: llama-server's vectors for a text in a batch differ from its own for the
    // text alone on this model (the first of three: cosine 0.83), so batches are not compared.
    for (const text of texts) {
      const embedded = await server.client.embeddings.create({ model: "embed", input: text });
      const upstream = await server.client.embeddings.create({ model: "embed-upstream", input: text });
      assert.equal(upstream.usage.prompt_tokens, embedded.usage.prompt_tokens, "the same tokenization");
      const similarity = cosine(upstream.data[0]!.embedding, embedded.data[0]!.embedding);
      assert.ok(similarity >= 0.9999, `${JSON.stringify(text)}: cosine ${similarity}`);
      assert.ok(Math.abs(Math.hypot(...upstream.data[0]!.embedding) - 1) < 1e-5);
    }
  });

  it("embeds token ids through the member", async () => {
    const upstream = await server.client.embeddings.create({ model: "embed-upstream", input: [[1, 300, 301, 302]], encoding_format: "float" });
    const embedded = await server.client.embeddings.create({ model: "embed", input: [[1, 300, 301, 302]], encoding_format: "float" });
    assert.ok(cosine(upstream.data[0]!.embedding, embedded.data[0]!.embedding) >= 0.9999);
  });
});
