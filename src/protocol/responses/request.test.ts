/**
 * The `POST /v1/responses` body schema through parseWithSchema: what it accepts (including the
 * shapes the SDKs and Codex send), and every refusal as a 400 whose `param` names the field.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { InvalidRequestError } from "../errors.ts";
import { parseWithSchema } from "../parse.ts";
import { IGNORED_INCLUDE_VALUES, KNOWN_INCLUDE_VALUES, RESPONSES_LIMITS, responsesRequestSchema, type ResponsesRequest } from "./request.ts";

const base = { model: "tiny", input: "Hi" };

function parse(body: unknown): ResponsesRequest {
  return parseWithSchema(responsesRequestSchema, body);
}

/** Asserts a 400 InvalidRequestError with `param`, whose message names the param. */
function assertRefused(body: unknown, param: string | null, message?: RegExp): void {
  let caught: unknown;
  try {
    parse(body);
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof InvalidRequestError, `expected an InvalidRequestError, got ${String(caught)}`);
  assert.equal(caught.status, 400);
  assert.equal(caught.param, param, caught.message);
  if (param !== null) assert.ok(caught.message.includes(`'${param}'`), `${JSON.stringify(caught.message)} names ${param}`);
  if (message !== undefined) assert.match(caught.message, message);
}

const weatherTool = { type: "function", name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } };
const patchTool = { type: "custom", name: "apply_patch", description: "Edit files", format: { type: "grammar", syntax: "lark", definition: 'start: "*** Begin Patch" LF\n%import common.LF' } };

describe("the responses request: what it accepts", () => {
  it("accepts a string input and keeps it a string", () => {
    assert.deepEqual(parse(base), { model: "tiny", input: "Hi" });
  });

  it("gives messages sent without 'type' (the SDKs' easy form) the type 'message'", () => {
    const request = parse({ model: "tiny", input: [{ role: "user", content: "Hi" }, { role: "assistant", content: [{ type: "output_text", text: "Hello", annotations: [] }] }] });
    assert.deepEqual(request.input, [
      { type: "message", role: "user", content: "Hi" },
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "Hello", annotations: [] }] },
    ]);
  });

  it("gives an item sent as just {id} the type 'item_reference'", () => {
    assert.deepEqual(parse({ model: "tiny", input: [{ id: "msg_1" }] }).input, [{ type: "item_reference", id: "msg_1" }]);
  });

  it("accepts every item type of a tool-calling conversation, as Codex replays it", () => {
    const request = parse({
      model: "tiny",
      instructions: "You are a coding agent.",
      input: [
        { type: "message", role: "developer", content: [{ type: "input_text", text: "Be brief." }] },
        { type: "message", role: "user", content: [{ type: "input_text", text: "Fix it" }, { type: "input_image", image_url: "https://example.com/a.png", detail: "low" }] },
        { type: "reasoning", id: "rs_1", summary: [{ type: "summary_text", text: "Thinking" }], content: [{ type: "reasoning_text", text: "..." }], encrypted_content: null },
        { type: "function_call", id: "fc_1", call_id: "call_1", name: "shell", arguments: '{"cmd":["ls"]}', status: "completed" },
        { type: "function_call_output", call_id: "call_1", output: "a.txt" },
        { type: "custom_tool_call", call_id: "call_2", name: "apply_patch", input: "*** Begin Patch\n" },
        { type: "custom_tool_call_output", call_id: "call_2", output: [{ type: "input_text", text: "done" }] },
        { type: "message", role: "assistant", content: [{ type: "refusal", refusal: "No." }], phase: "final_answer" },
      ],
      tools: [{ type: "function", name: "shell", parameters: { type: "object" }, strict: false }, patchTool],
      tool_choice: "auto",
      parallel_tool_calls: false,
      reasoning: { effort: "high", summary: "auto" },
      store: false,
      stream: true,
      include: ["reasoning.encrypted_content"],
      prompt_cache_key: "0b8e7e0c-6a6a-4a56-9d5b-1d5c1c1a3e11",
      text: { verbosity: "low" },
    });
    assert.equal(Array.isArray(request.input) && request.input.length, 8);
    assert.equal(request.tools?.[1]?.type, "custom");
  });

  it("accepts every text format and sampling bound at its edge", () => {
    const request = parse({
      ...base,
      text: { format: { type: "json_schema", name: "answer", schema: { type: "object" }, strict: true } },
      temperature: 2,
      top_p: 0,
      top_logprobs: 20,
      max_output_tokens: 16,
      max_tool_calls: 1,
      truncation: "auto",
      metadata: Object.fromEntries(Array.from({ length: 16 }, (_, index) => [`k${index}`.padEnd(64, "x"), "v".repeat(512)])),
      service_tier: "auto",
      background: true,
      store: true,
    });
    assert.equal(request.text?.format?.type, "json_schema");
  });

  it("accepts a tool choice naming a function, a custom tool, or an allowed subset", () => {
    const tools = [weatherTool, patchTool];
    assert.deepEqual(parse({ ...base, tools, tool_choice: { type: "function", name: "get_weather" } }).tool_choice, { type: "function", name: "get_weather" });
    assert.deepEqual(parse({ ...base, tools, tool_choice: { type: "custom", name: "apply_patch" } }).tool_choice, { type: "custom", name: "apply_patch" });
    const allowed = { type: "allowed_tools", mode: "required", tools: [{ type: "custom", name: "apply_patch" }] };
    assert.deepEqual(parse({ ...base, tools, tool_choice: allowed }).tool_choice, allowed);
  });

  it("drops fields it does not know", () => {
    assert.deepEqual(parse({ ...base, some_future_field: 1 }), base);
  });

  it("accepts every known include value, and ignores all but the logprobs", () => {
    assert.deepEqual(parse({ ...base, include: [...KNOWN_INCLUDE_VALUES] }).include, [...KNOWN_INCLUDE_VALUES]);
    assert.deepEqual(KNOWN_INCLUDE_VALUES.filter((value) => !IGNORED_INCLUDE_VALUES.has(value)), ["message.output_text.logprobs"]);
  });
});

