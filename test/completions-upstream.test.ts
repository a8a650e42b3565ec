/**
 * `POST /v1/completions` through upstream pools, on scripted members (a real HTTP server that
 * answers as vLLM's `/v1/completions` and llama-server's native `/infill` stream do): what
 * Turnpike sends each kind (all prompts in one `/v1/completions` request; fill-in-the-middle as a
 * prompt built from the entry's `fim` tokens for vLLM, as `input_prefix`/`input_suffix` to
 * llama-server's `/infill`), how their chunks come back (choices in index order, the legacy log
 * probabilities, the upstream's usage), the echo Turnpike gives itself, and what it refuses
 * naming the field. The real llama-server is in `completions-llama-server.test.ts`.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import type http from "node:http";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import { FaultUpstream } from "./helpers/fault-upstream.ts";
import { startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";

const FIM = { prefix: "<|fim_prefix|>", suffix: "<|fim_suffix|>", middle: "<|fim_middle|>" };

type Json = Record<string, unknown>;

/** Writes an SSE stream of `events` (JSON payloads), then `[DONE]` unless `done` is false. */
function sse(response: http.ServerResponse, events: unknown[], done = true): void {
  response.writeHead(200, { "content-type": "text/event-stream" });
  for (const event of events) response.write(`data: ${JSON.stringify(event)}\n\n`);
  if (done) response.write("data: [DONE]\n\n");
  response.end();
}

/** vLLM's `/v1/completions` stream: "Hello", " world" for each choice (prompts × n), with legacy logprobs when asked, then finishes and usage. */
function vllmCompletions(received: Json[]) {
  return (body: unknown, response: http.ServerResponse) => {
    const request = body as Json;
    received.push(request);
    const prompts = Array.isArray(request.prompt) && typeof request.prompt[0] !== "number" ? request.prompt.length : 1;
    const choices = prompts * ((request.n as number | undefined) ?? 1);
    const events: unknown[] = [];
    for (const piece of ["Hello", " world"]) {
      for (let index = 0; index < choices; index++) {
        const text = `${piece}${index}`;
        const logprobs = request.logprobs == null ? null : { tokens: [text], token_logprobs: [-0.5], top_logprobs: [{ [text]: -0.5, other: -1.5 }], text_offset: [piece === "Hello" ? 0 : 6] };
        events.push({ id: "cmpl-up", object: "text_completion", created: 1, model: "up", choices: [{ index, text, logprobs, finish_reason: null }] });
      }
    }
    for (let index = 0; index < choices; index++) events.push({ id: "cmpl-up", object: "text_completion", created: 1, model: "up", choices: [{ index, text: "", logprobs: null, finish_reason: "length", stop_reason: null }] });
    events.push({ id: "cmpl-up", object: "text_completion", created: 1, model: "up", choices: [], usage: { prompt_tokens: 9 * prompts, completion_tokens: 2 * choices, total_tokens: 9 * prompts + 2 * choices } });
    sse(response, events);
  };
}

/** llama-server's native `/infill` stream: two pieces, then `stop: true` with its counts (no `[DONE]`). */
function llamaInfill(received: Json[]) {
  return (body: unknown, response: http.ServerResponse) => {
    received.push(body as Json);
    sse(
      response,
      [
        { index: 0, content: "mid", tokens: [], stop: false, id_slot: 0, tokens_predicted: 1, tokens_evaluated: 11, timings: { prompt_n: 11, cache_n: 0, predicted_n: 1 } },
        { index: 0, content: "dle", tokens: [], stop: false, id_slot: 0, tokens_predicted: 2, tokens_evaluated: 11, timings: { prompt_n: 11, cache_n: 0, predicted_n: 2 } },
        { index: 0, content: "", tokens: [], stop: true, stop_type: "limit", stopping_word: "", tokens_predicted: 2, tokens_evaluated: 11, timings: { prompt_n: 11, cache_n: 0, predicted_n: 2 } },
      ],
      false,
    );
  };
}

