/**
 * `POST /infill` (llama-server's native fill-in-the-middle dialect, as llama.vim and llama.vscode
 * call it) end to end on a real server over real tiny models: stories260K's FIM variant
 * with a 4,096-token context (`fimLongContextModelPath()`), stories260K itself (no FIM tokens) and its embedding variant. Plain HTTP
 * with `Authorization: Bearer`, as the editor plugins send it. JSON and streamed shapes (no
 * `[DONE]`), the same middle as `/v1/completions` with `suffix` for the same prefix and suffix
 * (one layout), `model` left out (the one FIM model), `/v1/infill` too, the exact bodies
 * llama.vscode and llama.vim send (their cache warm-up included), `response_fields`, billing
 * recorded as completions are, and the refusals that name their field.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { Kysely } from "kysely";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { billedExactly, meteredKey } from "./helpers/metered.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { embeddingModelPath, fimLongContextModelPath, fimModelPath, fimRepositoryModelPath } from "./helpers/test-models.ts";

const pricing = { prompt: 1_000_000, cached_prompt: 1_000_000, completion: 2_000_000 };
const CREDIT = 10_000_000;

type Json = Record<string, any>;

let server: TestServer;
let database: Kysely<Database>;

before(async () => {
  const configFile = path.join(temporaryDirectory(), "turnpike.json");
  fs.writeFileSync(
    configFile,
    JSON.stringify({
      models: [
        { id: "story", path: storiesModel, pricing },
        // Room for extra files beside llama-server's 2048-token batch: 4096 tokens.
        { id: "story-fim", path: fimLongContextModelPath(), context_size: 4096, parallel: 2, pricing },
        { id: "story-embedding", path: embeddingModelPath(), serves: ["embeddings"] },
      ],
      plans: [{ id: "funded", name: "Funded", price: { amount: 100, currency: "usd" }, credit: CREDIT }],
    }),
  );
  server = await startTestServer({ configFile, flags: { context_size: "512" } });
  database = await openStore({ dataDir: server.dataDir, databaseUrl: "" });
});

after(async () => {
  await database?.destroy();
  await server?.close();
});

/** Posts a body to `path` with the key as llama.vscode sends it; the status and the raw text. */
async function postRaw(pathname: string, body: unknown, key: string = server.key): Promise<{ status: number; text: string; contentType: string }> {
  const response = await fetch(`${server.url}${pathname}`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${key}` }, body: JSON.stringify(body) });
  return { status: response.status, text: await response.text(), contentType: response.headers.get("content-type") ?? "" };
}

async function infill(body: unknown, pathname = "/infill", key?: string): Promise<Json> {
  const { status, text } = await postRaw(pathname, body, key);
  assert.equal(status, 200, text);
  return JSON.parse(text) as Json;
}

async function refusal(body: unknown, status = 400): Promise<Json> {
  const answer = await postRaw("/infill", body);
  assert.equal(answer.status, status, answer.text);
  return (JSON.parse(answer.text) as { error: Json }).error;
}

const PREFIX = "Once upon a time, there was a little dog.";
const SUFFIX = " They played all day and were very happy.";

describe("POST /infill", { timeout: 120_000 }, () => {
  it("answers llama-server's result, the same middle as /v1/completions with suffix, on the one FIM model when none is named", async () => {
    const result = await infill({ input_prefix: PREFIX, input_suffix: SUFFIX, n_predict: 16, temperature: 0 });
    const completion = await server.client.completions.create({ model: "story-fim", prompt: PREFIX, suffix: SUFFIX, max_tokens: 16, temperature: 0 });
    assert.equal(result.content, completion.choices[0]!.text);
    assert.ok(result.content.length > 0);
    assert.equal(result.model, "story-fim");
    assert.equal(result.stop, true);
    assert.equal(result.tokens_evaluated, completion.usage!.prompt_tokens);
    assert.equal(result.tokens_predicted, completion.usage!.completion_tokens);
    assert.equal(result.stop_type, completion.choices[0]!.finish_reason === "length" ? "limit" : "eos");
    assert.equal(result.truncated, false);
    assert.equal(result.has_new_line, result.content.includes("\n"));
    assert.deepEqual(result.tokens, []);
    for (const field of ["cache_n", "prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms", "predicted_per_second"]) assert.equal(typeof result.timings[field], "number", field);
    assert.equal(result.timings.predicted_n, result.tokens_predicted);
    assert.equal(result.timings.prompt_n + result.timings.cache_n, result.tokens_evaluated);
    const named = await infill({ model: "story-fim", input_prefix: PREFIX, input_suffix: SUFFIX, n_predict: 16, temperature: 0 }, "/v1/infill");
    assert.equal(named.content, result.content, "/v1/infill, with the model named, answers alike");
    const models = (await server.client.models.list()).data as unknown as Array<{ id: string; endpoints: string[] }>;
    assert.ok(models.find((model) => model.id === "story-fim")!.endpoints.includes("/infill"), "/v1/models lists /infill for the FIM model");
    assert.ok(!models.find((model) => model.id === "story")!.endpoints.includes("/infill"));
  });

  it("lays out extra files and the middle's start: both change the middle, and count as prompt tokens", async () => {
    const base = { input_prefix: PREFIX, input_suffix: SUFFIX, n_predict: 12, temperature: 0 };
    const plain = await infill(base);
    const extra = await infill({ ...base, input_extra: [{ filename: "a.txt", text: "Lily had a big red ball and a cat named Tom." }] });
    assert.ok(extra.tokens_evaluated > plain.tokens_evaluated + 10, "the extra file's tokens are in the prompt");
    const middle = await infill({ ...base, prompt: " He" });
    assert.ok(middle.tokens_evaluated > plain.tokens_evaluated, "the middle's start is in the prompt");
    assert.notEqual(middle.content, plain.content);
  });

  it("streams llama-server's events: pieces with stop false, then the final result with empty content, and no [DONE]", async () => {
    const body = { input_prefix: PREFIX, input_suffix: SUFFIX, n_predict: 16, temperature: 0 };
    const whole = await infill(body);
    const { status, text, contentType } = await postRaw("/infill", { ...body, stream: true });
    assert.equal(status, 200, text);
    assert.match(contentType, /text\/event-stream/);
    assert.ok(!text.includes("[DONE]"), "llama-server ends /infill streams without [DONE]");
    const events = text.split("\n").filter((line) => line.startsWith("data: ")).map((line) => JSON.parse(line.slice(6)) as Json);
    const pieces = events.slice(0, -1);
    assert.ok(pieces.length > 0 && pieces.every((event) => event.stop === false && typeof event.content === "string"));
    assert.equal(pieces.map((event) => event.content).join(""), whole.content);
    const last = events.at(-1)!;
    assert.deepEqual([last.stop, last.content, last.tokens_predicted, last.stop_type], [true, "", whole.tokens_predicted, whole.stop_type]);
  });

  it("serves llama.vscode's exact request and its cache warm-up", async () => {
    // The body of llama.vscode's `createRequestPayload` (ggml-org/llama.vscode, src/llama-server.ts):
    // input_prefix, input_suffix, input_extra (its ring chunks: {text, time, filename}), prompt,
    // n_predict, then its defaultRequestParams (top_k 40, top_p 0.99, stream false, samplers
    // ["top_k", "top_p", "infill"], cache_prompt true), n_indent, t_max_prompt_ms, t_max_predict_ms;
    // no model; the API key as `Authorization: Bearer`.
    const vscode = {
      input_prefix: "Once upon a time, there was a little dog.\n",
      input_suffix: "\nThe end.",
      input_extra: [{ text: "Lily had a big red ball.\nShe liked to play.\n", time: Date.now(), filename: "/home/me/story/notes.txt" }],
      prompt: "",
      n_predict: 32,
      top_k: 40,
      top_p: 0.99,
      stream: false,
      samplers: ["top_k", "top_p", "infill"],
      cache_prompt: true,
      n_indent: 0,
      t_max_prompt_ms: 500,
      t_max_predict_ms: 1000,
    };
    const result = await infill(vscode);
    assert.equal(typeof result.content, "string");
    assert.equal(typeof result.tokens_cached, "number");
    assert.equal(result.truncated, false);
    assert.ok(result.tokens_predicted > 0 && result.tokens_predicted <= 32);
    // Its warm-up after the ring buffer changes: nothing to generate.
    const warmUp = await infill({ input_prefix: "", input_suffix: "", input_extra: vscode.input_extra, prompt: "", n_predict: 0, samplers: [], cache_prompt: true, t_max_prompt_ms: 500, t_max_predict_ms: 1 });
    assert.equal(warmUp.content, "");
    assert.equal(warmUp.tokens_predicted, 0);
    assert.ok(warmUp.tokens_evaluated > 3);
  });

  it("serves llama.vim's request, answering only its response_fields as flat paths, and its ring-buffer warm-up", async () => {
    // llama.vim's llama#fim request (ggml-org/llama.vim, autoload/llama.vim at 02e6a4f): the FIM
    // fields with input_extra ring chunks ({text, time, filename}), n_predict, n_indent, top_k 40,
    // top_p 0.99, stream false, samplers, cache_prompt, t_max_prompt_ms, t_max_predict_ms and
    // response_fields; no model; posted with curl to its `endpoint` (…/infill), the key as Bearer.
    const result = await infill({
      input_prefix: "Once upon a time, there was a little dog.\n",
      input_suffix: "\nThe end.\n",
      input_extra: [{ text: "Lily had a big red ball.\n", time: 1_700_000_000, filename: "notes.txt" }],
      prompt: "He",
      n_predict: 16,
      n_indent: 0,
      top_k: 40,
      top_p: 0.99,
      stream: false,
      samplers: ["top_k", "top_p", "infill"],
      cache_prompt: true,
      t_max_prompt_ms: 500,
      t_max_predict_ms: 1000,
      response_fields: ["content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms", "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms", "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated", "tokens_cached"],
    });
    assert.deepEqual(Object.keys(result).sort(), ["content", "timings/predicted_ms", "timings/predicted_n", "timings/predicted_per_second", "timings/predicted_per_token_ms", "timings/prompt_ms", "timings/prompt_n", "timings/prompt_per_second", "timings/prompt_per_token_ms", "tokens_cached", "truncated"]);
    assert.ok(result["timings/predicted_n"] > 0 && result["timings/predicted_n"] <= 16);
    // Its ring-buffer update: the extra files alone, to be cached (some versions add id_slot 0).
    const warmUp = await infill({ id_slot: 0, input_prefix: "", input_suffix: "", input_extra: [{ text: "Lily had a big red ball.\n", time: 1, filename: "notes.txt" }], prompt: "", n_predict: 0, cache_prompt: true, t_max_prompt_ms: 1, t_max_predict_ms: 1 });
    assert.deepEqual([warmUp.content, warmUp.tokens_predicted], ["", 0]);
  });

  it("is billed as completions are: the prompt tokens and the predicted tokens, streamed or not", async () => {
    const { accountId, key } = await meteredKey(database, "funded");
    const result = await infill({ input_prefix: PREFIX, input_suffix: SUFFIX, n_predict: 8, temperature: 0 }, "/infill", key);
    const { records, balance } = await billedExactly(database, accountId, CREDIT, pricing, 1);
    assert.equal(records[0]!.prompt_tokens, result.tokens_evaluated);
    assert.equal(records[0]!.completion_tokens, result.tokens_predicted);
    assert.equal(CREDIT - balance, result.tokens_evaluated * 1 + result.tokens_predicted * 2);
    const streamed = await postRaw("/infill", { input_prefix: PREFIX, input_suffix: SUFFIX, n_predict: 8, temperature: 0, stream: true }, key);
    assert.equal(streamed.status, 200);
    const after = await billedExactly(database, accountId, CREDIT, pricing, 2);
    assert.equal(after.records[1]!.completion_tokens, 8);
  });

  it("refuses what it cannot serve, naming the field", async () => {
    assert.equal((await refusal({ input_suffix: "" })).param, "input_prefix");
    assert.equal((await refusal({ input_prefix: "a" })).param, "input_suffix");
    const noFim = await refusal({ model: "story", input_prefix: "a", input_suffix: "b" });
    assert.equal(noFim.param, "model");
    assert.match(noFim.message, /fill in the middle/);
    const embedding = await refusal({ model: "story-embedding", input_prefix: "a", input_suffix: "b" });
    assert.equal(embedding.code, "model_does_not_support_endpoint");
    assert.equal((await refusal({ model: "nope", input_prefix: "a", input_suffix: "b" }, 404)).code, "model_not_found");
    assert.equal((await refusal({ input_prefix: "a", input_suffix: "b", lora: [{ id: 0, scale: 0.5 }] })).param, "lora");
    assert.equal((await refusal({ input_prefix: "a", input_suffix: "b", min_p: 0.05 })).param, "min_p", "the embedded engine takes no min_p");
    assert.equal((await refusal({ input_prefix: "a", input_suffix: "b", input_extra: [{ filename: "a" }] })).param, "input_extra[0].text");
    assert.match((await refusal({ input_prefix: "a", input_suffix: "b", input_extra: Array.from({ length: 257 }, () => ({ text: "x" })) })).message, /at most 256/);
    const context = await refusal({ input_prefix: "a", input_suffix: "b", n_predict: 5000 });
    assert.equal(context.code, "context_length_exceeded");
    // A large body is validated in the body worker, with the same schema.
    const large = await refusal({ input_prefix: "x".repeat(100_000), input_suffix: "b", input_extra: "not files" });
    assert.equal(large.param, "input_extra");
    const unauthenticated = await postRaw("/infill", { input_prefix: "a", input_suffix: "b" }, "sk-wrong");
    assert.equal(unauthenticated.status, 401);
  });
});

describe("POST /infill with several FIM models", { timeout: 60_000 }, () => {
  it("asks for model by name when more than one model fills in the middle, unless the key may use only one of them", async () => {
    const configFile = path.join(temporaryDirectory(), "turnpike.json");
    fs.writeFileSync(configFile, JSON.stringify({ models: [{ id: "fim-a", path: fimModelPath() }, { id: "fim-b", path: fimRepositoryModelPath() }] }));
    const two = await startTestServer({ configFile, flags: { context_size: "512", parallel: "1" } });
    try {
      const response = await fetch(`${two.url}/infill`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${two.key}` }, body: JSON.stringify({ input_prefix: "a", input_suffix: "b" }) });
      const error = ((await response.json()) as { error: Json }).error;
      assert.equal(response.status, 400);
      assert.equal(error.param, "model");
      assert.match(error.message, /'fim-a', 'fim-b'/);
      const named = await fetch(`${two.url}/infill`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${two.key}` }, body: JSON.stringify({ model: "fim-b", input_prefix: "a", input_suffix: "b", n_predict: 4 }) });
      assert.equal(named.status, 200);
      // A key allowed one of them (a plugin's key) gets that one without naming it.
      const created = await fetch(`${two.url}/api/keys`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${two.key}` }, body: JSON.stringify({ name: "editor", models: ["fim-b"] }) });
      assert.equal(created.status, 201, await created.clone().text());
      const editorKey = ((await created.json()) as { key: string }).key;
      const unnamed = await fetch(`${two.url}/infill`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${editorKey}` }, body: JSON.stringify({ input_prefix: "a", input_suffix: "b", n_predict: 4 }) });
      assert.equal(unnamed.status, 200, await unnamed.clone().text());
      assert.equal(((await unnamed.json()) as { model: string }).model, "fim-b");
    } finally {
      await two.close();
    }
  });
});
