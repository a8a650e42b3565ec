/**
 * End-to-end: `n`, `logprobs`/`top_logprobs`, `logit_bias` and the presence/frequency penalties
 * through the official `openai` client against a real server running the real stories260K model
 * (and the random llama-2-tiny model, which never stops on its own). Each case is run streaming
 * and non-streaming; everything is greedy (temperature 0) or seeded, so results are deterministic.
 */
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { getLlama, type LlamaModel } from "node-llama-cpp";
import OpenAI from "openai";
import { modelsDir, startTestServer, storiesModel, type TestServer } from "./helpers/server.ts";

type Params = OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming;
type TokenLogprob = OpenAI.Chat.Completions.ChatCompletionTokenLogprob;

const randomModel = path.join(modelsDir, "llama-2-tiny-random.gguf");

let test: TestServer;
let stories: LlamaModel;

before(async () => {
  test = await startTestServer({ flags: { models: [storiesModel, `random=${randomModel}`] } });
  const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, maxThreads: 1 });
  stories = await llama.loadModel({ modelPath: storiesModel });
});
after(async () => {
  await stories?.dispose();
  await test?.close();
});

type Choice = { index: number; content: string; finishReason: string | null; logprobs: TokenLogprob[] | null };
type Result = { choices: Choice[]; usage: OpenAI.CompletionUsage; chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] };

/** Runs a request streaming or not and returns its choices (sorted by index) the same way. */
async function run(client: OpenAI, params: Params, stream: boolean): Promise<Result> {
  if (!stream) {
    const completion = await client.chat.completions.create(params);
    return {
      choices: completion.choices.map((choice) => ({
        index: choice.index,
        content: choice.message.content ?? "",
        finishReason: choice.finish_reason,
        logprobs: choice.logprobs?.content ?? null,
      })),
      usage: completion.usage!,
      chunks: [],
    };
  }
  const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
  const streamed = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  for await (const chunk of streamed) chunks.push(chunk);
  const usageChunk = chunks.at(-1)!;
  assert.deepEqual(usageChunk.choices, [], "the last chunk carries only usage");
  const byIndex = new Map<number, Choice>();
  const finishes = new Map<number, number>();
  for (const chunk of chunks.slice(0, -1)) {
    assert.equal(chunk.choices.length, 1, "each chunk carries one choice");
    const delta = chunk.choices[0]!;
    const choice = byIndex.get(delta.index) ?? { index: delta.index, content: "", finishReason: null, logprobs: null };
    byIndex.set(delta.index, choice);
    assert.equal(choice.finishReason, null, `choice ${delta.index} has nothing after its finish chunk`);
    choice.content += delta.delta.content ?? "";
    if (delta.logprobs?.content != null) choice.logprobs = [...(choice.logprobs ?? []), ...delta.logprobs.content];
    if (delta.finish_reason !== null) {
      choice.finishReason = delta.finish_reason;
      finishes.set(delta.index, (finishes.get(delta.index) ?? 0) + 1);
    }
  }
  for (const [index, count] of finishes) assert.equal(count, 1, `choice ${index} has exactly one finish chunk`);
  return { choices: [...byIndex.values()].sort((a, b) => a.index - b.index), usage: usageChunk.usage!, chunks };
}

const story: Params = {
  model: path.basename(storiesModel, ".gguf"),
  messages: [{ role: "user", content: "Tell me a story about a cat." }],
  max_tokens: 24,
  temperature: 0,
};

