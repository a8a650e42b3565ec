/**
 * `POST /v1/completions` end to end with the official `openai` SDK on a real server over real
 * tiny models: stories260K for plain completions, its fill-in-the-middle variant
 * (`fimModelPath()`) for `suffix`, its mean-pooled variant as an embedding model that serves no
 * completions. JSON and streamed answers, `echo`, the legacy log probabilities, `n` and several
 * prompts in index order, `stop`, `max_tokens` (16 by default), greedy determinism (the shared
 * models' README quotes stories260K's greedy continuation of "Once upon a time"), the refusals
 * that name their field, and billing exactly as chat: each prompt's tokens once, every choice's
 * completion tokens.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { Kysely } from "kysely";
import { getLlama, type LlamaModel } from "node-llama-cpp";
import OpenAI from "openai";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { billedExactly, meteredKey } from "./helpers/metered.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { embeddingModelPath, fimModelPath } from "./helpers/test-models.ts";

/** stories260K's greedy continuation of "Once upon a time", 64 tokens (../shared/models/README.md). */
const ONCE_UPON_A_TIME =
  ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.\nLily's mom said";

const pricing = { prompt: 1_000_000, cached_prompt: 1_000_000, completion: 2_000_000 };
const CREDIT = 10_000_000;

let server: TestServer;
let database: Kysely<Database>;
let stories: LlamaModel;

before(async () => {
  const directory = temporaryDirectory();
  const configFile = path.join(directory, "turnpike.json");
  fs.writeFileSync(
    configFile,
    JSON.stringify({
      models: [
        { id: "story", path: storiesModel, pricing },
        { id: "story-fim", path: fimModelPath() },
        { id: "story-embedding", path: embeddingModelPath(), serves: ["embeddings"] },
      ],
      plans: [{ id: "funded", name: "Funded", price: { amount: 100, currency: "usd" }, credit: CREDIT }],
    }),
  );
  server = await startTestServer({ configFile, flags: { context_size: "512" } });
  database = await openStore({ dataDir: server.dataDir, databaseUrl: "" });
  const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, maxThreads: 1 });
  stories = await llama.loadModel({ modelPath: storiesModel });
});

after(async () => {
  await stories?.dispose();
  await database?.destroy();
  await server?.close();
});

/** The 400 a request gets, as the SDK throws it. */
async function refusal(request: Promise<unknown>): Promise<InstanceType<typeof OpenAI.BadRequestError>> {
  const error = await request.then(
    () => assert.fail("answered"),
    (caught: unknown) => caught,
  );
  assert.ok(error instanceof OpenAI.BadRequestError, String(error));
  return error;
}

