/**
 * The request caps: each one accepts a request at the cap and refuses one past it with a 400
 * naming the field, and counts are checked before the items are read.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { chatCompletionRequestSchema, REQUEST_LIMITS } from "./request.ts";
import { InvalidRequestError } from "../errors.ts";
import { parseWithSchema } from "../parse.ts";

const base = { model: "m", messages: [{ role: "user", content: "Hi" }] };

function parse(body: Record<string, unknown>) {
  return parseWithSchema(chatCompletionRequestSchema, body);
}

function assertRefused(body: Record<string, unknown>, param: string, message: RegExp): void {
  assert.throws(
    () => parse(body),
    (error: unknown) => {
      assert.ok(error instanceof InvalidRequestError, String(error));
      assert.equal(error.status, 400);
      assert.equal(error.param, param);
      assert.match(error.message, message);
      return true;
    },
  );
}

const tool = (index: number, fields: Record<string, unknown> = {}) => ({ type: "function", function: { name: `f${index}`, ...fields } });
const call = (id: string, argumentsText = "{}", name = "f") => ({ id, type: "function", function: { name, arguments: argumentsText } });
const assistantWith = (calls: unknown[]) => ({ role: "assistant", content: null, tool_calls: calls });

const kwargsOf = (count: number, length = 1) => Object.fromEntries(Array.from({ length: count }, (_, index) => [`k${index}`, "v".repeat(length)]));
/** `levels` arrays around a number. */
const nested = (levels: number): unknown => (levels === 0 ? 1 : [nested(levels - 1)]);

type Cap = [what: string, atCap: Record<string, unknown>, pastCap: Record<string, unknown>, param: string, message: RegExp];

