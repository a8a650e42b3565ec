/**
 * The embeddings request's `input` in each of its four shapes, and each refusal naming the exact
 * item (`input`, `input[3]`, `input[1][7]`); the inputs as the engines take them; and the vector
 * helpers (base64 bytes, Matryoshka shortening).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { InvalidRequestError } from "../errors.ts";
import { parseWithSchema } from "../parse.ts";
import { embeddingInputsOf, embeddingsRequestSchema, EMBEDDING_LIMITS } from "./request.ts";
import { base64Vector, shortenVector } from "./response.ts";

const parse = (body: Record<string, unknown>) => parseWithSchema(embeddingsRequestSchema, { model: "m", ...body });

function refusal(body: Record<string, unknown>): { param: string | null; message: string } {
  try {
    parse(body);
  } catch (error) {
    assert.ok(error instanceof InvalidRequestError, String(error));
    assert.equal(error.status, 400);
    return { param: error.param, message: error.message };
  }
  assert.fail("accepted");
}

describe("the embeddings request", () => {
  it("takes a string, strings, token ids and token-id arrays, each as the engines' inputs", () => {
    assert.deepEqual(embeddingInputsOf(parse({ input: "hello" }).input), [{ text: "hello" }]);
    assert.deepEqual(embeddingInputsOf(parse({ input: ["a", "b"] }).input), [{ text: "a" }, { text: "b" }]);
    assert.deepEqual(embeddingInputsOf(parse({ input: [1, 2, 3] }).input), [{ tokens: [1, 2, 3] }]);
    assert.deepEqual(embeddingInputsOf(parse({ input: [[1], [2, 3]] }).input), [{ tokens: [1] }, { tokens: [2, 3] }]);
    const full = parse({ input: "x", encoding_format: "base64", dimensions: 8, user: "u", truncate: true, unknown_field: 1 });
    assert.deepEqual({ ...full, input: undefined }, { input: undefined, model: "m", encoding_format: "base64", dimensions: 8, user: "u", truncate: true });
  });

  it("takes the most inputs OpenAI takes, and a token array of any length", () => {
    assert.equal(parse({ input: Array.from({ length: EMBEDDING_LIMITS.inputs }, () => "a") }).input.length, EMBEDDING_LIMITS.inputs);
    assert.equal((parse({ input: Array.from({ length: 5000 }, () => 1) }).input as number[]).length, 5000);
  });

  it("refuses what is wrong naming the exact item", () => {
    const cases: Array<[input: unknown, param: string, message: RegExp]> = [
      [undefined, "input", /required/],
      ["", "input", /must not be empty/],
      [[], "input", /at least one input/],
      [{ text: "a" }, "input", /expected a string, an array of strings/],
      [["a", "", "c"], "input[1]", /must not be empty/],
      [["a", 2], "input[1]", /expected a string/],
      [[1, -1], "input[1]", /token id/],
      [[1, 2.5], "input[1]", /token id/],
      [[[1], []], "input[1]", /at least one token/],
      [[[1], [2, "x"]], "input[1][1]", /token id/],
      [[[1], 2], "input[1]", /expected an array of token ids/],
      [[null], "input[0]", /expected a string, an array of strings/],
      [Array.from({ length: EMBEDDING_LIMITS.inputs + 1 }, () => "a"), "input", /at most 2048 inputs/],
    ];
    for (const [input, param, message] of cases) {
      const refused = refusal({ input });
      assert.equal(refused.param, param, JSON.stringify(input)?.slice(0, 40));
      assert.match(refused.message, message);
    }
    assert.equal(refusal({ input: "x", dimensions: 0 }).param, "dimensions");
    assert.equal(refusal({ input: "x", encoding_format: "int8" }).param, "encoding_format");
  });
});

describe("vectors on the wire", () => {
  it("writes base64 as little-endian float32 bytes", () => {
    const vector = Float32Array.from([1, -0.5, 0.25]);
    const bytes = Buffer.from(base64Vector(vector), "base64");
    assert.deepEqual([bytes.readFloatLE(0), bytes.readFloatLE(4), bytes.readFloatLE(8)], [1, -0.5, 0.25]);
  });

  it("shortens a vector to its first components at unit length, and leaves the full length as it is", () => {
    const vector = Float32Array.from([0.6, 0.8, 0, 0]);
    assert.equal(shortenVector(vector, 4), vector);
    assert.deepEqual(Array.from(shortenVector(Float32Array.from([3, 4, 12]), 2)), [Math.fround(0.6), Math.fround(0.8)]);
  });
});
