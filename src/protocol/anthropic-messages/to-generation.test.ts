/**
 * From a Messages API body to the generation request engines see: the schema's refusals, the
 * conversation's blocks as messages, tools and tool choices, `max_tokens` as a ceiling, and the
 * vendor fields (`top_k`, thinking) only where the model takes them.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ApiError } from "../errors.ts";
import { parseWithSchema } from "../parse.ts";
import { anthropicErrorOf } from "./errors.ts";
import { countTokensRequestSchema, messagesRequestSchema, type MessagesRequest } from "./request.ts";
import { cachedPrefixOf, effortOfBudget, imageUrlsOf, toGenerationRequest } from "./to-generation.ts";

const TEXT_ONLY = { images: false, vendorFields: [] };
const VISION = { images: true, vendorFields: [] };
const REASONING = { images: false, vendorFields: ["reasoning_effort", "top_k"] };
const PNG_DATA = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg==";

function parse(body: Record<string, unknown>): MessagesRequest {
  return parseWithSchema(messagesRequestSchema, { model: "tiny", max_tokens: 100, ...body });
}

/** The ApiError `run` throws. */
function refusal(run: () => unknown): ApiError {
  try {
    run();
  } catch (error) {
    assert.ok(error instanceof ApiError, String(error));
    return error;
  }
  assert.fail("expected a refusal");
}

const weather = { name: "get_weather", description: "The weather", input_schema: { type: "object", properties: { city: { type: "string" } } }, cache_control: { type: "ephemeral" } };

describe("the Messages request schema", () => {
  it("requires max_tokens, and messages of user and assistant turns", () => {
    assert.equal(refusal(() => parseWithSchema(messagesRequestSchema, { model: "tiny", messages: [{ role: "user", content: "Hi" }] })).param, "max_tokens");
    assert.equal(refusal(() => parse({ messages: [{ role: "tool", content: "Hi" }] })).param, "messages[0].role");
    assert.equal(refusal(() => parse({ messages: [{ role: "system", content: [{ type: "image", source: { type: "url", url: "https://example.com/a.png" } }] }] })).param, "messages[0].content[0].type");
    assert.equal(refusal(() => parse({ messages: [] })).param, "messages");
  });

  it("accepts unknown fields, cache_control everywhere, thinking and metadata, and drops what it does not use", () => {
    const request = parse({
      messages: [{ role: "user", content: [{ type: "text", text: "Hi", cache_control: { type: "ephemeral", ttl: "1h" } }] }],
      system: [{ type: "text", text: "Be brief.", cache_control: { type: "ephemeral" } }],
      tools: [weather],
      thinking: { type: "enabled", budget_tokens: 2048 },
      metadata: { user_id: "user-1" },
      service_tier: "auto",
      context_management: { edits: [] },
    });
    assert.equal(request.service_tier, "auto");
    assert.equal(request.metadata?.user_id, "user-1");
  });

  it("refuses blocks it does not read, and blocks of the wrong role, naming them", () => {
    const document = refusal(() => parse({ messages: [{ role: "user", content: [{ type: "document", source: { type: "text", data: "x" } }] }] }));
    assert.equal(document.param, "messages[0].content[0].type");
    assert.match(document.message, /'document' are not supported/);
    assert.equal(refusal(() => parse({ messages: [{ role: "assistant", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: PNG_DATA } }] }] })).param, "messages[0].content[0].type");
    assert.equal(refusal(() => parse({ messages: [{ role: "user", content: "Hi" }], tools: [{ type: "web_search_20250305", name: "web_search", input_schema: {} }] })).param, "tools[0].type");
  });

  it("checks tool choices against the tools", () => {
    assert.equal(refusal(() => parse({ messages: [{ role: "user", content: "Hi" }], tool_choice: { type: "any" } })).param, "tool_choice");
    assert.equal(refusal(() => parse({ messages: [{ role: "user", content: "Hi" }], tools: [weather], tool_choice: { type: "tool", name: "other" } })).param, "tool_choice.name");
    assert.equal(refusal(() => parse({ messages: [{ role: "user", content: "Hi" }], tools: [weather, weather] })).param, "tools[1].name");
  });

  it("counts tokens without max_tokens", () => {
    const request = parseWithSchema(countTokensRequestSchema, { model: "tiny", messages: [{ role: "user", content: "Hi" }] });
    assert.equal(toGenerationRequest(request, TEXT_ONLY).maxTokens, undefined);
  });
});