const caps: Cap[] = [
  ["messages", { messages: Array.from({ length: REQUEST_LIMITS.messages }, () => ({ role: "user", content: "" })) }, { messages: Array.from({ length: REQUEST_LIMITS.messages + 1 }, () => ({ role: "user", content: "" })) }, "messages", /at most 2048 items/],
  ["content parts", { messages: [{ role: "user", content: Array.from({ length: REQUEST_LIMITS.contentParts }, () => ({ type: "text", text: "" })) }] }, { messages: [{ role: "user", content: Array.from({ length: REQUEST_LIMITS.contentParts + 1 }, () => ({ type: "text", text: "" })) }] }, "messages[0].content", /up to 256/],
  ["tools", { tools: Array.from({ length: REQUEST_LIMITS.tools }, (_, index) => tool(index)) }, { tools: Array.from({ length: REQUEST_LIMITS.tools + 1 }, (_, index) => tool(index)) }, "tools", /at most 128 items/],
  ["a tool description", { tools: [tool(0, { description: "d".repeat(REQUEST_LIMITS.toolDescription) })] }, { tools: [tool(0, { description: "d".repeat(REQUEST_LIMITS.toolDescription + 1) })] }, "tools[0].function.description", /at most 16384 characters/],
  ["tool parameters", { tools: [tool(0, { parameters: { type: "object", description: "d".repeat(REQUEST_LIMITS.schemaBytes - 40) } })] }, { tools: [tool(0, { parameters: { type: "object", description: "d".repeat(REQUEST_LIMITS.schemaBytes) } })] }, "tools[0].function.parameters", /at most 65536 bytes/],
  ["a response format schema", { response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", description: "d".repeat(1000) } } } }, { response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", description: "d".repeat(REQUEST_LIMITS.schemaBytes) } } } }, "response_format.json_schema.schema", /at most 65536 bytes/],
  ["tool calls", { messages: [assistantWith(Array.from({ length: REQUEST_LIMITS.toolCalls }, (_, index) => call(`c${index}`)))] }, { messages: [assistantWith(Array.from({ length: REQUEST_LIMITS.toolCalls + 1 }, (_, index) => call(`c${index}`)))] }, "messages[0].tool_calls", /at most 128 items/],
  ["tool call arguments", { messages: [assistantWith([call("c", `"${"a".repeat(REQUEST_LIMITS.toolCallArguments - 2)}"`)])] }, { messages: [assistantWith([call("c", `"${"a".repeat(REQUEST_LIMITS.toolCallArguments)}"`)])] }, "messages[0].tool_calls[0].function.arguments", /at most 262144 characters/],
  ["a tool call id", { messages: [assistantWith([call("i".repeat(REQUEST_LIMITS.name))])] }, { messages: [assistantWith([call("i".repeat(REQUEST_LIMITS.name + 1))])] }, "messages[0].tool_calls[0].id", /at most 256 characters/],
  ["a called function's name", { messages: [assistantWith([call("c", "{}", "n".repeat(REQUEST_LIMITS.name))])] }, { messages: [assistantWith([call("c", "{}", "n".repeat(REQUEST_LIMITS.name + 1))])] }, "messages[0].tool_calls[0].function.name", /at most 256 characters/],
  // A tool message answers an earlier call (a check of the schema's): the call comes first.
  ["a tool_call_id", { messages: [assistantWith([call("t".repeat(REQUEST_LIMITS.name))]), { role: "tool", content: "x", tool_call_id: "t".repeat(REQUEST_LIMITS.name) }] }, { messages: [assistantWith([call("t")]), { role: "tool", content: "x", tool_call_id: "t".repeat(REQUEST_LIMITS.name + 1) }] }, "messages[1].tool_call_id", /at most 256 characters/],
  ["a message name", { messages: [{ role: "user", content: "x", name: "n".repeat(REQUEST_LIMITS.name) }] }, { messages: [{ role: "user", content: "x", name: "n".repeat(REQUEST_LIMITS.name + 1) }] }, "messages[0].name", /at most 256 characters/],
  ["the model id", { model: "m".repeat(REQUEST_LIMITS.name) }, { model: "m".repeat(REQUEST_LIMITS.name + 1) }, "model", /at most 256 characters/],
  // A tool choice names one of `tools` (a check of the schema's), whose names are 64 characters at most.
  ["tool_choice's function name", { tools: [tool(0, { name: "n".repeat(64) })], tool_choice: { type: "function", function: { name: "n".repeat(64) } } }, { tool_choice: { type: "function", function: { name: "n".repeat(REQUEST_LIMITS.name + 1) } } }, "tool_choice.function.name", /at most 256 characters/],
  ["a stop sequence", { stop: ["s".repeat(REQUEST_LIMITS.stopLength)] }, { stop: ["s".repeat(REQUEST_LIMITS.stopLength + 1)] }, "stop[0]", /at most 1024 characters/],
  ["stop sequences", { stop: ["a", "b", "c", "d"] }, { stop: ["a", "b", "c", "d", "e"] }, "stop", /up to 4 strings/],
  ["logit_bias", { logit_bias: Object.fromEntries(Array.from({ length: REQUEST_LIMITS.logitBias }, (_, index) => [String(index), 1])) }, { logit_bias: Object.fromEntries(Array.from({ length: REQUEST_LIMITS.logitBias + 1 }, (_, index) => [String(index), 1])) }, "logit_bias", /at most 300 entries/],
  ["chat_template_kwargs entries", { chat_template_kwargs: kwargsOf(REQUEST_LIMITS.vendorEntries) }, { chat_template_kwargs: kwargsOf(REQUEST_LIMITS.vendorEntries + 1) }, "chat_template_kwargs", /at most 64 entries/],
  ["chat_template_kwargs nesting", { chat_template_kwargs: { x: nested(REQUEST_LIMITS.vendorDepth - 1) } }, { chat_template_kwargs: { x: nested(REQUEST_LIMITS.vendorDepth) } }, "chat_template_kwargs.x[0][0][0][0][0][0][0]", /at most 8 levels/],
  ["a chat_template_kwargs string", { chat_template_kwargs: { x: "s".repeat(REQUEST_LIMITS.vendorString) } }, { chat_template_kwargs: { x: "s".repeat(REQUEST_LIMITS.vendorString + 1) } }, "chat_template_kwargs.x", /at most 16384 characters/],
  // 2 + 4 commas + 4 × ("k0":"…16000…") + ("p":"…M…") = 40 + 4 × 16000 + M bytes.
  ["chat_template_kwargs bytes", { chat_template_kwargs: { ...kwargsOf(4, 16_000), p: "p".repeat(1496) } }, { chat_template_kwargs: { ...kwargsOf(4, 16_000), p: "p".repeat(1497) } }, "chat_template_kwargs", /at most 65536 bytes/],
  ["a chat_template_kwargs key that shadows a request field", { chat_template_kwargs: { enable_thinking: false } }, { chat_template_kwargs: { messages: [] } }, "chat_template_kwargs.messages", /shadow the request's own 'messages'/],
  ["a chat_template_kwargs key the upstream sets", { chat_template_kwargs: { thinking: true } }, { chat_template_kwargs: { chat_template: "{{ x }}" } }, "chat_template_kwargs.chat_template", /the upstream sets 'chat_template'/],
  ["max_tokens", { max_tokens: REQUEST_LIMITS.completionTokens }, { max_tokens: REQUEST_LIMITS.completionTokens + 1 }, "max_tokens", /at most 1048576/],
  ["n × max_completion_tokens", { n: 8, max_completion_tokens: REQUEST_LIMITS.completionTokens / 8 }, { n: 8, max_completion_tokens: REQUEST_LIMITS.completionTokens / 8 + 1 }, "max_completion_tokens", /'n' × 'max_completion_tokens' must be at most 1048576 tokens, got 8 × 131073/],
];

