/**
 * ToolCallParser: splitting a grammar-constrained reply into content and tool-call parts,
 * however the text is cut into deltas.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ReplyPart } from "./reply-plan.ts";
import type { CallSyntax } from "./grammar.ts";
import { ToolCallParser } from "./tool-call-parser.ts";

const generic: CallSyntax = { sectionPrefix: "", prefix: "||call: ", paramsPrefix: () => "(", suffix: ")", betweenCalls: "", sectionSuffix: "" };
const sectioned: CallSyntax = {
  sectionPrefix: "<calls>",
  prefix: '{"name": "',
  paramsPrefix: () => '", "arguments": ',
  suffix: "}",
  betweenCalls: ",",
  sectionSuffix: "</calls>",
};

/** Feeds `text` in pieces of `size` characters and sums up the parts. */
function parse(syntax: CallSyntax, names: string[], mustCall: boolean, text: string, size: number) {
  const parser = new ToolCallParser(syntax, names, mustCall);
  const parts: ReplyPart[] = [];
  for (let index = 0; index < text.length; index += size) parts.push(...parser.push(text.slice(index, index + size)));
  parts.push(...parser.flush());
  let content = "";
  const calls: Array<{ id: string; name: string; arguments: string }> = [];
  for (const part of parts) {
    if (part.type === "text-delta") content += part.text;
    if (part.type === "tool-call-start") {
      assert.equal(part.index, calls.length, "calls are numbered in order");
      assert.match(part.id, /^call_[A-Za-z0-9]{24}$/);
      calls.push({ id: part.id, name: part.name, arguments: "" });
    }
    if (part.type === "tool-call-delta") calls[part.index]!.arguments += part.argumentsDelta;
  }
  return { content, calls: calls.map(({ name, arguments: args }) => ({ name, arguments: args })), count: parser.calls };
}

describe("ToolCallParser", () => {
  for (const size of [1, 3, 1000]) {
    it(`reads one call in the generic syntax (pieces of ${size})`, () => {
      const result = parse(generic, ["get_weather", "get"], true, '||call: get_weather({"city": "Paris (\\"FR\\")", "n": [1, {"a": 2}]})', size);
      assert.deepEqual(result.calls, [{ name: "get_weather", arguments: '{"city": "Paris (\\"FR\\")", "n": [1, {"a": 2}]}' }]);
      assert.equal(result.content, "");
      assert.equal(result.count, 1);
    });

    it(`reads several calls of a section (pieces of ${size})`, () => {
      const text = '<calls>{"name": "a", "arguments": {"x": "}"}},{"name": "b", "arguments": {}}</calls>';
      const result = parse(sectioned, ["a", "b"], true, text, size);
      assert.deepEqual(result.calls, [
        { name: "a", arguments: '{"x": "}"}' },
        { name: "b", arguments: "{}" },
      ]);
    });

    it(`passes content through when an auto reply does not start a call (pieces of ${size})`, () => {
      const result = parse(generic, ["f"], false, "Once upon a time ||call: f({})", size);
      assert.equal(result.content, "Once upon a time ||call: f({})");
      assert.deepEqual(result.calls, []);
    });
  }

  it("reads a call in auto mode when the reply starts with the call syntax", () => {
    const result = parse(generic, ["f"], false, '||call: f({"a": 1})', 2);
    assert.deepEqual(result.calls, [{ name: "f", arguments: '{"a": 1}' }]);
  });

  it("keeps the arguments written so far when the reply is cut off", () => {
    const result = parse(generic, ["f"], true, '||call: f({"a": "unfinish', 4);
    assert.deepEqual(result.calls, [{ name: "f", arguments: '{"a": "unfinish' }]);
  });
});
