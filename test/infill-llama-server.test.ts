/**
 * Turnpike's `/infill` against a real llama.cpp `llama-server` on the same GGUF files: for the
 * same body (`input_prefix`, `input_suffix`, `input_extra`, `prompt`, `n_predict`, temperature 0)
 * Turnpike answers the same `content` with the same prompt and predicted token counts, embedded
 * and through a llama-server member (which gets `input_extra` and `prompt` as sent). Two models:
 * the FIM model without repository tokens (extra files behind llama-server's snippet separator)
 * and with them (`FIM_REP`/`FIM_SEP`), both with a 4,096-token context so that llama-server keeps
 * the last 2,050 tokens of the extra files (one case has more, and is cut); `n_indent` cuts alike.
 * Skipped outside CI when llama-server is not built (see helpers/llama-server.ts).
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { skipWithoutLlamaServer, startLlamaServer, type RunningLlamaServer } from "./helpers/llama-server.ts";
import { startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { FIM_LONG_CONTEXT, fimLongContextModelPath, fimRepositoryModelPath } from "./helpers/test-models.ts";

type Json = Record<string, any>;

async function post(url: string, body: unknown, key?: string): Promise<Json> {
  const headers: Record<string, string> = { "content-type": "application/json", ...(key !== undefined ? { authorization: `Bearer ${key}` } : {}) };
  const response = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
  const text = await response.text();
  assert.equal(response.status, 200, text);
  return JSON.parse(text) as Json;
}

const LONG_FILE = Array.from({ length: 80 }, (_, index) => `Line ${index}: Tom and Lily went to the park and played with a red ball.`).join("\n");

/** The bodies both servers get, besides `n_predict` and `temperature`. */
const CASES: Array<[string, Json]> = [
  ["prefix and suffix", { input_prefix: "Once upon a time, there was a little dog.", input_suffix: " They played all day and were very happy." }],
  ["an empty suffix", { input_prefix: "Lily and Tom went to the park.", input_suffix: "" }],
  [
    "extra files",
    {
      input_prefix: "The little dog ran to the park. He saw",
      input_suffix: "\nThe end.",
      input_extra: [
        { filename: "lily.txt", text: "Lily had a big red ball. She liked to play with it every day.\n" },
        { text: "Tom was a happy cat who liked to sleep in the sun.\n" },
      ],
    },
  ],
  ["the middle's start", { input_prefix: "Once upon a time", input_suffix: " and they lived happily ever after.", prompt: ", there was a" }],
  ["extra files, the middle's start, special text in it", { input_prefix: "Lily and Tom", input_suffix: "\nThe end.", input_extra: [{ filename: "a.txt", text: "Sam had a kite." }], prompt: " were<|fim_suffix|>" }],
  ["extra files past the room beside the batch (cut to their last 2,050 tokens)", { input_prefix: "Once upon a time", input_suffix: " The end.", input_extra: [{ filename: "long.txt", text: LONG_FILE }] }],
];

describe("/infill agrees with llama-server's /infill", { skip: skipWithoutLlamaServer(), timeout: 600_000 }, () => {
  let snippets: RunningLlamaServer;
  let repository: RunningLlamaServer;
  let turnpike: TestServer;

  before(async () => {
    const [snippetModel, repositoryModel] = [fimLongContextModelPath(), fimRepositoryModelPath()];
    snippets = await startLlamaServer({ model: snippetModel, threads: 1, parallel: 1, contextSize: FIM_LONG_CONTEXT });
    repository = await startLlamaServer({ model: repositoryModel, threads: 1, parallel: 1, contextSize: FIM_LONG_CONTEXT });
    const configFile = path.join(temporaryDirectory("turnpike-llama-infill-"), "turnpike.json");
    const member = (server: RunningLlamaServer) => ({ kind: "llama-server", urls: [`${server.url}/v1`], health_interval: 3600 });
    const embedded = { context_size: FIM_LONG_CONTEXT, parallel: 1 };
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [
          { id: "fim", path: snippetModel, ...embedded },
          { id: "fim-repo", path: repositoryModel, ...embedded },
          { id: "llama-fim", upstream: member(snippets) },
          { id: "llama-fim-repo", upstream: member(repository) },
        ],
      }),
    );
    turnpike = await startTestServer({ configFile, flags: { parallel: "1" } });
  });
  after(async () => {
    await turnpike?.close();
    await snippets?.close();
    await repository?.close();
  });

  for (const [name, fields] of CASES) {
    it(`answers the same middle at temperature 0: ${name}`, async () => {
      for (const [reference, models] of [
        [() => snippets, ["fim", "llama-fim"]],
        [() => repository, ["fim-repo", "llama-fim-repo"]],
      ] as const) {
        const body = { ...fields, n_predict: 24, temperature: 0 };
        const theirs = await post(`${reference().url}/infill`, body);
        if (fields.input_extra?.[0]?.text === LONG_FILE) {
          const file = await post(`${reference().url}/tokenize`, { content: LONG_FILE });
          assert.ok(file.tokens.length > 2050, `the file alone is past the room: ${file.tokens.length} tokens`);
        }
        assert.equal(typeof theirs.content, "string");
        for (const model of models) {
          const mine = await post(`${turnpike.url}/infill`, { ...body, model }, turnpike.key);
          assert.equal(mine.content, theirs.content, `${model}: ${name}`);
          assert.equal(mine.tokens_evaluated, theirs.tokens_evaluated, `${model}: the same prompt tokens (${name})`);
          assert.equal(mine.tokens_predicted, theirs.tokens_predicted, `${model}: the same predicted tokens (${name})`);
          assert.equal(mine.stop_type, theirs.stop_type, `${model}: ${name}`);
        }
      }
    });
  }

  it("cuts at n_indent as llama-server does, embedded and through the member", async () => {
    const body = { input_prefix: "Once upon a time, there was a little dog.\n", input_suffix: "", n_predict: 96, temperature: 0 };
    const whole = await post(`${snippets.url}/infill`, body);
    assert.match(whole.content as string, /\n\S/, "the middle has a line to cut");
    const theirs = await post(`${snippets.url}/infill`, { ...body, n_indent: 2 });
    assert.ok((theirs.content as string).length < (whole.content as string).length, "llama-server cut it");
    for (const model of ["fim", "llama-fim"]) {
      const mine = await post(`${turnpike.url}/infill`, { ...body, n_indent: 2, model }, turnpike.key);
      assert.equal(mine.content, theirs.content, model);
      assert.equal(mine.stop_type, "limit");
    }
  });
});