describe("the responses request: refusals name the field", () => {
  it("refuses a missing model and a missing input", () => {
    assertRefused({ input: "Hi" }, "model");
    assertRefused({ model: "tiny" }, "input", /previous_response_id/);
  });

  it("accepts no input when a previous response carries the context", () => {
    assert.equal(parse({ model: "tiny", previous_response_id: "resp_1" }).input, undefined);
  });

  it("refuses an input that is neither a string nor an array", () => {
    assertRefused({ model: "tiny", input: 5 }, "input", /string or an array/);
  });

  it("names the part inside an item, not just the input", () => {
    assertRefused({ model: "tiny", input: [{ role: "user", content: "ok" }, { role: "user", content: [{ type: "input_text", text: 3 }] }] }, "input[1].content[0].text");
    assertRefused({ model: "tiny", input: [{ role: "user", content: [{ type: "video" }] }] }, "input[0].content[0].type", /input_text/);
  });

  it("refuses an unknown item type, naming its type", () => {
    assertRefused({ model: "tiny", input: [{ type: "web_search_call", id: "ws_1" }] }, "input[0].type", /'function_call_output'/);
    assertRefused({ model: "tiny", input: ["Hi"] }, "input[0]");
  });

  it("refuses a role the Responses API does not have", () => {
    assertRefused({ model: "tiny", input: [{ role: "tool", content: "x" }] }, "input[0].role");
  });

  it("refuses parts a role may not hold", () => {
    assertRefused({ model: "tiny", input: [{ role: "assistant", content: [{ type: "input_text", text: "x" }] }] }, "input[0].content[0].type", /'assistant' messages/);
    assertRefused({ model: "tiny", input: [{ role: "user", content: [{ type: "output_text", text: "x" }] }] }, "input[0].content[0].type");
  });

  it("refuses an image part with neither or both of image_url and file_id", () => {
    assertRefused({ model: "tiny", input: [{ role: "user", content: [{ type: "input_image", detail: "auto" }] }] }, "input[0].content[0]", /exactly one/);
    assertRefused({ model: "tiny", input: [{ role: "user", content: [{ type: "input_image", image_url: "https://x/a.png", file_id: "file_1" }] }] }, "input[0].content[0]");
  });

  it("refuses function call arguments that are not JSON", () => {
    assertRefused({ model: "tiny", input: [{ type: "function_call", call_id: "c", name: "f", arguments: "{" }] }, "input[0].arguments", /JSON/);
  });

  it("refuses a function call output without a call id", () => {
    assertRefused({ model: "tiny", input: [{ type: "function_call_output", output: "x" }] }, "input[0].call_id");
  });

  it("refuses built-in tools, naming the tool's type", () => {
    assertRefused({ ...base, tools: [weatherTool, { type: "web_search" }] }, "tools[1].type", /'web_search' are not supported/);
    assertRefused({ ...base, tools: [{ name: "f" }] }, "tools[0].type", /needs a 'type'/);
  });

  it("refuses a bad custom tool format", () => {
    assertRefused({ ...base, tools: [{ type: "custom", name: "p", format: { type: "grammar", syntax: "ebnf", definition: "x" } }] }, "tools[0].format.syntax");
    assertRefused({ ...base, tools: [{ type: "custom", name: "p", format: { type: "grammar", syntax: "lark", definition: "" } }] }, "tools[0].format.definition");
    assertRefused({ ...base, tools: [{ type: "custom", name: "p", format: { type: "json" } }] }, "tools[0].format.type");
  });

  it("refuses bad tool names, duplicates and oversized schemas", () => {
    assertRefused({ ...base, tools: [{ type: "function", name: "has space" }] }, "tools[0].name");
    assertRefused({ ...base, tools: [weatherTool, { ...patchTool, name: "get_weather" }] }, "tools[1].name", /twice/);
    const huge = { type: "object", description: "x".repeat(RESPONSES_LIMITS.schemaBytes) };
    assertRefused({ ...base, tools: [{ type: "function", name: "f", parameters: huge }] }, "tools[0].parameters", /bytes/);
  });

  it("refuses more tools than the cap", () => {
    const tools = Array.from({ length: RESPONSES_LIMITS.tools + 1 }, (_, index) => ({ type: "function", name: `f${index}` }));
    assertRefused({ ...base, tools }, "tools");
  });

  it("refuses a tool choice naming a tool not given, or of the other kind", () => {
    assertRefused({ ...base, tools: [weatherTool], tool_choice: { type: "function", name: "nope" } }, "tool_choice.name", /not among 'tools'/);
    assertRefused({ ...base, tools: [weatherTool], tool_choice: { type: "custom", name: "get_weather" } }, "tool_choice.name", /function tool/);
    assertRefused({ ...base, tools: [weatherTool], tool_choice: { type: "allowed_tools", mode: "auto", tools: [{ type: "function", name: "nope" }] } }, "tool_choice.tools[0].name");
    assertRefused({ ...base, tool_choice: { type: "function", name: "get_weather" } }, "tool_choice.name");
  });

  it("refuses tool_choice 'required' without tools, and a malformed choice", () => {
    assertRefused({ ...base, tool_choice: "required" }, "tool_choice", /no tool/);
    assertRefused({ ...base, tools: [weatherTool], tool_choice: "sometimes" }, "tool_choice", /allowed_tools/);
  });

  it("accepts tool_choice 'none' and 'auto' without tools", () => {
    assert.equal(parse({ ...base, tool_choice: "none" }).tool_choice, "none");
    assert.equal(parse({ ...base, tool_choice: "auto" }).tool_choice, "auto");
  });

  it("refuses stream_options without stream", () => {
    assertRefused({ ...base, stream_options: { include_obfuscation: false } }, "stream_options", /'stream' is true/);
    assert.deepEqual(parse({ ...base, stream: true, stream_options: { include_obfuscation: false } }).stream_options, { include_obfuscation: false });
  });

  it("refuses background with store false, as OpenAI does", () => {
    assertRefused({ ...base, background: true, store: false }, "background", /store/);
  });

  it("refuses unknown include values, naming them", () => {
    assertRefused({ ...base, include: ["reasoning.encrypted_content", "output.everything"] }, "include", /"output\.everything"/);
  });

  it("refuses sampling values out of range", () => {
    assertRefused({ ...base, temperature: 2.5 }, "temperature");
    assertRefused({ ...base, top_p: 1.5 }, "top_p");
    assertRefused({ ...base, top_logprobs: 21 }, "top_logprobs");
    assertRefused({ ...base, presence_penalty: -3 }, "presence_penalty");
    assertRefused({ ...base, max_output_tokens: 15 }, "max_output_tokens", /at least 16/);
    assertRefused({ ...base, max_output_tokens: 1.5 }, "max_output_tokens");
    assertRefused({ ...base, max_tool_calls: 0 }, "max_tool_calls");
  });

  it("refuses metadata beyond OpenAI's bounds", () => {
    const seventeen = Object.fromEntries(Array.from({ length: 17 }, (_, index) => [`k${index}`, "v"]));
    assertRefused({ ...base, metadata: seventeen }, "metadata", /16 entries/);
    assertRefused({ ...base, metadata: { ["k".repeat(65)]: "v" } }, `metadata.${"k".repeat(65)}`, /64 characters/);
    assertRefused({ ...base, metadata: { key: "v".repeat(513) } }, "metadata.key", /512 characters/);
    assertRefused({ ...base, metadata: { key: 1 } }, "metadata.key");
  });

  it("refuses identifiers over the spec's 64 characters", () => {
    assertRefused({ ...base, safety_identifier: "x".repeat(65) }, "safety_identifier");
    assertRefused({ ...base, prompt_cache_key: "x".repeat(65) }, "prompt_cache_key");
  });

  it("refuses an input longer than the item cap", () => {
    const input = Array.from({ length: RESPONSES_LIMITS.items + 1 }, () => ({ role: "user", content: "x" }));
    assertRefused({ model: "tiny", input }, "input");
  });

  it("refuses a bad text format", () => {
    assertRefused({ ...base, text: { format: { type: "json_schema", name: "a" } } }, "text.format.schema");
    assertRefused({ ...base, text: { format: { type: "yaml" } } }, "text.format.type");
    assertRefused({ ...base, text: { verbosity: "loud" } }, "text.verbosity");
  });

  it("refuses an unknown truncation or reasoning effort", () => {
    assertRefused({ ...base, truncation: "middle" }, "truncation");
    assertRefused({ ...base, reasoning: { effort: "max" } }, "reasoning.effort");
  });
});
