/**
 * From a parsed Responses request (and the stored items of earlier responses) to the generation
 * request engines see, and the request's items as stored.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ApiError } from "../errors.ts";
import { parseWithSchema } from "../parse.ts";
import { responsesRequestSchema, type ResponsesRequest } from "./request.ts";
import { functionCallItem, outputMessage, reasoningItem } from "./resource.ts";
import { droppableItems, itemsOf, responsesParamOf, toGenerationRequest, type ConversationItem } from "./to-generation.ts";

const TEXT_ONLY = { images: false };
const VISION = { images: true };

function parse(body: Record<string, unknown>): ResponsesRequest {
  return parseWithSchema(responsesRequestSchema, { model: "tiny", ...body });
}

/** Asserts the mapping throws an ApiError with this status, code and param. */
function assertRefused(run: () => unknown, param: string, code: string, message?: RegExp): void {
  let caught: unknown;
  try {
    run();
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof ApiError, `expected an ApiError, got ${String(caught)}`);
  assert.equal(caught.status, 400);
  assert.equal(caught.param, param, caught.message);
  assert.equal(caught.code, code);
  if (message !== undefined) assert.match(caught.message, message);
}

const PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg==";

describe("toGenerationRequest: the prompt", () => {
  it("makes a string input one user message after the instructions, with OpenAI's defaults", () => {
    const request = toGenerationRequest(parse({ input: "Hi", instructions: "Be brief." }), TEXT_ONLY);
    assert.deepEqual(request, {
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "Hi" },
      ],
      sampling: { temperature: 1, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: [] },
      choices: 1,
    });
  });

  it("maps roles: developer and system become system, parts flatten to text", () => {
    const request = toGenerationRequest(
      parse({
        input: [
          { role: "developer", content: "Rules." },
          { type: "message", role: "system", content: [{ type: "input_text", text: "More " }, { type: "input_text", text: "rules." }] },
          { role: "user", content: "Q" },
          { role: "assistant", content: [{ type: "output_text", text: "A" }, { type: "refusal", refusal: "!" }] },
        ],
      }),
      TEXT_ONLY,
    );
    assert.deepEqual(request.messages, [
      { role: "system", content: "Rules." },
      { role: "system", content: "More rules." },
      { role: "user", content: "Q" },
      { role: "assistant", content: "A!" },
    ]);
  });

  it("makes function calls the assistant's tool calls and their outputs tool messages", () => {
    const request = toGenerationRequest(
      parse({
        input: [
          { role: "user", content: "Weather in Paris and Rome?" },
          { type: "reasoning", summary: [], content: [{ type: "reasoning_text", text: "two calls" }] },
          { type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' },
          { type: "function_call", call_id: "call_2", name: "get_weather", arguments: '{"city":"Rome"}' },
          { type: "function_call_output", call_id: "call_1", output: "18C" },
          { type: "function_call_output", call_id: "call_2", output: [{ type: "input_text", text: "2" }, { type: "input_text", text: "1C" }] },
        ],
      }),
      TEXT_ONLY,
    );
    assert.deepEqual(request.messages, [
      { role: "user", content: "Weather in Paris and Rome?" },
      {
        role: "assistant",
        content: "",
        toolCalls: [
          { id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' },
          { id: "call_2", name: "get_weather", arguments: '{"city":"Rome"}' },
        ],
      },
      { role: "tool", content: "18C", toolCallId: "call_1" },
      { role: "tool", content: "21C", toolCallId: "call_2" },
    ]);
  });

  it("joins a call to the assistant text just before it", () => {
    const request = toGenerationRequest(
      parse({
        input: [
          { role: "user", content: "Patch it" },
          { role: "assistant", content: "Patching." },
          { type: "custom_tool_call", call_id: "call_9", name: "apply_patch", input: "*** Begin Patch\n*** End Patch" },
          { type: "custom_tool_call_output", call_id: "call_9", output: "Done" },
        ],
      }),
      TEXT_ONLY,
    );
    assert.deepEqual(request.messages.slice(1), [
      { role: "assistant", content: "Patching.", toolCalls: [{ id: "call_9", name: "apply_patch", arguments: "*** Begin Patch\n*** End Patch" }] },
      { role: "tool", content: "Done", toolCallId: "call_9" },
    ]);
  });

  it("refuses an output that answers no earlier call, naming its call_id", () => {
    const body = parse({ input: [{ role: "user", content: "x" }, { type: "function_call_output", call_id: "call_404", output: "?" }] });
    assertRefused(() => toGenerationRequest(body, TEXT_ONLY), "input[1].call_id", "invalid_request_error", /call_404/);
    const custom = parse({ input: [{ role: "user", content: "x" }, { type: "custom_tool_call_output", call_id: "c", output: "?" }] });
    assertRefused(() => toGenerationRequest(custom, TEXT_ONLY), "input[1].call_id", "invalid_request_error");
  });

  it("refuses an output that comes before its call", () => {
    const body = parse({ input: [{ type: "function_call_output", call_id: "c", output: "?" }, { type: "function_call", call_id: "c", name: "f", arguments: "{}" }] });
    assertRefused(() => toGenerationRequest(body, TEXT_ONLY), "input[0].call_id", "invalid_request_error");
  });

  it("refuses images to a text-only model, naming the part", () => {
    const body = parse({ input: [{ role: "user", content: [{ type: "input_text", text: "What is it?" }, { type: "input_image", image_url: PNG }] }] });
    assertRefused(() => toGenerationRequest(body, TEXT_ONLY), "input[0].content[1]", "model_does_not_support_images");
  });

  it("keeps images and their place for a vision model", () => {
    const body = parse({ input: [{ role: "user", content: [{ type: "input_text", text: "What is it?" }, { type: "input_image", image_url: PNG, detail: "low" }] }] });
    const image = { url: PNG, detail: "low" as const };
    assert.deepEqual(toGenerationRequest(body, VISION).messages, [
      { role: "user", content: "What is it?", images: [image], parts: [{ type: "text", text: "What is it?" }, { type: "image", image }] },
    ]);
  });

  it("refuses malformed images, images by file id, and files", () => {
    const bad = parse({ input: [{ role: "user", content: [{ type: "input_image", image_url: "data:image/png;base64,AAAA" }] }] });
    assertRefused(() => toGenerationRequest(bad, VISION), "input[0].content[0].image_url", "invalid_image_url");
    const byId = parse({ input: [{ role: "user", content: [{ type: "input_image", file_id: "file_1" }] }] });
    assertRefused(() => toGenerationRequest(byId, VISION), "input[0].content[0].file_id", "unsupported_parameter", /Files API/);
    const file = parse({ input: [{ role: "user", content: [{ type: "input_file", file_url: "https://example.com/a.pdf" }] }] });
    assertRefused(() => toGenerationRequest(file, VISION), "input[0].content[0]", "unsupported_parameter");
  });

  it("refuses images inside a tool call's output, naming the part", () => {
    const body = parse({
      input: [
        { type: "function_call", call_id: "c", name: "f", arguments: "{}" },
        { type: "function_call_output", call_id: "c", output: [{ type: "input_text", text: "see" }, { type: "input_image", image_url: PNG }] },
      ],
    });
    assertRefused(() => toGenerationRequest(body, VISION), "input[1].output[1]", "unsupported_parameter");
  });

  it("refuses 'conversation' and 'prompt', naming them", () => {
    assertRefused(() => toGenerationRequest(parse({ input: "x", conversation: "conv_1" }), TEXT_ONLY), "conversation", "unsupported_parameter");
    assertRefused(() => toGenerationRequest(parse({ input: "x", prompt: { id: "pmpt_1" } }), TEXT_ONLY), "prompt", "unsupported_parameter");
  });

  it("refuses a request with nothing for the model to answer", () => {
    assertRefused(() => toGenerationRequest(parse({ input: [], instructions: "Rules only." }), TEXT_ONLY), "input", "invalid_request_error");
  });
});