describe("toGenerationRequest", () => {
  it("makes max_tokens a ceiling the engine fits to the context, with Anthropic's sampling defaults", () => {
    const request = toGenerationRequest(parse({ messages: [{ role: "user", content: "Hi" }], max_tokens: 32_000, stop_sequences: ["\n\n", ""] }), TEXT_ONLY);
    assert.deepEqual(request, {
      messages: [{ role: "user", content: "Hi" }],
      sampling: { temperature: 1, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: ["\n\n"] },
      maxTokens: 32_000,
      fitMaxTokens: true,
      choices: 1,
    });
  });

  it("puts the system blocks first, and maps a tool use and its result to a call and a tool message", () => {
    const request = toGenerationRequest(
      parse({
        system: [{ type: "text", text: "You are terse." }, { type: "text", text: "Answer in French." }],
        messages: [
          { role: "user", content: "Weather in Paris?" },
          {
            role: "assistant",
            content: [
              { type: "thinking", thinking: "The user wants weather.", signature: "abc" },
              { type: "text", text: "Let me look." },
              { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } },
            ],
          },
          {
            role: "user",
            content: [
              { type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "Sunny" }] },
              { type: "text", text: "And tomorrow?" },
            ],
          },
        ],
        tools: [weather],
        tool_choice: { type: "any", disable_parallel_tool_use: true },
      }),
      TEXT_ONLY,
    );
    assert.deepEqual(request.messages, [
      { role: "system", content: "You are terse.\n\nAnswer in French." },
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "Let me look.", toolCalls: [{ id: "toolu_1", name: "get_weather", arguments: '{"city":"Paris"}' }] },
      { role: "tool", content: "Sunny", toolCallId: "toolu_1" },
      { role: "user", content: "And tomorrow?" },
    ]);
    assert.deepEqual(request.tools, [{ name: "get_weather", description: "The weather", parameters: weather.input_schema }]);
    assert.equal(request.toolChoice, "required");
    assert.equal(request.parallelToolCalls, false);
  });

  it("marks a failed tool result, and names a tool result that answers no tool use", () => {
    const failed = toGenerationRequest(
      parse({
        messages: [
          { role: "user", content: "Go" },
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_2", name: "get_weather", input: {} }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_2", content: "no such city", is_error: true }] },
        ],
      }),
      TEXT_ONLY,
    );
    assert.deepEqual(failed.messages.at(-1), { role: "tool", content: "Error: no such city", toolCallId: "toolu_2" });
    const orphan = refusal(() => toGenerationRequest(parse({ messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_9", content: "x" }] }] }), TEXT_ONLY));
    assert.equal(orphan.param, "messages[0].content[0].tool_use_id");
  });

  it("keeps a system message of the conversation where it stands, as Claude Code sends them", () => {
    const request = toGenerationRequest(
      parse({
        system: "Be brief.",
        messages: [
          { role: "user", content: "Hi" },
          { role: "system", content: [{ type: "text", text: "Reply in French.", cache_control: { type: "ephemeral" } }, { type: "text", text: "Be kind." }] },
          { role: "assistant", content: "Bonjour" },
          { role: "system", content: "Now in English." },
        ],
      }),
      TEXT_ONLY,
    );
    assert.deepEqual(
      request.messages.map((message) => [message.role, message.content]),
      [
        ["system", "Be brief."],
        ["user", "Hi"],
        ["system", "Reply in French.\n\nBe kind."],
        ["assistant", "Bonjour"],
        ["system", "Now in English."],
      ],
    );
  });

  it("finds the content up to the first cache_control breakpoint, in Anthropic's cache order", () => {
    const system = [
      { type: "text" as const, text: "billing header" },
      { type: "text" as const, text: "You are Claude Code.", cache_control: { type: "ephemeral" } },
    ];
    const turn = (text: string) => parse({ system, tools: [{ ...weather, cache_control: undefined }], messages: [{ role: "user", content: [{ type: "text", text, cache_control: { type: "ephemeral" } }] }] });
    const first = cachedPrefixOf(turn("Hi"));
    assert.deepEqual(first, [{ ...weather, cache_control: undefined }, "billing header", "You are Claude Code."], "up to the system block with the breakpoint");
    assert.deepEqual(cachedPrefixOf(turn("Another conversation")), first, "the same prefix whatever follows it");
    assert.deepEqual(cachedPrefixOf(parse({ tools: [weather], messages: [{ role: "user", content: "Hi" }] })), [weather], "a tool's breakpoint");
    const inMessages = cachedPrefixOf(parse({ system: "Be brief.", messages: [{ role: "user", content: "Hi" }, { role: "assistant", content: "Hello" }, { role: "user", content: [{ type: "text", text: "More", cache_control: { type: "ephemeral" } }] }] }));
    assert.deepEqual(inMessages, ["Be brief.", ["user", "Hi"], ["assistant", "Hello"], ["user", { type: "text", text: "More", cache_control: { type: "ephemeral" } }]]);
    assert.equal(cachedPrefixOf(parse({ system: "Be brief.", messages: [{ role: "user", content: "Hi" }] })), undefined, "no breakpoint: the pool's own prefix affinity");
  });

  it("maps tool choices: tool names it, none keeps the tools uncalled", () => {
    assert.deepEqual(toGenerationRequest(parse({ messages: [{ role: "user", content: "Hi" }], tools: [weather], tool_choice: { type: "tool", name: "get_weather" } }), TEXT_ONLY).toolChoice, { name: "get_weather" });
    assert.equal(toGenerationRequest(parse({ messages: [{ role: "user", content: "Hi" }], tools: [weather], tool_choice: { type: "none" } }), TEXT_ONLY).toolChoice, "none");
    assert.equal(toGenerationRequest(parse({ messages: [{ role: "user", content: "Hi" }], tools: [weather], tool_choice: { type: "auto" } }), TEXT_ONLY).toolChoice, undefined);
  });

  it("refuses an image for a text-only model naming the block, and maps it for a vision model", () => {
    const body = { messages: [{ role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image", source: { type: "base64", media_type: "image/png", data: PNG_DATA } }] }] };
    const refused = refusal(() => toGenerationRequest(parse(body), TEXT_ONLY));
    assert.equal(refused.code, "model_does_not_support_images");
    assert.equal(refused.param, "messages[0].content[1]");
    assert.match(anthropicErrorOf(refused).message, /^messages\[0\]\.content\[1\]: /, "Anthropic's body names the block in its message");
    const mapped = toGenerationRequest(parse(body), VISION);
    const url = `data:image/png;base64,${PNG_DATA}`;
    assert.deepEqual(mapped.messages[0], {
      role: "user",
      content: "What is this?",
      images: [{ url }],
      parts: [{ type: "text", text: "What is this?" }, { type: "image", image: { url } }],
    });
    assert.deepEqual(imageUrlsOf(parse(body)), [{ url, param: "messages[0].content[1].source" }]);
    const bad = refusal(() => toGenerationRequest(parse({ messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } }] }] }), VISION));
    assert.equal(bad.code, "invalid_image_url");
  });

  it("passes top_k as a vendor field (the core refuses it where the model does not take it) and thinking as reasoning_effort where the model takes it", () => {
    assert.deepEqual(toGenerationRequest(parse({ messages: [{ role: "user", content: "Hi" }], top_k: 40 }), TEXT_ONLY).vendor, { top_k: 40 });
    const thinking = { messages: [{ role: "user", content: "Hi" }], thinking: { type: "enabled", budget_tokens: 20_000 } };
    assert.equal(toGenerationRequest(parse(thinking), TEXT_ONLY).vendor, undefined, "a hint where the model has no reasoning control");
    assert.deepEqual(toGenerationRequest(parse(thinking), REASONING).vendor, { reasoning_effort: "high" });
    assert.equal(toGenerationRequest(parse({ ...thinking, thinking: { type: "disabled" } }), REASONING).vendor, undefined);
    assert.deepEqual([effortOfBudget(1024), effortOfBudget(8000), effortOfBudget(16_384), effortOfBudget(undefined)], ["low", "medium", "high", "medium"]);
  });
});

describe("Anthropic's error shape", () => {
  it("answers a missing credit balance as a 400 and a full queue as a 529, keeping retry-after", () => {
    const quota = anthropicErrorOf(new ApiError("You exceeded your current quota.", "insufficient_quota"));
    assert.deepEqual([quota.status, quota.type], [400, "invalid_request_error"]);
    assert.match(quota.message, /^Your credit balance is too low/);
    const overloaded = anthropicErrorOf(new ApiError("The queue is full.", "engine_overloaded", { headers: { "retry-after": "1" } }));
    assert.deepEqual([overloaded.status, overloaded.type, overloaded.headers["retry-after"]], [529, "overloaded_error", "1"]);
    const statuses = (["invalid_api_key", "model_not_allowed", "model_not_found", "request_too_large", "rate_limit_exceeded", "internal_error", "upstream_timeout"] as const).map((code) => {
      const answer = anthropicErrorOf(new ApiError("x", code));
      return `${answer.status} ${answer.type}`;
    });
    assert.deepEqual(statuses, ["401 authentication_error", "403 permission_error", "404 not_found_error", "413 request_too_large", "429 rate_limit_error", "500 api_error", "504 timeout_error"]);
  });
});
