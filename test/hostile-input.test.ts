/**
 * Issue 9 rows 1, 2 and 7 against a real server: requests built to make the server work long
 * before it refuses them (exponential schema checks, megabytes that reach the chat template,
 * grammar bounds llama.cpp refuses) answer a prompt 4xx naming the field, and `/health` keeps
 * answering meanwhile. Before the fix each of them stalled the process for seconds to a minute
 * (row 2) or answered 500 (row 7).
 */
import { assertError } from "./helpers/api-error.ts";
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { postJson, startTestServer, type TestServer } from "./helpers/server.ts";

let test: TestServer;
let chatUrl: string;
let auth: Record<string, string>;

before(async () => {
  test = await startTestServer({ flags: { parallel: "1" } });
  chatUrl = `${test.baseURL}/chat/completions`;
  auth = { authorization: `Bearer ${test.key}` };
});
after(async () => {
  await test?.close();
});

const valid = { model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 4, temperature: 0 };

/** Far above what any of these requests needs now, far below what each took before. */
const PROMPT_MS = 20_000;
/** The slowest `/health` may be meanwhile: a loaded machine stays far below it, a stalled event loop (seconds, before) does not. */
const HEALTH_MS = 3_000;

/**
 * Posts `body` while probing `/health` every 20 ms; returns the response and the slowest probe.
 * Each probe has its own deadline: a stalled event loop shows as a slow probe, not a hang.
 */
async function postWhileProbing(body: unknown): Promise<{ response: Awaited<ReturnType<typeof postJson>>; slowestHealthMs: number }> {
  let slowest = 0;
  let done = false;
  const probing = (async () => {
    while (!done) {
      const started = performance.now();
      const health = await fetch(`${test.url}/health`, { signal: AbortSignal.timeout(PROMPT_MS) });
      await health.arrayBuffer();
      slowest = Math.max(slowest, performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  })();
  try {
    const response = await Promise.race([
      postJson(chatUrl, body, auth),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`no answer within ${PROMPT_MS} ms`)), PROMPT_MS).unref()),
    ]);
    return { response, slowestHealthMs: slowest };
  } finally {
    done = true;
    await probing;
  }
}

/** Issue 9 row 1: `levels` definitions, each an anyOf of `fanOut` references to the next, under a oneOf. */
function chainSchema(fanOut: number, levels: number, beside: Record<string, unknown>): Record<string, unknown> {
  const $defs: Record<string, unknown> = {};
  for (let level = 0; level < levels; level++) {
    $defs[`d${level}`] = level === levels - 1 ? { type: "string" } : { anyOf: Array.from({ length: fanOut }, () => ({ $ref: `#/$defs/d${level + 1}` })) };
  }
  return { $defs, type: "object", properties: { x: { oneOf: [{ $ref: "#/$defs/d0" }, beside] } } };
}

const tools = (count: number, parameters?: Record<string, unknown>) =>
  Array.from({ length: count }, (_, index) => ({ type: "function", function: { name: `f${index}`, ...(parameters ? { parameters } : {}) } }));

describe("schemas whose checks were exponential (issue 9 row 1)", () => {
  // fanOut 16 over 8 levels: 16^7 paths, minutes of CPU before (k=10: 5.3 s); ~3 KB of JSON.
  it("answers a chain of definitions with many references each under a oneOf with a prompt 400 naming where it multiplies", async () => {
    const schema = chainSchema(16, 8, { type: "string" });
    assert.ok(JSON.stringify(schema).length < 4000);
    const { response, slowestHealthMs } = await postWhileProbing({ ...valid, response_format: { type: "json_schema", json_schema: { name: "x", schema } } });
    assertError(response, 400, "unsupported_parameter", "response_format.json_schema.schema.$defs.d3.anyOf");
    assert.match(response.body.error.message, /expands to 65536 alternatives/);
    assert.ok(slowestHealthMs < HEALTH_MS, `/health took ${Math.round(slowestHealthMs)} ms`);
  });

  it("names the tool whose parameters hold it", async () => {
    const body = { ...valid, tools: [...tools(3), { type: "function", function: { name: "chain", parameters: chainSchema(16, 8, { type: "number" }) } }] };
    const { response } = await postWhileProbing(body);
    assertError(response, 400, "unsupported_parameter", "tools[3].function.parameters.$defs.d3.anyOf");
  });

  it("checks oneOf over a smaller chain promptly: 400 when its alternatives may overlap, 200 when they cannot", async () => {
    const format = (beside: Record<string, unknown>) => ({ type: "json_schema", json_schema: { name: "x", schema: chainSchema(4, 6, beside) } });
    const overlapping = await postWhileProbing({ ...valid, response_format: format({ type: "string" }) });
    assertError(overlapping.response, 400, "unsupported_parameter", "response_format.json_schema.schema.properties.x.oneOf");
    const disjoint = await postWhileProbing({ ...valid, response_format: format({ type: "number" }) });
    assert.equal(disjoint.response.status, 200, disjoint.response.text.slice(0, 500));
  });

  it("refuses schemas past the work budget with a 400 unsupported_parameter naming the schema", async () => {
    // 64 oneOf alternatives of 60 distinct values: 2016 pairs to compare.
    const alternatives = Array.from({ length: 64 }, (_, index) => ({ enum: Array.from({ length: 60 }, (_, value) => index * 1000 + value) }));
    const { response } = await postWhileProbing({ ...valid, response_format: { type: "json_schema", json_schema: { name: "x", schema: { oneOf: alternatives } } } });
    assertError(response, 400, "unsupported_parameter", "response_format.json_schema.schema");
    assert.match(response.body.error.message, /too complex/);
  });
});