describe("text completions through upstream pools", { timeout: 60_000 }, () => {
  let vllm: FaultUpstream;
  let llama: FaultUpstream;
  let server: TestServer;
  const vllmBodies: Json[] = [];
  const infillBodies: Json[] = [];
  const llamaBodies: Json[] = [];

  before(async () => {
    vllm = await FaultUpstream.start({ model: "up", maxModelLen: 4096, routes: { "POST /v1/completions": vllmCompletions(vllmBodies) } });
    llama = await FaultUpstream.start({ model: "up", maxModelLen: 4096, routes: { "POST /infill": llamaInfill(infillBodies), "POST /v1/completions": vllmCompletions(llamaBodies) } });
    const configFile = path.join(temporaryDirectory(), "turnpike.json");
    const upstream = (kind: string, member: FaultUpstream) => ({ kind, urls: [member.baseUrl], model: "up", health_interval: 3600 });
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [
          { id: "vllm-fim", context_length: 4096, upstream: upstream("vllm", vllm), fim: FIM },
          { id: "vllm-plain", context_length: 4096, upstream: upstream("vllm", vllm) },
          { id: "llama", context_length: 4096, upstream: upstream("llama-server", llama) },
        ],
      }),
    );
    server = await startTestServer({ configFile });
  });
  after(async () => {
    await server?.close();
    await vllm?.close();
    await llama?.close();
  });

  it("sends every prompt in one /v1/completions request and answers their choices in index order, with the upstream's usage", async () => {
    const completion = await server.client.completions.create({ model: "vllm-plain", prompt: ["one", "two"], n: 2, max_tokens: 5, temperature: 0, logprobs: 1, stop: ["\n"] });
    const body = vllmBodies.at(-1)!;
    assert.deepEqual(body.prompt, ["one", "two"]);
    assert.equal(body.n, 2);
    assert.equal(body.max_tokens, 5);
    assert.equal(body.logprobs, 1);
    assert.deepEqual(body.stop, ["\n"]);
    assert.equal(body.stream, true);
    assert.equal(body.suffix, undefined);
    assert.deepEqual(completion.choices.map((choice) => [choice.index, choice.text, choice.finish_reason]), [
      [0, "Hello0 world0", "length"],
      [1, "Hello1 world1", "length"],
      [2, "Hello2 world2", "length"],
      [3, "Hello3 world3", "length"],
    ]);
    const logprobs = completion.choices[2]!.logprobs!;
    assert.deepEqual(logprobs.tokens, ["Hello2", " world2"]);
    assert.deepEqual(logprobs.token_logprobs, [-0.5, -0.5]);
    assert.deepEqual(logprobs.top_logprobs, [{ Hello2: -0.5, other: -1.5 }, { " world2": -0.5, other: -1.5 }]);
    assert.deepEqual(logprobs.text_offset, [0, 6]);
    assert.deepEqual([completion.usage!.prompt_tokens, completion.usage!.completion_tokens], [18, 8]);
  });

  it("gives the echo itself, before each choice's text, streamed or not", async () => {
    const completion = await server.client.completions.create({ model: "vllm-plain", prompt: "Say: ", max_tokens: 2, echo: true });
    assert.equal(vllmBodies.at(-1)!.echo, undefined, "the upstream is not asked to echo");
    assert.equal(completion.choices[0]!.text, "Say: Hello0 world0");
    const chunks: string[] = [];
    for await (const chunk of await server.client.completions.create({ model: "vllm-plain", prompt: "Say: ", max_tokens: 2, echo: true, stream: true })) chunks.push(chunk.choices[0]?.text ?? "");
    assert.equal(chunks[0], "Say: ");
    assert.equal(chunks.join(""), "Say: Hello0 world0");
  });

  it("fills in the middle on vLLM with a prompt built from the entry's fim tokens", async () => {
    const completion = await server.client.completions.create({ model: "vllm-fim", prompt: "def f(", suffix: "):\n    pass\n", max_tokens: 8, temperature: 0 });
    const body = vllmBodies.at(-1)!;
    assert.equal(body.prompt, "<|fim_prefix|>def f(<|fim_suffix|>):\n    pass\n<|fim_middle|>");
    assert.equal(body.suffix, undefined, "vLLM refuses suffix: none is sent");
    assert.equal(completion.choices[0]!.text, "Hello0 world0");
  });

  it("fills in the middle on llama-server through its /infill, reading its native stream", async () => {
    const completion = await server.client.completions.create({ model: "llama", prompt: "def f(", suffix: "):\n", max_tokens: 8, temperature: 0, seed: 3 });
    const body = infillBodies.at(-1)!;
    assert.equal(body.input_prefix, "def f(");
    assert.equal(body.input_suffix, "):\n");
    assert.equal(body.n_predict, 8);
    assert.equal(body.temperature, 0);
    assert.equal(body.seed, 3);
    assert.equal(body.stream, true);
    assert.equal(body.prompt, undefined, "no prompt after the prefix: the middle starts where the prefix ends");
    assert.equal(completion.choices[0]!.text, "middle");
    assert.equal(completion.choices[0]!.finish_reason, "length");
    assert.deepEqual([completion.usage!.prompt_tokens, completion.usage!.completion_tokens], [11, 2]);
    const chunks: string[] = [];
    for await (const chunk of await server.client.completions.create({ model: "llama", prompt: "def f(", suffix: "):\n", max_tokens: 8, stream: true })) chunks.push(chunk.choices[0]?.text ?? "");
    assert.equal(chunks.join(""), "middle");
    // A plain completion on llama-server goes to its /v1/completions.
    await server.client.completions.create({ model: "llama", prompt: "def f(", max_tokens: 2 });
    assert.equal(llamaBodies.at(-1)!.prompt, "def f(");
  });

  it("refuses what a kind cannot serve, naming the field", async () => {
    const cases: Array<[OpenAI.Completions.CompletionCreateParamsNonStreaming, string]> = [
      [{ model: "vllm-plain", prompt: "x", suffix: "y" }, "suffix"],
      [{ model: "llama", prompt: ["a", "b"], suffix: "y" }, "prompt"],
      [{ model: "llama", prompt: "a", n: 2 }, "n"],
      [{ model: "vllm-plain", prompt: [1, 2, 3], echo: true }, "echo"],
      [{ model: "vllm-plain", prompt: "x", echo: true, logprobs: 1 }, "echo"],
      [{ model: "vllm-plain", prompt: "x", echo: true, max_tokens: 0 }, "max_tokens"],
      [{ model: "vllm-fim", prompt: [1, 2, 3], suffix: "y" }, "prompt"],
    ];
    for (const [request, param] of cases) {
      const error = await server.client.completions.create(request).then(
        () => assert.fail(`answered ${JSON.stringify(request)}`),
        (caught: unknown) => caught,
      );
      assert.ok(error instanceof OpenAI.BadRequestError, String(error));
      assert.equal(error.param, param, JSON.stringify(request));
    }
  });

  it("serves /infill on upstreams: input_extra and prompt passed to llama-server's /infill, the middle's start laid out for vLLM, extra files refused there", async () => {
    const post = async (body: Json) => {
      const response = await fetch(`${server.url}/infill`, { method: "POST", headers: { authorization: `Bearer ${server.key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
      return { status: response.status, body: (await response.json()) as Record<string, any> };
    };
    const extra = [{ filename: "a.py", text: "x = 1\n" }, { text: "y = 2\n" }];
    const llamaAnswer = await post({ model: "llama", input_prefix: "def f(", input_suffix: "):\n", input_extra: extra, prompt: "a", n_predict: 8, temperature: 0 });
    assert.equal(llamaAnswer.status, 200, JSON.stringify(llamaAnswer.body));
    const body = infillBodies.at(-1)!;
    assert.deepEqual([body.input_prefix, body.input_suffix, body.prompt, body.n_predict], ["def f(", "):\n", "a", 8]);
    assert.deepEqual(body.input_extra, [{ filename: "a.py", text: "x = 1\n" }, { filename: "tmp", text: "y = 2\n" }], "a file without a name gets llama-server's own default");
    assert.deepEqual([llamaAnswer.body.content, llamaAnswer.body.tokens_evaluated, llamaAnswer.body.tokens_predicted, llamaAnswer.body.stop_type], ["middle", 11, 2, "limit"]);
    // llama.vscode's cache warm-up (n_predict 0) goes to llama-server as it is; no n_predict: what the context leaves.
    assert.equal((await post({ model: "llama", input_prefix: "", input_suffix: "", input_extra: extra, n_predict: 0 })).status, 200);
    assert.equal(infillBodies.at(-1)!.n_predict, 0);
    assert.equal((await post({ model: "llama", input_prefix: "def f(", input_suffix: "" })).status, 200);
    const unlimited = infillBodies.at(-1)!.n_predict as number;
    assert.ok(unlimited > 4000, `n_predict ${unlimited}`);
    const vllmAnswer = await post({ model: "vllm-fim", input_prefix: "def f(", input_suffix: "):\n", prompt: "a", n_predict: 8, input_extra: [] });
    assert.equal(vllmAnswer.status, 200, JSON.stringify(vllmAnswer.body));
    assert.equal(vllmBodies.at(-1)!.prompt, "<|fim_prefix|>def f(a<|fim_suffix|>):\n<|fim_middle|>", "llama-server's order: the middle's start after the prefix");
    const refused = await post({ model: "vllm-fim", input_prefix: "def f(", input_suffix: "):\n", input_extra: extra });
    assert.equal(refused.status, 400);
    assert.equal(refused.body.error.param, "input_extra");
    const plain = await post({ model: "vllm-plain", input_prefix: "def f(", input_suffix: "" });
    assert.equal(plain.body.error.param, "model", "a model without fim tokens cannot serve /infill");
  });

  it("says which models fill in the middle: llama-server, and vLLM only with fim tokens", async () => {
    const models = (await server.client.models.list()).data as unknown as Array<{ id: string; supported_parameters: string[] }>;
    const fills = Object.fromEntries(models.map((model) => [model.id, model.supported_parameters.includes("suffix")]));
    assert.deepEqual(fills, { "vllm-fim": true, "vllm-plain": false, llama: true });
  });
});