describe("request caps", () => {
  for (const [what, atCap, pastCap, param, message] of caps) {
    it(`accepts ${what} at the cap and refuses one more, naming '${param}'`, () => {
      parse({ ...base, ...atCap });
      assertRefused({ ...base, ...pastCap }, param, message);
    });
  }

  it("takes the smaller of max_tokens and max_completion_tokens for n × max_tokens", () => {
    parse({ ...base, n: 8, max_tokens: REQUEST_LIMITS.completionTokens, max_completion_tokens: 1000 });
    assertRefused({ ...base, n: 2, max_tokens: REQUEST_LIMITS.completionTokens, max_completion_tokens: REQUEST_LIMITS.completionTokens }, "max_completion_tokens", /'n' ×/);
  });

  it("refuses a schema too deeply nested to write back as JSON, instead of failing later", () => {
    let deep: unknown = {};
    for (let level = 0; level < 100_000; level++) deep = { a: deep };
    assertRefused({ ...base, tools: [tool(0, { parameters: deep as Record<string, unknown> })] }, "tools[0].function.parameters", /at most 65536 bytes/);
  });

  it("counts huge lists before reading their items (issue 9 row 2)", () => {
    // Items that count their reads: a list refused by its length must have none.
    let reads = 0;
    const counted = <T extends object>(value: T, field: keyof T) =>
      Object.defineProperty({ ...value }, field, { enumerable: true, get: () => (reads++, value[field]) });
    const bodies: Array<[Record<string, unknown>, string]> = [
      [{ ...base, messages: Array.from({ length: 300_000 }, () => counted({ role: "user", content: "" }, "role")) }, "messages"],
      [{ ...base, tools: Array.from({ length: 10_000 }, (_, index) => counted(tool(index, { parameters: { type: "object" } }), "type")) }, "tools"],
      [{ ...base, logit_bias: Object.fromEntries(Array.from({ length: 200_000 }, (_, index) => [String(index), 1])) }, "logit_bias"],
    ];
    for (const [body, param] of bodies) {
      assert.throws(() => parse(body), (error: unknown) => error instanceof InvalidRequestError && error.param === param && /at most/.test(error.message));
    }
    assert.equal(reads, 0, "no item of a list over its cap was read");
  });
});
