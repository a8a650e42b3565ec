/**
 * End-to-end: the Responses API's stream read as raw SSE (fetch, the `event:` and `data:` lines),
 * on the real stories260K models. Every event is checked against the schemas written from the
 * Open Responses specification and the stream against its grammar (`checkEventGrammar`), with the
 * terminal event's response equal to what `GET /v1/responses/{id}` returns; the same request not
 * streamed answers the spec's `ResponseResource`, equal to its stored copy.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { FakeEngine } from "../src/engines/fake/fake-engine.ts";
import { UpstreamError } from "../src/protocol/errors.ts";
import { checkEventGrammar, responseResourceSchema, responseStreamEventSchema } from "./helpers/responses-schemas.ts";
import { parseSse } from "./helpers/sse-events.ts";
import { startTestServer, storiesChatmlModel, storiesModel, type TestServer } from "./helpers/server.ts";

let test: TestServer;

before(async () => {
  // stories260K never stops by itself at temperature 0 (it loops), so a response that completes
  // with text is the fake engine's: it ends its script with a stop.
  const fake = new FakeEngine({ script: () => [{ steps: [{ text: "Once" }, { text: " upon" }, { text: " a time." }], finish: "stop" }] });
  // Fails after two words: an upstream that broke mid-answer.
  const breaks = new FakeEngine({ script: () => [{ steps: [{ text: "Once" }, { text: " upon" }, { fail: new UpstreamError() }] }] });
  test = await startTestServer({ flags: { models: [storiesModel, `chatml=${storiesChatmlModel}`, "fake=fake.gguf", "breaks=breaks.gguf"] }, engines: { fake, breaks } });
});
after(async () => {
  await test?.close();
});

async function post(path: string, body: unknown): Promise<Response> {
  return fetch(`${test.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${test.key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
}

async function getStored(id: string): Promise<Record<string, any>> {
  const response = await fetch(`${test.url}/v1/responses/${id}`, { headers: { authorization: `Bearer ${test.key}` } });
  assert.equal(response.status, 200);
  return (await response.json()) as Record<string, any>;
}

/**
 * Streams a request as raw SSE and checks it whole: the content type, each event's name equal to
 * its `type`, each event valid for the spec, the grammar, `[DONE]` last, and the terminal
 * event's response equal to the stored one. Returns the parsed events (without `[DONE]`).
 */
async function streamChecked(body: Record<string, unknown>): Promise<Array<Record<string, any>>> {
  const response = await post("/v1/responses", { ...body, stream: true });
  assert.equal(response.status, 200, await response.clone().text());
  assert.match(response.headers.get("content-type") ?? "", /^text\/event-stream/);
  const raw = parseSse(await response.text());
  assert.equal(raw.at(-1)?.data, "[DONE]", "the stream ends with [DONE]");
  const events = raw.slice(0, -1).map((event) => {
    const parsed = JSON.parse(event.data) as Record<string, any>;
    assert.equal(event.name, parsed.type, "each event is named by its type");
    const checked = responseStreamEventSchema.safeParse(parsed);
    assert.ok(checked.success, checked.success ? "" : `${parsed.type}: ${JSON.stringify(checked.error.issues.slice(0, 2))}`);
    return parsed;
  });
  const terminal = events.at(-1)!;
  const stored = await getStored(terminal.response.id);
  assert.deepEqual(checkEventGrammar([...events, "[DONE]"], { finalResource: stored, requireDone: true }), []);
  return events;
}

/** The same request not streamed: the spec's resource, equal to its stored copy. */
async function completeChecked(body: Record<string, unknown>): Promise<Record<string, any>> {
  const response = await post("/v1/responses", body);
  const resource = (await response.json()) as Record<string, any>;
  assert.equal(response.status, 200, JSON.stringify(resource));
  const checked = responseResourceSchema.safeParse(resource);
  assert.ok(checked.success, checked.success ? "" : JSON.stringify(checked.error.issues.slice(0, 3)));
  assert.deepEqual(await getStored(resource.id), resource);
  return resource;
}