for (const stream of [false, true]) {
  const mode = stream ? "streaming" : "non-streaming";

  describe(`n (${mode})`, () => {
    it("returns n indexed choices; greedy choices are equal and billed once per choice, the prompt once", async () => {
      const one = await run(test.client, story, stream);
      const three = await run(test.client, { ...story, n: 3 }, stream);
      assert.deepEqual(
        three.choices.map((choice) => choice.index),
        [0, 1, 2],
      );
      for (const choice of three.choices) {
        assert.equal(choice.content, one.choices[0]!.content);
        assert.equal(choice.finishReason, one.choices[0]!.finishReason);
        assert.equal(choice.logprobs, null);
      }
      assert.equal(three.usage.prompt_tokens, one.usage.prompt_tokens);
      assert.equal(three.usage.completion_tokens, 3 * one.usage.completion_tokens);
      assert.equal(three.usage.total_tokens, three.usage.prompt_tokens + three.usage.completion_tokens);
    });

    it("derives a distinct seed per choice: seeded choices differ from one another", async () => {
      const seeded = await run(test.client, { ...story, temperature: 1, seed: 1234, max_tokens: 32, n: 4 }, stream);
      assert.equal(seeded.choices.length, 4);
      assert.ok(new Set(seeded.choices.map((choice) => choice.content)).size > 1, "seeded choices differ from one another");
    });

    it("honours stop sequences and max_tokens in every choice", async () => {
      const full = await run(test.client, story, stream);
      const words = full.choices[0]!.content.split(" ");
      const stop = ` ${words[3]}`;
      const stopped = await run(test.client, { ...story, n: 2, stop }, stream);
      for (const choice of stopped.choices) {
        assert.equal(choice.finishReason, "stop");
        assert.equal(choice.content, full.choices[0]!.content.slice(0, full.choices[0]!.content.indexOf(stop)));
      }
      const limited = await run(test.client, { ...story, model: "random", n: 3, max_tokens: 7 }, stream);
      for (const choice of limited.choices) assert.equal(choice.finishReason, "length");
      assert.equal(limited.usage.completion_tokens, 21);
    });
  });

  describe(`logprobs (${mode})`, () => {
    it("reports each token with its log probability, bytes and the top alternatives", async () => {
      const result = await run(test.client, { ...story, logprobs: true, top_logprobs: 3 }, stream);
      const choice = result.choices[0]!;
      const tokens = choice.logprobs!;
      assert.ok(tokens.length > 0);
      assert.equal(tokens.map((token) => token.token).join(""), choice.content, "the tokens spell the content");
      assert.equal(tokens.length, result.usage.completion_tokens - (choice.finishReason === "stop" ? 1 : 0));
      for (const token of tokens) {
        assert.ok(token.logprob <= 0 && Number.isFinite(token.logprob));
        assert.deepEqual(token.bytes, [...Buffer.from(token.token, "utf8")]);
        assert.equal(token.top_logprobs.length, 3);
        // Greedy: the chosen token is the likeliest one.
        assert.equal(token.top_logprobs[0]!.token, token.token);
        assert.equal(token.top_logprobs[0]!.logprob, token.logprob);
        const logprobs = token.top_logprobs.map((alternative) => alternative.logprob);
        assert.deepEqual([...logprobs].sort((a, b) => b - a), logprobs, "alternatives from likeliest");
        for (const alternative of token.top_logprobs) assert.deepEqual(alternative.bytes, [...Buffer.from(alternative.token, "utf8")]);
      }
      const probabilityMass = tokens[0]!.top_logprobs.reduce((sum, alternative) => sum + Math.exp(alternative.logprob), 0);
      assert.ok(probabilityMass > 0 && probabilityMass <= 1 + 1e-6);
    });

    it("reports no alternatives when top_logprobs is not given, and the same tokens streamed or not", async () => {
      const plain = await run(test.client, { ...story, logprobs: true }, stream);
      const other = await run(test.client, { ...story, logprobs: true, top_logprobs: 2 }, !stream);
      const tokens = plain.choices[0]!.logprobs!;
      for (const token of tokens) assert.deepEqual(token.top_logprobs, []);
      assert.deepEqual(
        tokens.map((token) => [token.token, token.logprob.toFixed(5)]),
        other.choices[0]!.logprobs!.map((token) => [token.token, token.logprob.toFixed(5)]),
      );
    });

    it("reports logprobs for every choice and only up to a stop sequence", async () => {
      const full = await run(test.client, story, stream);
      const stop = ` ${full.choices[0]!.content.split(" ")[4]}`;
      const result = await run(test.client, { ...story, n: 2, stop, logprobs: true, top_logprobs: 1 }, stream);
      for (const choice of result.choices) {
        const text = choice.logprobs!.map((token) => token.token).join("");
        assert.ok(text.startsWith(choice.content), "the tokens cover the content");
        assert.ok(!text.includes(stop), "the stop sequence is not reported");
      }
    });

    it("reports the UTF-8 bytes of multi-byte tokens (a model with a 32,000-token vocabulary)", async () => {
      const result = await run(test.client, { ...story, model: "random", max_tokens: 40, logprobs: true, top_logprobs: 2 }, stream);
      const choice = result.choices[0]!;
      const tokens = choice.logprobs!;
      assert.equal(tokens.length, 40);
      const bytes = Buffer.from(tokens.flatMap((token) => token.bytes!));
      assert.ok(bytes.length > choice.content.length, "the content has characters of more than one byte");
      assert.equal(bytes.toString("utf8"), choice.content, "the tokens' bytes are the content's UTF-8");
    });
  });

  describe(`logit_bias (${mode})`, () => {
    it("bans a token with -100: the token greedy decoding picks first no longer appears", async () => {
      const greedy = await run(test.client, { ...story, logprobs: true }, stream);
      const firstToken = greedy.choices[0]!.logprobs![0]!.token;
      const [tokenId] = stories.tokenize(firstToken, false, "trimLeadingSpace");
      assert.ok(tokenId !== undefined);
      assert.equal(stories.detokenize([tokenId]).trim(), firstToken.trim());
      const banned = await run(test.client, { ...story, logprobs: true, logit_bias: { [String(tokenId)]: -100 } }, stream);
      const tokens = banned.choices[0]!.logprobs!.map((token) => token.token);
      assert.notEqual(tokens[0], firstToken);
      assert.ok(!tokens.includes(firstToken), `'${firstToken}' no longer appears: ${JSON.stringify(tokens)}`);
      assert.notEqual(banned.choices[0]!.content, greedy.choices[0]!.content);
    });

    it("forces a token with +100", async () => {
      const [tokenId] = stories.tokenize("cat", false, "trimLeadingSpace");
      const forced = await run(test.client, { ...story, max_tokens: 5, logprobs: true, logit_bias: { [String(tokenId)]: 100 } }, stream);
      const tokens = forced.choices[0]!.logprobs!.map((token) => token.token);
      assert.equal(tokens.length, 5);
      for (const token of tokens) assert.equal(token, stories.detokenize([tokenId!], false, [tokenId!]));
    });
  });

  describe(`presence and frequency penalties (${mode})`, () => {
    /** Tokens that repeat an earlier token of the same completion. */
    const repeats = (tokens: readonly TokenLogprob[]) => tokens.length - new Set(tokens.map((token) => token.token)).size;
    const long: Params = { ...story, max_tokens: 64, logprobs: true };

    it("a frequency penalty makes greedy output repeat fewer tokens; a negative one, more", async () => {
      const plain = await run(test.client, long, stream);
      const penalized = await run(test.client, { ...long, frequency_penalty: 2 }, stream);
      const encouraged = await run(test.client, { ...long, frequency_penalty: -2 }, stream);
      assert.notEqual(penalized.choices[0]!.content, plain.choices[0]!.content);
      const plainRepeats = repeats(plain.choices[0]!.logprobs!.slice(0, 40));
      assert.ok(repeats(penalized.choices[0]!.logprobs!.slice(0, 40)) < plainRepeats, "fewer repeated tokens with a frequency penalty");
      assert.ok(repeats(encouraged.choices[0]!.logprobs!.slice(0, 40)) > plainRepeats, "more repeated tokens with a negative frequency penalty");
    });

    it("a presence penalty changes greedy output and repeats fewer tokens", async () => {
      const plain = await run(test.client, long, stream);
      const penalized = await run(test.client, { ...long, presence_penalty: 2 }, stream);
      assert.notEqual(penalized.choices[0]!.content, plain.choices[0]!.content);
      assert.ok(repeats(penalized.choices[0]!.logprobs!.slice(0, 40)) < repeats(plain.choices[0]!.logprobs!.slice(0, 40)));
    });
  });
}

