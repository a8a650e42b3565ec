/**
 * End-to-end: the Responses API's refusals, OpenAI-shaped with `param` naming the field in the
 * Responses API's own spelling (`input[1].content`, `text.format`, `tools[0].parameters…`),
 * streamed and not; and `truncation`: `disabled` refuses an over-long context, `auto` leaves out
 * the fewest oldest items that make it fit and says how many (`truncated_input_items`). On the
 * real stories260K models with a 256-token context, and the fake engine where a model's missing
 * capability is the point.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { CHAT_PARAMETERS } from "../src/engines/engine.ts";
import { FakeEngine } from "../src/engines/fake/fake-engine.ts";
import { responseResourceSchema } from "./helpers/responses-schemas.ts";
import { parseSse } from "./helpers/sse-events.ts";
import { postJson, startTestServer, storiesChatmlModel, storiesModel, type TestServer } from "./helpers/server.ts";

const CONTEXT = 256;
let test: TestServer;

before(async () => {
  const limited = new FakeEngine({ capabilities: { supportedParameters: CHAT_PARAMETERS.filter((parameter) => parameter !== "top_p" && parameter !== "response_format") } });
  test = await startTestServer({
    flags: { models: [storiesModel, `chatml=${storiesChatmlModel}`, "limited=limited.gguf"], context_size: String(CONTEXT) },
    engines: { limited },
  });
});
after(async () => {
  await test?.close();
});

const both = [false, true] as const;

async function create(body: Record<string, unknown>) {
  return postJson(`${test.baseURL}/responses`, body, { authorization: `Bearer ${test.key}` });
}

/** Sends a body streamed and not; both must be refused alike, before any stream begins. */
async function assertRefusedBoth(body: Record<string, unknown>, expected: { status?: number; code: string; param: string; message?: RegExp }): Promise<void> {
  for (const stream of both) {
    const response = await create({ ...body, stream });
    assert.equal(response.status, expected.status ?? 400, response.text);
    assert.match(response.headers.get("content-type") ?? "", /^application\/json/);
    assert.deepEqual(Object.keys(response.body.error).sort(), ["code", "message", "param", "type"]);
    assert.equal(response.body.error.code, expected.code, response.text);
    assert.equal(response.body.error.param, expected.param, response.text);
    if (expected.message !== undefined) assert.match(response.body.error.message, expected.message);
  }
}

