/**
 * Custom tools' calls read back as text: the `{"input": ...}` arguments decoded as they stream,
 * however they are cut into pieces.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { customCallArguments, CustomCallDecoder, CustomInputDecoder, customToolDescription } from "./custom-tools.ts";

/** Decodes `text` fed in pieces of `size`; checks no piece splits a surrogate pair. */
function decode(text: string, size: number): string {
  const decoder = new CustomInputDecoder();
  let out = "";
  for (let index = 0; index < text.length; index += size) {
    const piece = decoder.push(text.slice(index, index + size));
    if (piece !== "") assert.ok(piece.isWellFormed(), `piece ${JSON.stringify(piece)} is whole characters`);
    out += piece;
  }
  return out + decoder.end();
}

const INPUTS = ['*** Begin Patch\n*** Add File: a.txt\n+he said "hi" \\ there\tok\n*** End Patch', "", "\u0001\u001f😀é\\u0041", '"', "\\"];

describe("CustomInputDecoder", () => {
  for (const size of [1, 2, 3, 7, 1000]) {
    it(`decodes the input string of the arguments, in pieces of ${size}`, () => {
      for (const input of INPUTS) {
        assert.equal(decode(customCallArguments(input), size), input);
        // Other spacing, other keys before and after, escapes a model may choose (\u for any character).
        const spaced = `{ "other" : {"input": "no", "x": [1, "}"]}, "input" :  ${JSON.stringify(input).replace(/😀/g, "\\ud83d\\ude00")} , "after": "x"}`;
        assert.equal(decode(spaced, size), input);
      }
    });
  }

  it("takes an escaped key, and \\/ and upper-case hex", () => {
    assert.equal(decode('{"\\u0069nput": "a\\/b\\u00E9"}', 1), "a/bé");
  });

  it("keeps what was decoded when the arguments are cut off", () => {
    assert.equal(decode('{"input": "abc\\n de\\u00', 4), "abc\n de");
    assert.equal(decode('{"input": "ab\\ud83d', 4), "ab");
  });

  it("takes the whole arguments as the input when they hold no input string", () => {
    assert.equal(decode('"just a string\\n"', 3), "just a string\n");
    assert.equal(decode("plain words", 3), "plain words");
    assert.equal(decode('{"patch": "x"}', 3), '{"patch": "x"}');
    assert.equal(decode("", 3), "");
  });
});

describe("CustomCallDecoder", () => {
  it("rewrites only the custom tools' calls, and flushes before the choice's finish", () => {
    const decoder = new CustomCallDecoder(new Set(["apply_patch"]));
    const parts = [
      { type: "tool-call-start", choice: 0, index: 0, id: "call_a", name: "apply_patch" },
      { type: "tool-call-delta", choice: 0, index: 0, argumentsDelta: '{"input": "a\\' },
      { type: "tool-call-start", choice: 0, index: 1, id: "call_b", name: "get_weather" },
      { type: "tool-call-delta", choice: 0, index: 1, argumentsDelta: '{"city": "Paris"}' },
      { type: "tool-call-delta", choice: 0, index: 0, argumentsDelta: 'n😀"}' },
      { type: "tool-call-start", choice: 0, index: 2, id: "call_c", name: "apply_patch" },
      { type: "tool-call-delta", choice: 0, index: 2, argumentsDelta: "not json" },
      { type: "finish", choice: 0, reason: "tool_calls" },
    ].flatMap((part) => decoder.transform(part));
    assert.deepEqual(parts, [
      { type: "tool-call-start", choice: 0, index: 0, id: "call_a", name: "apply_patch" },
      { type: "tool-call-delta", choice: 0, index: 0, argumentsDelta: "a" },
      { type: "tool-call-start", choice: 0, index: 1, id: "call_b", name: "get_weather" },
      { type: "tool-call-delta", choice: 0, index: 1, argumentsDelta: '{"city": "Paris"}' },
      { type: "tool-call-delta", choice: 0, index: 0, argumentsDelta: "\n😀" },
      { type: "tool-call-start", choice: 0, index: 2, id: "call_c", name: "apply_patch" },
      // Arguments that hold no input string: the whole text is the input, given out at the end.
      { type: "tool-call-delta", choice: 0, index: 2, argumentsDelta: "not json" },
      { type: "finish", choice: 0, reason: "tool_calls" },
    ]);
  });
});

describe("customToolDescription", () => {
  it("adds the grammar to a grammar tool's description", () => {
    const description = customToolDescription({ name: "t", description: "Edits files.", custom: { format: { type: "grammar", syntax: "regex", definition: "[a-z]+" } } });
    assert.equal(description, "Edits files.\n\nThe 'input' must be text matching this regular expression:\n[a-z]+");
    assert.equal(customToolDescription({ name: "t", description: "Free.", custom: { format: { type: "text" } } }), "Free.");
  });
});