describe("n with one slot", () => {
  let single: TestServer;
  before(async () => {
    single = await startTestServer({ flags: { parallel: "1", queue_size: "4" } });
  });
  after(async () => {
    await single?.close();
  });

  it("runs the choices one after another in the request's slot, streaming and not, and serves the next request", async () => {
    for (const stream of [false, true]) {
      const three = await run(single.client, { ...story, n: 3 }, stream);
      const one = await run(single.client, story, stream);
      assert.deepEqual(
        three.choices.map((choice) => choice.content),
        [one.choices[0]!.content, one.choices[0]!.content, one.choices[0]!.content],
      );
      assert.equal(three.usage.completion_tokens, 3 * one.usage.completion_tokens);
    }
  });

  it("derives the choices' seeds from the request's: the same seeded request gives the same choices, choice 0 the n=1 result", async () => {
    // Bit-exact sampling needs the same batches: one slot, and the prompt already cached (as it
    // is for every choice after a first request), so each choice evaluates the same last token.
    const seeded: Params = { ...story, temperature: 1, seed: 1234, max_tokens: 32, n: 4 };
    await run(single.client, { ...story, max_tokens: 1 }, false);
    for (const stream of [false, true]) {
      const first = await run(single.client, seeded, stream);
      const second = await run(single.client, seeded, stream);
      assert.deepEqual(
        second.choices.map((choice) => choice.content),
        first.choices.map((choice) => choice.content),
      );
      assert.ok(new Set(first.choices.map((choice) => choice.content)).size > 1, "seeded choices differ from one another");
      const single1 = await run(single.client, { ...seeded, n: 1 }, stream);
      assert.equal(single1.choices[0]!.content, first.choices[0]!.content);
    }
  });

  it("never deadlocks: concurrent requests with n=4 on one slot all complete", async () => {
    const results = await Promise.all(Array.from({ length: 3 }, () => run(single.client, { ...story, n: 4, max_tokens: 8 }, false)));
    for (const result of results) assert.equal(result.choices.length, 4);
  });
});

