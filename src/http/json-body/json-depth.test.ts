import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { MAX_JSON_DEPTH, nestedDeeperThan } from "./json-depth.ts";

const bytes = (text: string) => Buffer.from(text);
/** How deep arrays and objects nest in a parsed value. */
const depthOf = (value: unknown): number => (typeof value === "object" && value !== null ? 1 + Math.max(0, ...Object.values(value).map(depthOf)) : 0);

describe("the JSON nesting-depth scan", () => {
  it("counts arrays and objects, not brackets inside strings, escaped quotes included", () => {
    assert.equal(nestedDeeperThan(bytes("[[[]]]"), 3), false);
    assert.equal(nestedDeeperThan(bytes("[[[[]]]]"), 3), true);
    assert.equal(nestedDeeperThan(bytes('{"a":{"b":[1]}}'), 2), true);
    assert.equal(nestedDeeperThan(bytes('["[[[[", "\\"[[[[", "\\\\", [[]]]'), 3), false);
    assert.equal(nestedDeeperThan(bytes(`["${"x".repeat(500)}\\"[[[[[", [[[]]]]`), 3), true);
    assert.equal(nestedDeeperThan(bytes("[".repeat(MAX_JSON_DEPTH) + "]".repeat(MAX_JSON_DEPTH))), false);
    assert.equal(nestedDeeperThan(bytes("[".repeat(MAX_JSON_DEPTH + 1))), true);
  });

  it("agrees with JSON.parse on random strings full of quotes, backslashes and brackets", () => {
    const pieces = ['"', "\\", "[", "]", "{", "}", "a", "é", "\u0000"];
    let seed = 7;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let round = 0; round < 2000; round++) {
      const text = Array.from({ length: Math.floor(next() * 300) }, () => pieces[Math.floor(next() * pieces.length)]).join("");
      const value = { short: text, nested: [[{ text }]], long: "x".repeat(Math.floor(next() * 200)) + text };
      const json = JSON.stringify(value);
      const depth = depthOf(value);
      assert.equal(nestedDeeperThan(bytes(json), depth - 1), true, json);
      assert.equal(nestedDeeperThan(bytes(json), depth), false, json);
    }
  });
});