const ofType = (events: Array<Record<string, any>>, type: string) => events.filter((event) => event.type === type);

describe("raw SSE, event by event against the spec", () => {
  it("streams plain text: created, in_progress, one message's part and deltas, completed", async () => {
    const body = { model: "fake", input: "Tell me a story.", max_output_tokens: 16 };
    const events = await streamChecked(body);
    assert.deepEqual(
      events.slice(0, 4).map((event) => event.type),
      ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"],
    );
    assert.equal(events[0]!.response.status, "in_progress");
    assert.equal(events[0]!.response.usage, null, "usage is null until the response ends");
    const terminal = events.at(-1)!;
    assert.equal(terminal.type, "response.completed");
    assert.equal(terminal.response.status, "completed");
    assert.equal(typeof terminal.response.completed_at, "number");
    const text = ofType(events, "response.output_text.delta").map((event) => event.delta).join("");
    assert.equal(text, "Once upon a time.");
    assert.equal(ofType(events, "response.output_text.done")[0]!.text, text);
    assert.equal(terminal.response.usage.output_tokens, 3);
    assert.equal(ofType(events, "response.output_item.done")[0]!.item.status, "completed");
    const resource = await completeChecked(body);
    assert.equal(resource.status, "completed");
    assert.equal(resource.output[0].content[0].text, text);
    assert.equal(resource.output[0].status, "completed");
    assert.deepEqual(resource.usage, terminal.response.usage);
  });

  it("ends a stream that fails after content with error and response.failed, the open item incomplete as GET stores it", async () => {
    const events = await streamChecked({ model: "breaks", input: "Tell me a story.", max_output_tokens: 16 });
    assert.deepEqual(
      events.slice(-4).map((event) => event.type),
      ["response.content_part.done", "response.output_item.done", "error", "response.failed"],
    );
    assert.equal(ofType(events, "error")[0]!.error.code, "upstream_error");
    assert.equal(ofType(events, "response.output_item.done")[0]!.item.status, "incomplete");
    const failed = events.at(-1)!.response;
    assert.equal(failed.status, "failed");
    assert.equal(failed.error.code, "upstream_error");
    assert.equal(failed.output[0].status, "incomplete", "the item the failure left open ended incomplete");
    assert.equal(failed.output[0].content[0].text, "Once upon");
  });

  it("cuts at max_output_tokens: response.incomplete, reason max_output_tokens, the item incomplete", async () => {
    const body = { model: "stories260K", input: "Once upon a time", max_output_tokens: 16, temperature: 0 };
    const events = await streamChecked(body);
    const terminal = events.at(-1)!;
    assert.equal(terminal.type, "response.incomplete");
    assert.deepEqual(terminal.response.incomplete_details, { reason: "max_output_tokens" });
    assert.equal(terminal.response.completed_at, null);
    assert.equal(terminal.response.usage.output_tokens, 16);
    assert.equal(ofType(events, "response.output_item.done")[0]!.item.status, "incomplete");
    const resource = await completeChecked(body);
    assert.equal(resource.status, "incomplete");
    assert.deepEqual(resource.incomplete_details, { reason: "max_output_tokens" });
    assert.equal(resource.output[0].status, "incomplete");
  });

  it("streams a forced function call: the call item, its arguments' deltas and done, JSON matching the schema", async () => {
    const tool = {
      type: "function",
      name: "get_weather",
      description: "The weather in a city.",
      parameters: { type: "object", properties: { city: { type: "string", maxLength: 20 } }, required: ["city"], additionalProperties: false },
      strict: true,
    };
    const body = { model: "chatml", input: "What is the weather in Paris?", tools: [tool], tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 64, temperature: 0 };
    const events = await streamChecked(body);
    const added = ofType(events, "response.output_item.added");
    assert.equal(added.length, 1);
    assert.equal(added[0]!.item.type, "function_call");
    assert.equal(added[0]!.item.name, "get_weather");
    assert.match(added[0]!.item.call_id, /\S/);
    const deltas = ofType(events, "response.function_call_arguments.delta");
    assert.ok(deltas.length > 0);
    const done = ofType(events, "response.function_call_arguments.done")[0]!;
    assert.equal(done.arguments, deltas.map((event) => event.delta).join(""));
    const parsed = JSON.parse(done.arguments) as { city: string };
    assert.deepEqual(Object.keys(parsed), ["city"]);
    assert.equal(typeof parsed.city, "string");
    const terminal = events.at(-1)!;
    assert.equal(terminal.type, "response.completed");
    assert.deepEqual(terminal.response.tool_choice, { type: "function", name: "get_weather" });
    assert.equal(terminal.response.tools[0].name, "get_weather");
    const resource = await completeChecked(body);
    assert.equal(resource.output.length, 1);
    assert.equal(resource.output[0].type, "function_call");
    assert.equal(resource.output[0].arguments, done.arguments, "the same call streamed or not at temperature 0");
    assert.equal(resource.output[0].status, "completed");
  });

  it("streams text.format json_schema: the text parses and matches the schema", async () => {
    const schema = { type: "object", properties: { name: { type: "string", maxLength: 16 }, age: { type: "integer" } }, required: ["name", "age"], additionalProperties: false };
    const body = { model: "stories260K", input: "Describe a person.", text: { format: { type: "json_schema", name: "person", schema, strict: true } }, max_output_tokens: 96, temperature: 0 };
    const events = await streamChecked(body);
    const terminal = events.at(-1)!;
    assert.equal(terminal.type, "response.completed");
    assert.deepEqual(terminal.response.text.format, { type: "json_schema", name: "person", description: null, schema, strict: true });
    const text = ofType(events, "response.output_text.done")[0]!.text as string;
    const person = JSON.parse(text) as { name: string; age: number };
    assert.deepEqual(Object.keys(person).sort(), ["age", "name"]);
    assert.ok(Number.isInteger(person.age));
    const resource = await completeChecked(body);
    assert.equal(resource.output[0].content[0].text, text);
  });

  it("streams log probabilities with include message.output_text.logprobs and top_logprobs 2", async () => {
    const body = { model: "stories260K", input: "Once upon a time", include: ["message.output_text.logprobs"], top_logprobs: 2, max_output_tokens: 16, temperature: 0 };
    const events = await streamChecked(body);
    const deltas = ofType(events, "response.output_text.delta");
    const logprobs = deltas.flatMap((event) => event.logprobs as Array<{ token: string; logprob: number; top_logprobs: unknown[] }>);
    assert.equal(logprobs.length, 16, "one per generated token");
    for (const delta of deltas) assert.equal(delta.logprobs.map((entry: { token: string }) => entry.token).join(""), delta.delta, "a delta's tokens spell it");
    for (const entry of logprobs) {
      assert.ok(entry.logprob <= 0);
      assert.equal(entry.top_logprobs.length, 2);
    }
    const done = ofType(events, "response.output_text.done")[0]!;
    assert.deepEqual(done.logprobs, logprobs);
    const terminal = events.at(-1)!;
    assert.equal(terminal.response.top_logprobs, 2);
    assert.deepEqual(terminal.response.output[0].content[0].logprobs, logprobs);
    const resource = await completeChecked(body);
    assert.deepEqual(resource.output[0].content[0].logprobs.map((entry: { token: string }) => entry.token), logprobs.map((entry) => entry.token));
  });

  it("sends no log probabilities when not asked: empty arrays, as the spec's fields require", async () => {
    const events = await streamChecked({ model: "stories260K", input: "Once upon a time", max_output_tokens: 16, temperature: 0 });
    for (const delta of ofType(events, "response.output_text.delta")) assert.deepEqual(delta.logprobs, []);
  });
});