describe("megabytes that reach the chat template (issue 9 row 2)", () => {
  const bigCases: Array<[string, () => Record<string, unknown>, number, string, string]> = [
    ["300,000 empty messages", () => ({ ...valid, messages: Array.from({ length: 300_000 }, () => ({ role: "user", content: "" })) }), 400, "invalid_request_error", "messages"],
    ["a 9 MB tool description", () => ({ ...valid, tools: [{ type: "function", function: { name: "f", description: "d".repeat(9_000_000) } }] }), 400, "invalid_request_error", "tools[0].function.description"],
    [
      "9 MB of arguments in one tool call",
      () => ({ ...valid, messages: [{ role: "user", content: "x" }, { role: "assistant", content: null, tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: JSON.stringify({ a: "a".repeat(9_000_000) }) } }] }] }),
      400,
      "invalid_request_error",
      "messages[1].tool_calls[0].function.arguments",
    ],
    [
      "9 MB of arguments over 36 tool calls",
      () => ({
        ...valid,
        messages: [
          { role: "user", content: "x" },
          { role: "assistant", content: null, tool_calls: Array.from({ length: 36 }, (_, index) => ({ id: `c${index}`, type: "function", function: { name: "f", arguments: JSON.stringify({ a: "a".repeat(250_000) }) } })) },
        ],
        tools: tools(1),
      }),
      400,
      "context_length_exceeded",
      "messages",
    ],
    ["10,000 tools", () => ({ ...valid, tools: tools(10_000, { type: "object", properties: { a: { type: "string" } } }) }), 400, "invalid_request_error", "tools"],
    ["850,000 logit_bias entries", () => ({ ...valid, logit_bias: Object.fromEntries(Array.from({ length: 850_000 }, (_, index) => [String(index), 1])) }), 400, "invalid_request_error", "logit_bias"],
    ["n × max_tokens past its cap", () => ({ ...valid, n: 8, max_tokens: 500_000 }), 400, "invalid_request_error", "max_tokens"],
  ];
  for (const [what, build, status, code, param] of bigCases) {
    it(`refuses ${what} promptly, naming '${param}'`, async () => {
      const body = JSON.stringify(build());
      assert.ok(body.length < 10 * 1024 * 1024, `the body (${body.length} bytes) fits the default body limit`);
      const { response, slowestHealthMs } = await postWhileProbing(body);
      assertError(response, status, code, param);
      assert.ok(slowestHealthMs < HEALTH_MS, `/health took ${Math.round(slowestHealthMs)} ms`);
    });
  }

  it("still serves requests at the caps", async () => {
    const body = {
      ...valid,
      messages: Array.from({ length: 2048 }, (_, index) => ({ role: index % 2 === 0 ? "user" : "assistant", content: "" })),
      tools: tools(128, { type: "object", properties: { a: { type: "string" } } }),
      tool_choice: "none",
      stop: ["x".repeat(1024)],
      logit_bias: Object.fromEntries(Array.from({ length: 300 }, (_, index) => [String(index), 0])),
    };
    const { response } = await postWhileProbing(body);
    // Within every cap, but the prompt of 2,048 messages and 128 tools outgrows this model's 2,048-token context: refused exactly.
    assertError(response, 400, "context_length_exceeded");
    // The caps that cost the prompt nothing, at their maximum, in a request that fits: served.
    const fits = { ...valid, tools: tools(2), tool_choice: "none", stop: ["x".repeat(1024), "y", "z", "w"], logit_bias: body.logit_bias };
    const served = await postJson(chatUrl, fits, auth);
    assert.equal(served.status, 200, served.text.slice(0, 500));
    assert.equal(served.body.object, "chat.completion");
  });
});

describe("grammar bounds llama.cpp refuses (issue 9 row 7)", () => {
  const cases: Array<[string, Record<string, unknown>, string]> = [
    ["maxLength 1500", { type: "string", maxLength: 1500 }, "maxLength"],
    ["maxItems 1002", { type: "array", items: { type: "integer" }, maxItems: 1002 }, "maxItems"],
    ["maxItems 2000", { type: "array", items: { type: "integer" }, maxItems: 2000 }, "maxItems"],
  ];
  for (const [what, schema, keyword] of cases) {
    it(`answers 400 unsupported_parameter naming '${keyword}' for ${what}, never a 500`, async () => {
      const format = await postJson(chatUrl, { ...valid, response_format: { type: "json_schema", json_schema: { name: "x", schema } } }, auth);
      assertError(format, 400, "unsupported_parameter", `response_format.json_schema.schema.${keyword}`);
      const tool = await postJson(chatUrl, { ...valid, tools: tools(2, { type: "object", properties: { a: schema } }) }, auth);
      assertError(tool, 400, "unsupported_parameter", `tools[0].function.parameters.properties.a.${keyword}`);
    });
  }

  it("writes JSON under the largest bounds it accepts", async () => {
    const schema = { type: "object", properties: { text: { type: "string", maxLength: 1000 }, list: { type: "array", items: { type: "integer" }, maxItems: 1000 } } };
    const response = await postJson(chatUrl, { ...valid, max_tokens: 400, response_format: { type: "json_schema", json_schema: { name: "x", schema } } }, auth);
    assert.equal(response.status, 200, response.text.slice(0, 500));
  });
});