describe("the catalog", () => {
  it("lists n, logprobs, top_logprobs and logit_bias among the supported parameters", async () => {
    const model = (await test.client.models.retrieve("random")) as unknown as { supported_parameters: string[] };
    for (const parameter of ["n", "logprobs", "top_logprobs", "logit_bias", "frequency_penalty", "presence_penalty"]) {
      assert.ok(model.supported_parameters.includes(parameter), parameter);
    }
  });
});

describe("invalid sampling fields", () => {
  async function badRequest(params: Record<string, unknown>): Promise<InstanceType<typeof OpenAI.BadRequestError>> {
    const error = await test.client.chat.completions.create({ ...story, ...params } as Params).then(
      () => assert.fail("expected a 400"),
      (caught: unknown) => caught,
    );
    assert.ok(error instanceof OpenAI.BadRequestError, String(error));
    return error;
  }

  it("refuses logit_bias ids outside the model's vocabulary, and keys that are not ids", async () => {
    for (const logit_bias of [{ "512": 5 }, { "99999": -100 }, { cat: 1 }, { "3": 150 }]) {
      const error = await badRequest({ logit_bias });
      assert.equal(error.param, "logit_bias");
      assert.equal(error.code, "invalid_logit_bias");
    }
  });

  it("refuses n above 8 and top_logprobs above 20 or without logprobs", async () => {
    assert.equal((await badRequest({ n: 9 })).param, "n");
    assert.equal((await badRequest({ logprobs: true, top_logprobs: 21 })).param, "top_logprobs");
    assert.equal((await badRequest({ top_logprobs: 2 })).param, "top_logprobs");
  });
});
