/**
 * The response object's builders: the request's echo with OpenAI's defaults, usage from engine
 * counts, and whole resources that the spec's schema (test/helpers/responses-schemas.ts) accepts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { responseResourceSchema } from "../../../test/helpers/responses-schemas.ts";
import { parseWithSchema } from "../parse.ts";
import { responsesRequestSchema } from "./request.ts";
import { buildResponseResource, echoedRequestFields, newResponseId, outputMessage, usageOf } from "./resource.ts";

const parse = (body: Record<string, unknown>) => parseWithSchema(responsesRequestSchema, { model: "tiny", input: "Hi", ...body });

describe("echoedRequestFields", () => {
  it("fills every field not sent with OpenAI's default", () => {
    assert.deepEqual(echoedRequestFields(parse({})), {
      model: "tiny",
      previous_response_id: null,
      instructions: null,
      tools: [],
      tool_choice: "auto",
      truncation: "disabled",
      parallel_tool_calls: true,
      text: { format: { type: "text" }, verbosity: "medium" },
      top_p: 1,
      presence_penalty: 0,
      frequency_penalty: 0,
      top_logprobs: 0,
      temperature: 1,
      reasoning: { effort: null, summary: null },
      max_output_tokens: null,
      max_tool_calls: null,
      store: true,
      background: false,
      service_tier: "default",
      metadata: {},
      safety_identifier: null,
      prompt_cache_key: null,
      user: null,
    });
  });

  it("echoes what was sent, tools with every field present", () => {
    const echoed = echoedRequestFields(
      parse({
        instructions: "Rules.",
        previous_response_id: "resp_0",
        tools: [{ type: "function", name: "f" }, { type: "custom", name: "p", description: "Patch" }],
        tool_choice: { type: "allowed_tools", tools: [{ type: "custom", name: "p" }] },
        text: { format: { type: "json_schema", name: "a", schema: { type: "object" } } },
        reasoning: { effort: "high", generate_summary: "concise" },
        temperature: 0,
        store: false,
        service_tier: "priority",
        metadata: { a: "b" },
        max_output_tokens: 100,
        user: "u",
      }),
    );
    assert.deepEqual(echoed.tools, [
      { type: "function", name: "f", description: null, parameters: null, strict: null },
      { type: "custom", name: "p", description: "Patch", format: { type: "text" } },
    ]);
    assert.deepEqual(echoed.tool_choice, { type: "allowed_tools", mode: "auto", tools: [{ type: "custom", name: "p" }] });
    assert.deepEqual(echoed.text.format, { type: "json_schema", name: "a", description: null, schema: { type: "object" }, strict: false });
    assert.deepEqual(echoed.reasoning, { effort: "high", summary: "concise" });
    assert.equal(echoed.temperature, 0);
    assert.equal(echoed.store, false);
    assert.equal(echoed.service_tier, "priority");
    assert.equal(echoed.max_output_tokens, 100);
    assert.deepEqual([echoed.instructions, echoed.previous_response_id, echoed.user], ["Rules.", "resp_0", "u"]);
  });
});

describe("buildResponseResource", () => {
  it("builds a completed resource the spec's schema accepts, in the spec's field order", () => {
    const resource = buildResponseResource(echoedRequestFields(parse({})), {
      id: newResponseId(),
      createdAt: 1_760_000_000,
      completedAt: 1_760_000_001,
      status: "completed",
      output: [outputMessage("msg_1", "Hello", "completed")],
      usage: usageOf({ promptTokens: 10, cachedPromptTokens: 3, completionTokens: 4, reasoningTokens: 1 }),
    });
    const result = responseResourceSchema.safeParse(resource);
    assert.ok(result.success, JSON.stringify(result.error?.issues));
    assert.match(resource.id, /^resp_[0-9a-f]{48}$/);
    assert.deepEqual(Object.keys(resource).slice(0, 6), ["id", "object", "created_at", "completed_at", "status", "incomplete_details"]);
    assert.deepEqual(resource.usage, { input_tokens: 10, input_tokens_details: { cached_tokens: 3 }, output_tokens: 4, output_tokens_details: { reasoning_tokens: 1 }, total_tokens: 14 });
  });

  it("gives null for what a running response does not have yet", () => {
    const resource = buildResponseResource(echoedRequestFields(parse({})), { id: "resp_1", createdAt: 1, status: "in_progress" });
    assert.deepEqual([resource.completed_at, resource.usage, resource.error, resource.incomplete_details, resource.output], [null, null, null, null, []]);
  });

  it("says why a response is incomplete or failed", () => {
    const echoed = echoedRequestFields(parse({}));
    assert.deepEqual(buildResponseResource(echoed, { id: "r", createdAt: 1, status: "incomplete", incompleteReason: "max_output_tokens" }).incomplete_details, { reason: "max_output_tokens" });
    assert.deepEqual(buildResponseResource(echoed, { id: "r", createdAt: 1, status: "failed", error: { code: "server_error", message: "x" } }).error, { code: "server_error", message: "x" });
  });
});