describe("refusals name the field as the Responses API spells it", () => {
  it("a malformed input item: input[1].content", async () => {
    await assertRefusedBoth({ model: "stories260K", input: [{ role: "user", content: "Hi" }, { role: "user", content: 5 }] }, { code: "invalid_request_error", param: "input[1].content" });
  });

  it("an image to a text-only model: the part, code model_does_not_support_images", async () => {
    const input = [{ role: "user", content: [{ type: "input_text", text: "What is this?" }, { type: "input_image", image_url: "https://example.com/cat.png" }] }];
    await assertRefusedBoth({ model: "stories260K", input }, { code: "model_does_not_support_images", param: "input[0].content[1]" });
  });

  it("an unknown include value: include, naming the value", async () => {
    await assertRefusedBoth({ model: "stories260K", input: "Hi", include: ["message.output_text.logprobs", "bogus.value"] }, { code: "invalid_request_error", param: "include", message: /bogus\.value/ });
  });

  it("accepts include values that do not apply, and ignores them", async () => {
    const response = await create({ model: "stories260K", input: "Hi", include: ["reasoning.encrypted_content", "web_search_call.results"], max_output_tokens: 16 });
    assert.equal(response.status, 200, response.text);
  });

  it("a built-in tool: tools[0].type", async () => {
    await assertRefusedBoth({ model: "stories260K", input: "Hi", tools: [{ type: "web_search" }] }, { code: "invalid_request_error", param: "tools[0].type", message: /web_search/ });
  });

  it("a tool_choice naming a tool that is not among the tools: tool_choice.name", async () => {
    const tools = [{ type: "function", name: "get_weather", parameters: { type: "object", properties: {} } }];
    await assertRefusedBoth({ model: "stories260K", input: "Hi", tools, tool_choice: { type: "function", name: "get_time" } }, { code: "invalid_request_error", param: "tool_choice.name", message: /get_time/ });
  });

  it("a model that does not take top_p: top_p", async () => {
    await assertRefusedBoth({ model: "limited", input: "Hi", top_p: 0.5 }, { code: "unsupported_parameter", param: "top_p" });
  });

  it("a model that does not take a response format: text.format", async () => {
    await assertRefusedBoth({ model: "limited", input: "Hi", text: { format: { type: "json_object" } } }, { code: "unsupported_parameter", param: "text.format", message: /'text\.format'/ });
  });

  it("a text.format schema the grammar cannot enforce: text.format.schema…, in the message too", async () => {
    const format = { type: "json_schema", name: "person", schema: { type: "object", properties: { age: { type: "integer", minimum: 1 } } } };
    await assertRefusedBoth(
      { model: "stories260K", input: "Hi", text: { format } },
      { code: "unsupported_parameter", param: "text.format.schema.properties.age.minimum", message: /'text\.format\.schema\.properties\.age\.minimum'/ },
    );
  });

  it("a tool's parameters the grammar cannot enforce: tools[0].parameters…", async () => {
    const tools = [{ type: "function", name: "set_age", parameters: { type: "object", properties: { age: { type: "integer", minimum: 1 } } } }];
    await assertRefusedBoth(
      { model: "stories260K", input: "Hi", tools, tool_choice: "required" },
      { code: "unsupported_parameter", param: "tools[0].parameters.properties.age.minimum", message: /'tools\[0\]\.parameters\.properties\.age\.minimum'/ },
    );
  });

  it("max_output_tokens below the spec's 16: max_output_tokens", async () => {
    await assertRefusedBoth({ model: "stories260K", input: "Hi", max_output_tokens: 15 }, { code: "invalid_request_error", param: "max_output_tokens" });
  });

  it("a completion that cannot fit the context: context_length_exceeded naming max_output_tokens' input", async () => {
    await assertRefusedBoth({ model: "stories260K", input: "Hi", max_output_tokens: CONTEXT }, { code: "context_length_exceeded", param: "input" });
  });
});

/** About 60 tokens of text for each turn of a long conversation. */
const turn = (index: number) => `Turn ${index}: the little cat sat on the big red mat and looked at the sun in the sky all day long.`.repeat(2);

/** A conversation of `count` earlier turns (user and assistant in turn), then the last question. */
function conversation(count: number, last = "And then what happened?") {
  const items: Array<Record<string, unknown>> = [];
  for (let index = 0; index < count; index++) items.push({ role: index % 2 === 0 ? "user" : "assistant", content: turn(index) });
  items.push({ role: "user", content: last });
  return items;
}

type Resource = Record<string, any>;

/** Creates a response streamed or not and returns its final resource (checked against the spec; the stream's terminal response). */
async function respond(body: Record<string, unknown>, stream: boolean): Promise<{ status: number; resource?: Resource; error?: Record<string, any> }> {
  const response = await create({ ...body, stream });
  if (response.status !== 200) return { status: response.status, error: response.body.error };
  const resource: Resource = stream ? JSON.parse(parseSse(response.text).at(-2)!.data).response : response.body;
  const checked = responseResourceSchema.safeParse(resource);
  assert.ok(checked.success, checked.success ? "" : JSON.stringify(checked.error.issues.slice(0, 2)));
  return { status: 200, resource };
}