/** A streamed completion's chunks, read to the end. */
async function chunksOf(stream: AsyncIterable<OpenAI.Completions.Completion>): Promise<OpenAI.Completions.Completion[]> {
  const chunks: OpenAI.Completions.Completion[] = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

describe("POST /v1/completions", { timeout: 120_000 }, () => {
  it("continues a raw prompt, with no chat template, as the model's greedy continuation", async () => {
    const completion = await server.client.completions.create({ model: "story", prompt: "Once upon a time", max_tokens: 64, temperature: 0 });
    assert.equal(completion.object, "text_completion");
    assert.match(completion.id, /^cmpl-/);
    assert.equal(completion.model, "story");
    assert.equal(completion.choices.length, 1);
    assert.equal(completion.choices[0]!.text, ONCE_UPON_A_TIME);
    assert.equal(completion.choices[0]!.index, 0);
    assert.equal(completion.choices[0]!.finish_reason, "length");
    assert.equal(completion.choices[0]!.logprobs, null);
    // The prompt as llama-server tokenizes it: BOS, then the text.
    const expectedPrompt = 1 + stories.tokenize("Once upon a time", true).length;
    assert.deepEqual([completion.usage!.prompt_tokens, completion.usage!.completion_tokens, completion.usage!.total_tokens], [expectedPrompt, 64, expectedPrompt + 64]);
    const again = await server.client.completions.create({ model: "story", prompt: "Once upon a time", max_tokens: 64, temperature: 0 });
    assert.equal(again.choices[0]!.text, completion.choices[0]!.text, "greedy is deterministic");
  });

  it("stops at 16 tokens without max_tokens, as OpenAI's default", async () => {
    const completion = await server.client.completions.create({ model: "story", prompt: "Once upon a time", temperature: 0 });
    assert.equal(completion.usage!.completion_tokens, 16);
    assert.equal(completion.choices[0]!.finish_reason, "length");
    assert.ok(ONCE_UPON_A_TIME.startsWith(completion.choices[0]!.text));
  });

  it("streams the same text in text_completion chunks, a finish chunk, and the usage last when asked", async () => {
    const whole = await server.client.completions.create({ model: "story", prompt: "Once upon a time", max_tokens: 24, temperature: 0 });
    const chunks = await chunksOf(await server.client.completions.create({ model: "story", prompt: "Once upon a time", max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true } }));
    assert.ok(chunks.every((chunk) => chunk.object === "text_completion" && chunk.id === chunks[0]!.id));
    const last = chunks.at(-1)!;
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage!.completion_tokens, 24);
    assert.equal(last.usage!.prompt_tokens, whole.usage!.prompt_tokens);
    const body = chunks.slice(0, -1);
    assert.ok(body.every((chunk) => chunk.usage === null), "usage is null on every chunk but the last");
    assert.equal(body.map((chunk) => chunk.choices[0]!.text).join(""), whole.choices[0]!.text);
    const finishes = body.filter((chunk) => chunk.choices[0]!.finish_reason !== null);
    assert.deepEqual(finishes.map((chunk) => chunk.choices[0]!.finish_reason), ["length"]);
    assert.equal(finishes[0], body.at(-1), "the finish chunk ends the choice");
    const plain = await chunksOf(await server.client.completions.create({ model: "story", prompt: "Once upon a time", max_tokens: 4, temperature: 0, stream: true }));
    assert.ok(plain.every((chunk) => chunk.usage === undefined && chunk.choices.length === 1), "no usage chunk unless asked");
  });

  it("echoes the prompt before the completion: a text prompt as sent, a token prompt detokenized", async () => {
    const echoed = await server.client.completions.create({ model: "story", prompt: "Once upon a time", max_tokens: 8, temperature: 0, echo: true });
    assert.equal(echoed.choices[0]!.text, "Once upon a time" + ONCE_UPON_A_TIME.slice(0, echoed.choices[0]!.text.length - "Once upon a time".length));
    assert.equal(echoed.usage!.completion_tokens, 8, "the echo is no completion token");
    const tokens = [stories.tokens.bos!, ...stories.tokenize("Once upon a time", true)];
    const byTokens = await server.client.completions.create({ model: "story", prompt: tokens, max_tokens: 8, temperature: 0, echo: true });
    assert.equal(byTokens.choices[0]!.text, echoed.choices[0]!.text, "the same tokens, the same text");
    const streamed = await chunksOf(await server.client.completions.create({ model: "story", prompt: "Once upon a time", max_tokens: 8, temperature: 0, echo: true, stream: true }));
    assert.equal(streamed[0]!.choices[0]!.text, "Once upon a time", "the echo is the first chunk");
    assert.equal(streamed.map((chunk) => chunk.choices[0]?.text ?? "").join(""), echoed.choices[0]!.text);
  });

  it("scores an echoed prompt: its tokens' log probabilities, the first null, with max_tokens 0 the prompt alone", async () => {
    const scored = await server.client.completions.create({ model: "story", prompt: "Once upon a time", max_tokens: 0, echo: true, logprobs: 2 });
    const choice = scored.choices[0]!;
    assert.equal(choice.text, "Once upon a time");
    assert.equal(scored.usage!.completion_tokens, 0);
    assert.equal(scored.usage!.prompt_tokens_details?.cached_tokens, 0, "the prompt was evaluated anew, none of it from the cache");
    const logprobs = choice.logprobs!;
    // BOS, then the prompt's own tokens.
    assert.equal(logprobs.tokens!.length, 1 + stories.tokenize("Once upon a time", true).length);
    assert.equal(logprobs.tokens!.join(""), choice.text);
    assert.equal(logprobs.token_logprobs![0], null);
    assert.equal(logprobs.top_logprobs![0], null);
    assert.ok(logprobs.token_logprobs!.slice(1).every((logprob) => logprob !== null && logprob < 0));
    assert.ok(logprobs.top_logprobs!.slice(1).every((top) => top !== null && Object.keys(top).length >= 2 && Object.keys(top).length <= 3));
    // The last prompt token's log probability is what the engine gives the same token generated after the rest.
    const before = await server.client.completions.create({ model: "story", prompt: "Once upon a", max_tokens: 1, temperature: 0, logprobs: 2 });
    assert.equal(before.choices[0]!.text, " time");
    assert.ok(Math.abs(logprobs.token_logprobs!.at(-1)! - before.choices[0]!.logprobs!.token_logprobs![0]!) < 1e-4);
    // With a completion after it, streamed too: the echo's tokens first, then the generated ones.
    const both = await server.client.completions.create({ model: "story", prompt: "Once upon a time", max_tokens: 4, temperature: 0, echo: true, logprobs: 1 });
    assert.equal(both.choices[0]!.logprobs!.tokens!.length, logprobs.tokens!.length + 4);
    assert.equal(both.choices[0]!.logprobs!.tokens!.join(""), both.choices[0]!.text);
    assert.equal(both.choices[0]!.logprobs!.text_offset!.at(-4), "Once upon a time".length, "the completion's first token starts after the echo");
    const streamed = await chunksOf(await server.client.completions.create({ model: "story", prompt: "Once upon a time", max_tokens: 4, temperature: 0, echo: true, logprobs: 1, stream: true }));
    assert.deepEqual(streamed.flatMap((chunk) => chunk.choices[0]?.logprobs?.token_logprobs ?? []), both.choices[0]!.logprobs!.token_logprobs);
  });

  it("answers a token prompt as the same text prompt", async () => {
    const tokens = [stories.tokens.bos!, ...stories.tokenize("Once upon a time", true)];
    const completion = await server.client.completions.create({ model: "story", prompt: tokens, max_tokens: 32, temperature: 0 });
    assert.equal(completion.choices[0]!.text, ONCE_UPON_A_TIME.slice(0, completion.choices[0]!.text.length));
    assert.equal(completion.usage!.prompt_tokens, tokens.length);
  });

  it("gives the legacy log probabilities: tokens, their logprobs, the top alternatives with the sampled token, text offsets", async () => {
    const completion = await server.client.completions.create({ model: "story", prompt: "Once upon a time", max_tokens: 12, temperature: 0, logprobs: 3 });
    const choice = completion.choices[0]!;
    const logprobs = choice.logprobs!;
    assert.equal(logprobs.tokens!.length, 12);
    assert.equal(logprobs.tokens!.join(""), choice.text, "the tokens spell the text");
    assert.equal(logprobs.token_logprobs!.length, 12);
    assert.ok(logprobs.token_logprobs!.every((logprob) => logprob <= 0));
    let offset = 0;
    logprobs.tokens!.forEach((token, index) => {
      assert.equal(logprobs.text_offset![index], offset, "each token starts where the one before ended");
      offset += token.length;
      const top = logprobs.top_logprobs![index]!;
      assert.ok(Object.keys(top).length >= 1 && Object.keys(top).length <= 4, "up to logprobs + 1 entries");
      assert.equal(top[token], logprobs.token_logprobs![index], "the sampled token is among them");
      // Greedy: the sampled token is the likeliest.
      assert.equal(Math.max(...Object.values(top)), logprobs.token_logprobs![index]);
    });
    const streamed = await chunksOf(await server.client.completions.create({ model: "story", prompt: "Once upon a time", max_tokens: 12, temperature: 0, logprobs: 3, stream: true }));
    const tokens = streamed.flatMap((chunk) => chunk.choices[0]?.logprobs?.tokens ?? []);
    const offsets = streamed.flatMap((chunk) => chunk.choices[0]?.logprobs?.text_offset ?? []);
    assert.deepEqual(tokens, logprobs.tokens);
    assert.deepEqual(offsets, logprobs.text_offset);
  });

  it("answers n choices for each of several prompts, each prompt's choices together in index order", async () => {
    const prompts = ["Once upon a time", "The little dog"];
    const alone = await Promise.all(prompts.map((prompt) => server.client.completions.create({ model: "story", prompt, max_tokens: 10, temperature: 0 })));
    for (const stream of [false, true]) {
      const request = { model: "story", prompt: prompts, n: 2, max_tokens: 10, temperature: 0 };
      let texts: string[];
      let usage: OpenAI.CompletionUsage;
      if (stream) {
        const chunks = await chunksOf(await server.client.completions.create({ ...request, stream: true, stream_options: { include_usage: true } }));
        texts = ["", "", "", ""];
        for (const chunk of chunks) for (const choice of chunk.choices) texts[choice.index] += choice.text;
        usage = chunks.at(-1)!.usage!;
      } else {
        const completion = await server.client.completions.create(request);
        assert.deepEqual(completion.choices.map((choice) => choice.index), [0, 1, 2, 3]);
        texts = completion.choices.map((choice) => choice.text);
        usage = completion.usage!;
      }
      assert.deepEqual(texts, [alone[0]!.choices[0]!.text, alone[0]!.choices[0]!.text, alone[1]!.choices[0]!.text, alone[1]!.choices[0]!.text], `stream: ${stream}`);
      assert.equal(usage.prompt_tokens, alone[0]!.usage!.prompt_tokens + alone[1]!.usage!.prompt_tokens, "each prompt counted once, whatever n");
      assert.equal(usage.completion_tokens, 40);
    }
  });

  it("keeps the leading space of the first generated token, in the text and in its log probability", async () => {
    const completion = await server.client.completions.create({ model: "story", prompt: "The little dog ran to the park. He saw", max_tokens: 4, temperature: 0, logprobs: 0 });
    const choice = completion.choices[0]!;
    assert.match(choice.text, /^ \w/, JSON.stringify(choice.text));
    assert.equal(choice.logprobs!.tokens!.join(""), choice.text);
    assert.equal(Object.keys(choice.logprobs!.top_logprobs![0]!).length, 1, "logprobs 0: the sampled token alone");
  });

  it("samples a seeded prompt alike alone and among other prompts, choice by choice", async () => {
    const request = { model: "story", max_tokens: 12, temperature: 1, seed: 42, n: 2 };
    const alone = await server.client.completions.create({ ...request, prompt: "The little dog" });
    const among = await server.client.completions.create({ ...request, prompt: ["Once upon a time", "The little dog"] });
    assert.deepEqual(among.choices.slice(2).map((choice) => choice.text), alone.choices.map((choice) => choice.text));
    assert.notEqual(alone.choices[0]!.text, alone.choices[1]!.text, "the n choices of one prompt differ");
  });

  it("ends at a stop sequence, without it", async () => {
    const completion = await server.client.completions.create({ model: "story", prompt: "Once upon a time", max_tokens: 32, temperature: 0, stop: [" girl"] });
    assert.equal(completion.choices[0]!.text, ", there was a little");
    assert.equal(completion.choices[0]!.finish_reason, "stop");
  });

  it("fills in the middle with the model's FIM tokens, JSON and streamed alike", async () => {
    const request = { model: "story-fim", prompt: "Once upon a time", suffix: " and they lived happily ever after.", max_tokens: 16, temperature: 0 };
    const completion = await server.client.completions.create(request);
    const text = completion.choices[0]!.text;
    assert.ok(text.length > 0);
    assert.notEqual(text, ONCE_UPON_A_TIME.slice(0, text.length), "the suffix changes the answer: the prompt is laid out around FIM tokens");
    // BOS, FIM_PRE, the prefix, FIM_SUF, the suffix, FIM_MID.
    const fimTokens = 4 + stories.tokenize("Once upon a time", false).length + stories.tokenize(" and they lived happily ever after.", false).length;
    assert.equal(completion.usage!.prompt_tokens, fimTokens);
    const chunks = await chunksOf(await server.client.completions.create({ ...request, stream: true }));
    assert.equal(chunks.map((chunk) => chunk.choices[0]?.text ?? "").join(""), text);
    const models = (await server.client.models.list()).data as unknown as Array<{ id: string; supported_parameters: string[] }>;
    assert.ok(models.find((model) => model.id === "story-fim")!.supported_parameters.includes("suffix"), "/v1/models says it fills in the middle");
    assert.ok(!models.find((model) => model.id === "story")!.supported_parameters.includes("suffix"));
  });

  it("refuses a suffix on a model without FIM tokens, naming suffix", async () => {
    const error = await refusal(server.client.completions.create({ model: "story", prompt: "Once", suffix: " the end." }));
    assert.equal(error.param, "suffix");
    assert.equal(error.code, "unsupported_parameter");
    assert.match(error.message, /fill in the middle/);
  });

  it("refuses a model that serves no completions (an embedding model), naming what it serves", async () => {
    const error = await refusal(server.client.completions.create({ model: "story-embedding", prompt: "Once" }));
    assert.equal(error.code, "model_does_not_support_endpoint");
    assert.equal(error.param, "model");
    assert.match(error.message, /story-embedding/);
    assert.match(error.message, /embeddings/);
  });

  it("refuses what it cannot honour, naming the field", async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ best_of: 3, n: 2 }, "best_of"],
      [{ max_tokens: 0 }, "max_tokens"],
      [{ logprobs: 6 }, "logprobs"],
      [{ prompt: [1, 2, 99_999] }, "prompt"],
      [{ prompt: [] }, "prompt"],
      [{ prompt: ["Once", "x".repeat(5000)] }, "prompt[1]"],
      [{ stream_options: { include_usage: true } }, "stream_options"],
    ];
    for (const [fields, param] of cases) {
      const error = await refusal(server.client.completions.create({ model: "story", prompt: "Once upon a time", ...fields } as OpenAI.Completions.CompletionCreateParamsNonStreaming));
      assert.equal(error.param, param, JSON.stringify(fields));
    }
    const echoFim = await refusal(server.client.completions.create({ model: "story-fim", prompt: "Once", suffix: " the end.", echo: true }));
    assert.equal(echoFim.param, "echo", "a middle has no prompt to echo before it");
    const context = await refusal(server.client.completions.create({ model: "story", prompt: "Once upon a time", max_tokens: 600 }));
    assert.equal(context.code, "context_length_exceeded");
    assert.equal(context.param, "prompt");
    // A large body (validated in the body worker): 40,000 token ids, far past the 512-token context, refused before any work.
    const large = await refusal(server.client.completions.create({ model: "story", prompt: [1, ...Array.from({ length: 40_000 }, () => 300)] }));
    assert.equal(large.code, "context_length_exceeded");
    assert.equal(large.param, "prompt");
    const several = await refusal(server.client.completions.create({ model: "story", prompt: [[1, 300], Array.from({ length: 40_000 }, () => 300)] }));
    assert.equal(several.param, "prompt[1]", "each prompt is bounded on its own: the one too long is named");
  });

  it("is billed as chat is: every prompt's tokens once at the prompt price, every choice's completion tokens", async () => {
    const { accountId, key } = await meteredKey(database, "funded");
    const client = new OpenAI({ baseURL: server.baseURL, apiKey: key, maxRetries: 0 });
    const completion = await client.completions.create({ model: "story", prompt: ["Once upon a time", "The little dog"], n: 2, max_tokens: 8, temperature: 0 });
    const { records, balance } = await billedExactly(database, accountId, CREDIT, pricing, 1);
    assert.equal(records[0]!.prompt_tokens, completion.usage!.prompt_tokens);
    assert.equal(records[0]!.completion_tokens, 32);
    assert.equal(CREDIT - balance, completion.usage!.prompt_tokens * 1 + 32 * 2);
    const chunks = await chunksOf(await client.completions.create({ model: "story", prompt: "Once upon a time", max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true } }));
    const streamed = await billedExactly(database, accountId, CREDIT, pricing, 2);
    assert.equal(streamed.records[1]!.completion_tokens, chunks.at(-1)!.usage!.completion_tokens);
  });
});
