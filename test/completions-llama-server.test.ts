/**
 * Text completions against a real llama.cpp `llama-server` on the same GGUF files: Turnpike's
 * embedded engine answers a raw prompt at temperature 0 exactly as llama-server's own
 * `/v1/completions` does (same text, same prompt token count: the same BOS and tokenization),
 * and fills in the middle exactly as llama-server's `/infill` does for the same prompt (as
 * `input_prefix`) and suffix (`input_suffix`): same text, same prompt tokens. Through a Turnpike
 * model whose entry is a llama-server member the answers are the same again (its `/infill` for
 * `suffix`). Skipped outside CI when llama-server is not built (see helpers/llama-server.ts).
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { skipWithoutLlamaServer, startLlamaServer, type RunningLlamaServer } from "./helpers/llama-server.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { fimModelPath } from "./helpers/test-models.ts";

const PROMPTS = ["Once upon a time", "The little dog ran to the park. He saw", "Lily and Tom"];
const SUFFIXES = [" and they lived happily ever after.", " She was very happy.", "\nThe end."];
const MAX_TOKENS = 48;

type Json = Record<string, any>;

async function post(url: string, body: unknown): Promise<Json> {
  const response = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const text = await response.text();
  assert.equal(response.status, 200, text);
  return JSON.parse(text) as Json;
}

describe("text completions agree with llama-server", { skip: skipWithoutLlamaServer(), timeout: 300_000 }, () => {
  let plain: RunningLlamaServer;
  let fim: RunningLlamaServer;
  let turnpike: TestServer;

  before(async () => {
    const fimModel = fimModelPath();
    plain = await startLlamaServer({ model: storiesModel, threads: 1, parallel: 1, contextSize: 2048 });
    fim = await startLlamaServer({ model: fimModel, threads: 1, parallel: 1, contextSize: 2048 });
    const configFile = path.join(temporaryDirectory("turnpike-llama-completions-"), "turnpike.json");
    const member = (server: RunningLlamaServer) => ({ kind: "llama-server", urls: [`${server.url}/v1`], health_interval: 3600 });
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [
          { id: "story", path: storiesModel },
          { id: "story-fim", path: fimModel },
          { id: "llama-story", upstream: member(plain) },
          { id: "llama-fim", upstream: member(fim) },
        ],
      }),
    );
    turnpike = await startTestServer({ configFile, flags: { context_size: "2048", parallel: "1" } });
  });
  after(async () => {
    await turnpike?.close();
    await plain?.close();
    await fim?.close();
  });

  it("answers a raw prompt at temperature 0 as llama-server's /v1/completions does, embedded and through the member", async () => {
    for (const prompt of PROMPTS) {
      const reference = await post(`${plain.url}/v1/completions`, { prompt, max_tokens: MAX_TOKENS, temperature: 0 });
      const embedded = await turnpike.client.completions.create({ model: "story", prompt, max_tokens: MAX_TOKENS, temperature: 0 });
      assert.equal(embedded.choices[0]!.text, reference.choices[0].text, `embedded, ${JSON.stringify(prompt)}`);
      assert.equal(embedded.usage!.prompt_tokens, reference.usage.prompt_tokens, "the same tokens: BOS and the text");
      assert.equal(embedded.usage!.completion_tokens, reference.usage.completion_tokens);
      const member = await turnpike.client.completions.create({ model: "llama-story", prompt, max_tokens: MAX_TOKENS, temperature: 0 });
      assert.equal(member.choices[0]!.text, reference.choices[0].text, `through the member, ${JSON.stringify(prompt)}`);
      assert.equal(member.usage!.prompt_tokens, reference.usage.prompt_tokens);
    }
  });

  it("gives the same legacy log probabilities' tokens embedded and through the member (llama-server's own logprobs)", async () => {
    const request = { prompt: "The little dog ran to the park. He saw", max_tokens: 12, temperature: 0, logprobs: 2 };
    const embedded = await turnpike.client.completions.create({ model: "story", ...request });
    const member = await turnpike.client.completions.create({ model: "llama-story", ...request });
    const [mine, theirs] = [embedded.choices[0]!, member.choices[0]!];
    assert.equal(theirs.text, mine.text);
    assert.deepEqual(theirs.logprobs!.tokens, mine.logprobs!.tokens);
    assert.equal(theirs.logprobs!.tokens!.join(""), theirs.text);
    assert.deepEqual(theirs.logprobs!.text_offset, mine.logprobs!.text_offset);
    theirs.logprobs!.token_logprobs!.forEach((logprob, index) => assert.ok(Math.abs(logprob - mine.logprobs!.token_logprobs![index]!) < 1e-3, `token ${index}: ${logprob} against ${mine.logprobs!.token_logprobs![index]}`));
  });

  it("answers several prompts in one request as each alone, in index order, embedded and through the member, JSON and streamed", async () => {
    const alone = await Promise.all(PROMPTS.map((prompt) => post(`${plain.url}/v1/completions`, { prompt, max_tokens: 16, temperature: 0 })));
    const expected = alone.map((answer) => answer.choices[0].text as string);
    for (const model of ["story", "llama-story"]) {
      const completion = await turnpike.client.completions.create({ model, prompt: PROMPTS, max_tokens: 16, temperature: 0 });
      assert.deepEqual(completion.choices.map((choice) => choice.index), [0, 1, 2]);
      assert.deepEqual(completion.choices.map((choice) => choice.text), expected, model);
      assert.equal(completion.usage!.prompt_tokens, alone.reduce((sum, answer) => sum + (answer.usage.prompt_tokens as number), 0), `${model}: each prompt counted once`);
      const texts = ["", "", ""];
      for await (const chunk of await turnpike.client.completions.create({ model, prompt: PROMPTS, max_tokens: 16, temperature: 0, stream: true })) {
        for (const choice of chunk.choices) texts[choice.index] += choice.text;
      }
      assert.deepEqual(texts, expected, `${model}, streamed`);
    }
  });

  it("fills in the middle at temperature 0 exactly as llama-server's /infill does, embedded and through the member", async () => {
    for (const [index, prompt] of PROMPTS.entries()) {
      const suffix = SUFFIXES[index]!;
      const reference = await post(`${fim.url}/infill`, { input_prefix: prompt, input_suffix: suffix, n_predict: MAX_TOKENS, temperature: 0 });
      assert.ok(typeof reference.content === "string");
      const embedded = await turnpike.client.completions.create({ model: "story-fim", prompt, suffix, max_tokens: MAX_TOKENS, temperature: 0 });
      assert.equal(embedded.choices[0]!.text, reference.content, `embedded, ${JSON.stringify([prompt, suffix])}`);
      assert.equal(embedded.usage!.prompt_tokens, reference.tokens_evaluated, "the same FIM layout: BOS, FIM_PRE, prefix, FIM_SUF, suffix, FIM_MID");
      assert.equal(embedded.usage!.completion_tokens, reference.tokens_predicted);
      const member = await turnpike.client.completions.create({ model: "llama-fim", prompt, suffix, max_tokens: MAX_TOKENS, temperature: 0 });
      assert.equal(member.choices[0]!.text, reference.content, `through the member, ${JSON.stringify([prompt, suffix])}`);
      assert.equal(member.usage!.prompt_tokens, reference.tokens_evaluated);
      let streamed = "";
      for await (const chunk of await turnpike.client.completions.create({ model: "llama-fim", prompt, suffix, max_tokens: MAX_TOKENS, temperature: 0, stream: true })) streamed += chunk.choices[0]?.text ?? "";
      assert.equal(streamed, reference.content, "streamed through the member");
    }
    // Log probabilities through /infill (its native `n_probs`) in the legacy shape, equal to the embedded engine's.
    const request = { prompt: PROMPTS[0]!, suffix: SUFFIXES[0]!, max_tokens: 12, temperature: 0, logprobs: 1 };
    const [embedded, member] = await Promise.all([turnpike.client.completions.create({ model: "story-fim", ...request }), turnpike.client.completions.create({ model: "llama-fim", ...request })]);
    assert.deepEqual(member.choices[0]!.logprobs!.tokens, embedded.choices[0]!.logprobs!.tokens);
    assert.equal(member.choices[0]!.logprobs!.tokens!.join(""), member.choices[0]!.text);
  });
});