describe("truncation", () => {
  for (const stream of both) {
    const mode = stream ? "streamed" : "not streamed";

    it(`disabled (the default): an over-long conversation is a 400 context_length_exceeded naming input (${mode})`, async () => {
      for (const truncation of ["disabled", undefined]) {
        const refused = await respond({ model: "chatml", input: conversation(8), max_output_tokens: 16, ...(truncation !== undefined ? { truncation } : {}) }, stream);
        assert.equal(refused.status, 400);
        assert.equal(refused.error!.code, "context_length_exceeded");
        assert.equal(refused.error!.param, "input");
      }
    });

    it(`auto: leaves out the fewest oldest items that make it fit, and says how many (${mode})`, async () => {
      const items = conversation(8);
      const { status, resource } = await respond({ model: "chatml", input: items, truncation: "auto", max_output_tokens: 16, temperature: 0 }, stream);
      assert.equal(status, 200);
      assert.equal(resource!.truncation, "auto");
      const dropped = resource!.truncated_input_items as number;
      assert.ok(dropped > 0 && dropped < items.length, `dropped ${dropped}`);
      assert.ok(resource!.usage.input_tokens + 16 <= CONTEXT);
      // Exactly the prompt of the conversation without those items, and one fewer would not fit.
      const rest = await respond({ model: "chatml", input: items.slice(dropped), max_output_tokens: 16, temperature: 0 }, false);
      assert.equal(rest.resource!.usage.input_tokens, resource!.usage.input_tokens);
      assert.equal(rest.resource!.output[0].content[0].text, resource!.output[0].content[0].text);
      assert.equal("truncated_input_items" in rest.resource!, false, "only an auto-truncated response carries the count");
      const oneMore = await respond({ model: "chatml", input: items.slice(dropped - 1), max_output_tokens: 16 }, false);
      assert.equal(oneMore.error?.code, "context_length_exceeded");
    });

    it(`auto: keeps the instructions and the last user message; when those alone do not fit, context_length_exceeded (${mode})`, async () => {
      const instructions = "You are a storyteller who answers in one line.";
      const { resource } = await respond({ model: "chatml", instructions, input: conversation(8), truncation: "auto", max_output_tokens: 16 }, stream);
      const fits = await respond({ model: "chatml", instructions, input: conversation(8).slice(resource!.truncated_input_items), max_output_tokens: 16 }, false);
      assert.equal(fits.resource!.usage.input_tokens, resource!.usage.input_tokens, "the instructions stayed in the prompt");
      const hopeless = await respond({ model: "chatml", input: [{ role: "user", content: "Hi" }, { role: "user", content: turn(0).repeat(6) }], truncation: "auto", max_output_tokens: 16 }, stream);
      assert.equal(hopeless.status, 400);
      assert.equal(hopeless.error!.code, "context_length_exceeded");
      assert.equal(hopeless.error!.param, "input");
    });

    it(`auto: a conversation that fits is sent whole, with truncated_input_items 0 (${mode})`, async () => {
      const { resource } = await respond({ model: "chatml", input: conversation(1), truncation: "auto", max_output_tokens: 16 }, stream);
      assert.equal(resource!.truncated_input_items, 0);
    });

    it(`auto: drops the stored history of previous_response_id first (${mode})`, async () => {
      let previous: string | undefined;
      // Four stored turns of about 60 tokens each, and their answers: more than the context holds.
      for (let index = 0; index < 4; index++) {
        const { resource } = await respond({ model: "chatml", input: turn(index), truncation: "auto", max_output_tokens: 16, ...(previous !== undefined ? { previous_response_id: previous } : {}) }, false);
        previous = resource!.id;
      }
      const { status, resource } = await respond({ model: "chatml", previous_response_id: previous, input: [{ role: "user", content: "And then?" }], truncation: "auto", max_output_tokens: 16 }, stream);
      assert.equal(status, 200);
      assert.ok(resource!.truncated_input_items > 0);
      const stored = await fetch(`${test.baseURL}/responses/${resource!.id}`, { headers: { authorization: `Bearer ${test.key}` } });
      assert.deepEqual(await stored.json(), resource, "the stored response carries the count too");
      const refused = await respond({ model: "chatml", previous_response_id: previous, input: [{ role: "user", content: "And then?" }], max_output_tokens: 16 }, stream);
      assert.equal(refused.error?.code, "context_length_exceeded");
    });
  }
});