describe("toGenerationRequest: continuing a stored conversation", () => {
  const history: ConversationItem[] = [
    { type: "message", id: "msg_u1", role: "user", content: [{ type: "input_text", text: "Weather in Paris?" }], status: "completed" },
    reasoningItem("rs_1", "Call the tool.", "completed"),
    functionCallItem("fc_1", "call_1", "get_weather", '{"city":"Paris"}', "completed"),
  ];

  it("puts the stored items before the input, and lets the input answer their calls", () => {
    const request = toGenerationRequest(parse({ previous_response_id: "resp_1", input: [{ type: "function_call_output", call_id: "call_1", output: "18C" }], instructions: "New rules." }), TEXT_ONLY, history);
    assert.deepEqual(request.messages, [
      { role: "system", content: "New rules." },
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "", toolCalls: [{ id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' }] },
      { role: "tool", content: "18C", toolCallId: "call_1" },
    ]);
  });

  it("continues with no new input", () => {
    const request = toGenerationRequest(parse({ previous_response_id: "resp_1" }), TEXT_ONLY, [...history.slice(0, 1), outputMessage("msg_a", "Sunny.", "completed")]);
    assert.deepEqual(request.messages, [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "Sunny." },
    ]);
  });

  it("resolves item references to stored items, and refuses unknown ones naming the id", () => {
    const request = toGenerationRequest(parse({ previous_response_id: "resp_1", input: [{ type: "item_reference", id: "msg_u1" }] }), TEXT_ONLY, history.slice(0, 1));
    assert.deepEqual(request.messages, [
      { role: "user", content: "Weather in Paris?" },
      { role: "user", content: "Weather in Paris?" },
    ]);
    assertRefused(() => toGenerationRequest(parse({ input: [{ id: "msg_nope" }] }), TEXT_ONLY, history), "input[0].id", "invalid_request_error", /msg_nope/);
  });

  it("names previous_response_id when a stored item cannot be used with this model", () => {
    const withImage: ConversationItem[] = [{ type: "message", id: "msg_1", role: "user", content: [{ type: "input_image", image_url: PNG }], status: "completed" }];
    assertRefused(() => toGenerationRequest(parse({ previous_response_id: "resp_1", input: "and now?" }), TEXT_ONLY, withImage), "previous_response_id", "model_does_not_support_images");
  });
});

describe("toGenerationRequest: tools, formats and sampling", () => {
  const weather = { type: "function", name: "get_weather", description: "Weather", parameters: { type: "object" }, strict: true };
  const patch = { type: "custom", name: "apply_patch", format: { type: "grammar", syntax: "lark", definition: "start: /.+/" } };
  const freeform = { type: "custom", name: "note", description: "Free text" };

  it("maps function tools, and custom tools with their format (text when none is given)", () => {
    const request = toGenerationRequest(parse({ input: "x", tools: [weather, patch, freeform], parallel_tool_calls: false }), TEXT_ONLY);
    assert.deepEqual(request.tools, [
      { name: "get_weather", description: "Weather", parameters: { type: "object" }, strict: true },
      { name: "apply_patch", custom: { format: { type: "grammar", syntax: "lark", definition: "start: /.+/" } } },
      { name: "note", description: "Free text", custom: { format: { type: "text" } } },
    ]);
    assert.equal(request.toolChoice, undefined);
    assert.equal(request.parallelToolCalls, false);
  });

  it("maps each tool choice", () => {
    const tools = [weather, patch];
    assert.equal(toGenerationRequest(parse({ input: "x", tools, tool_choice: "required" }), TEXT_ONLY).toolChoice, "required");
    assert.equal(toGenerationRequest(parse({ input: "x", tools, tool_choice: "none" }), TEXT_ONLY).toolChoice, "none");
    assert.deepEqual(toGenerationRequest(parse({ input: "x", tools, tool_choice: { type: "function", name: "get_weather" } }), TEXT_ONLY).toolChoice, { name: "get_weather" });
    assert.deepEqual(toGenerationRequest(parse({ input: "x", tools, tool_choice: { type: "custom", name: "apply_patch" } }), TEXT_ONLY).toolChoice, { name: "apply_patch" });
  });

  it("enforces allowed_tools by offering only the allowed tools, with its mode", () => {
    const request = toGenerationRequest(parse({ input: "x", tools: [weather, patch], tool_choice: { type: "allowed_tools", mode: "required", tools: [{ type: "custom", name: "apply_patch" }] } }), TEXT_ONLY);
    assert.deepEqual(request.tools?.map((tool) => tool.name), ["apply_patch"]);
    assert.equal(request.toolChoice, "required");
    const auto = toGenerationRequest(parse({ input: "x", tools: [weather, patch], tool_choice: { type: "allowed_tools", tools: [{ type: "function", name: "get_weather" }] } }), TEXT_ONLY);
    assert.equal(auto.toolChoice, "auto");
  });

  it("maps text formats to response formats", () => {
    assert.equal(toGenerationRequest(parse({ input: "x", text: { format: { type: "text" }, verbosity: "low" } }), TEXT_ONLY).responseFormat, undefined);
    assert.deepEqual(toGenerationRequest(parse({ input: "x", text: { format: { type: "json_object" } } }), TEXT_ONLY).responseFormat, { type: "json_object" });
    assert.deepEqual(toGenerationRequest(parse({ input: "x", text: { format: { type: "json_schema", name: "a", schema: { type: "object" }, strict: true } } }), TEXT_ONLY).responseFormat, {
      type: "json_schema",
      name: "a",
      schema: { type: "object" },
      strict: true,
    });
  });

  it("maps the sampling fields, max_output_tokens and reasoning effort", () => {
    const request = toGenerationRequest(parse({ input: "x", temperature: 0, top_p: 0.5, presence_penalty: 1, frequency_penalty: -1, max_output_tokens: 64, reasoning: { effort: "low" } }), TEXT_ONLY);
    assert.deepEqual(request.sampling, { temperature: 0, topP: 0.5, frequencyPenalty: -1, presencePenalty: 1, stop: [] });
    assert.equal(request.maxTokens, 64);
    assert.deepEqual(request.vendor, { reasoning_effort: "low" });
    assert.equal(request.choices, 1);
  });

  it("passes no reasoning effort when none is given", () => {
    assert.equal(toGenerationRequest(parse({ input: "x", reasoning: { summary: "auto" } }), TEXT_ONLY).vendor, undefined);
  });

  it("asks for log probabilities when included or when top_logprobs is set", () => {
    assert.equal(toGenerationRequest(parse({ input: "x" }), TEXT_ONLY).logprobs, undefined);
    assert.equal(toGenerationRequest(parse({ input: "x", top_logprobs: 0 }), TEXT_ONLY).logprobs, undefined);
    assert.deepEqual(toGenerationRequest(parse({ input: "x", include: ["message.output_text.logprobs"] }), TEXT_ONLY).logprobs, { top: 0 });
    assert.deepEqual(toGenerationRequest(parse({ input: "x", top_logprobs: 3 }), TEXT_ONLY).logprobs, { top: 3 });
    assert.equal(toGenerationRequest(parse({ input: "x", include: ["reasoning.encrypted_content"] }), TEXT_ONLY).logprobs, undefined);
  });
});

describe("itemsOf", () => {
  it("stores a string input as one user message with an input_text part and a msg_ id", () => {
    const [item, ...rest] = itemsOf(parse({ input: "Hi" }));
    assert.equal(rest.length, 0);
    assert.ok(item?.type === "message");
    assert.match(item.id, /^msg_[0-9a-f]{48}$/);
    assert.deepEqual({ ...item, id: "" }, { type: "message", id: "", role: "user", content: [{ type: "input_text", text: "Hi" }], status: "completed" });
  });

  it("keeps the client's ids, gives each other item an id of its type, and makes content parts", () => {
    const items = itemsOf(
      parse({
        input: [
          { role: "assistant", content: "Earlier answer", id: "msg_client" },
          { type: "function_call", call_id: "c1", name: "f", arguments: "{}" },
          { type: "function_call_output", call_id: "c1", output: "ok" },
          { type: "custom_tool_call", call_id: "c2", name: "p", input: "x" },
          { type: "custom_tool_call_output", call_id: "c2", output: "ok" },
          { type: "reasoning", summary: [] },
          { id: "msg_old" },
        ],
      }),
    );
    assert.deepEqual(items[0], { type: "message", id: "msg_client", role: "assistant", content: [{ type: "output_text", text: "Earlier answer", annotations: [] }], status: "completed" });
    assert.deepEqual(
      items.map((item) => item.id.replace(/_[0-9a-f]{48}$/, "_…")),
      ["msg_client", "fc_…", "fco_…", "ctc_…", "ctco_…", "rs_…", "msg_old"],
    );
    assert.deepEqual(items[6], { type: "item_reference", id: "msg_old" });
    assert.equal(new Set(items.map((item) => item.id)).size, items.length);
  });

  it("stores nothing when there is no input", () => {
    assert.deepEqual(itemsOf(parse({ previous_response_id: "resp_1" })), []);
  });
});

describe("truncation: auto (dropping the conversation's oldest items)", () => {
  const history: ConversationItem[] = [
    { type: "message", id: "msg_1", role: "user", content: [{ type: "input_text", text: "Old question" }], status: "completed" },
    functionCallItem("fc_1", "call_1", "look", "{}", "completed"),
    { type: "function_call_output", id: "fco_1", call_id: "call_1", output: "found", status: "completed" },
    outputMessage("msg_2", "Old answer", "completed"),
  ];

  it("may drop every item before the last user message, history first", () => {
    assert.equal(droppableItems(parse({ input: "Now" }), history), 4);
    assert.equal(droppableItems(parse({ input: [{ role: "assistant", content: "x" }, { role: "user", content: "Now" }, { role: "assistant", content: "y" }] }), history), 5);
    assert.equal(droppableItems(parse({ input: [{ role: "user", content: "Only" }] })), 0);
  });

  it("leaves out the first items, keeping the instructions, and an output whose call was dropped goes with it", () => {
    const request = parse({ instructions: "Be brief.", input: "Now" });
    const whole = toGenerationRequest(request, TEXT_ONLY, history);
    assert.equal(whole.messages.length, 6);
    const two = toGenerationRequest(request, TEXT_ONLY, history, { dropItems: 2 });
    // The call was dropped: its output is not sent alone.
    assert.deepEqual(two.messages, [
      { role: "system", content: "Be brief." },
      { role: "assistant", content: "Old answer" },
      { role: "user", content: "Now" },
    ]);
    const all = toGenerationRequest(request, TEXT_ONLY, history, { dropItems: 4 });
    assert.deepEqual(all.messages, [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Now" },
    ]);
  });

  it("still refuses an output that answers no call at all", () => {
    const request = parse({ input: [{ type: "function_call_output", call_id: "call_404", output: "x" }, { role: "user", content: "Now" }] });
    assertRefused(() => toGenerationRequest(request, TEXT_ONLY, history, { dropItems: 1 }), "input[0].call_id", "invalid_request_error");
  });
});

describe("responsesParamOf: engine errors in the Responses API's spelling", () => {
  it("renames chat completions' fields, prefix by prefix", () => {
    assert.equal(responsesParamOf("response_format.json_schema.schema.properties.age.minimum"), "text.format.schema.properties.age.minimum");
    assert.equal(responsesParamOf("response_format"), "text.format");
    assert.equal(responsesParamOf("tools[3].function.parameters.properties.a"), "tools[3].parameters.properties.a");
    assert.equal(responsesParamOf("tool_choice.function.name"), "tool_choice.name");
    assert.equal(responsesParamOf("max_tokens"), "max_output_tokens");
    assert.equal(responsesParamOf("messages"), "input");
    assert.equal(responsesParamOf("messages[2].content"), "input");
    assert.equal(responsesParamOf("top_p"), "top_p");
    assert.equal(responsesParamOf("messagesx"), "messagesx");
  });
});
