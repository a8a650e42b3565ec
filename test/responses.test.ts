/**
 * End-to-end: the Responses API through the official `openai` client, against a real server on
 * the real stories260K models (one llama.cpp thread). Each answer is checked against the spec's
 * schema (`helpers/responses-schemas.ts`); each creation case runs streamed and not, and the
 * stored response (`retrieve`) must equal what the client was answered, to the last field.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import type { Kysely } from "kysely";
import { createAccount } from "../src/accounts/accounts.ts";
import { createApiKey } from "../src/auth/api-keys.ts";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { checkEventGrammar, responseResourceSchema } from "./helpers/responses-schemas.ts";
import { startTestServer, storiesChatmlModel, storiesModel, type TestServer } from "./helpers/server.ts";

type CreateParams = OpenAI.Responses.ResponseCreateParamsNonStreaming;
type Resource = OpenAI.Responses.Response;

let test: TestServer;
let database: Kysely<Database>;

before(async () => {
  test = await startTestServer({ flags: { models: [storiesModel, `chatml=${storiesChatmlModel}`] } });
  database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
});
after(async () => {
  await database?.destroy();
  await test?.close();
});

/**
 * The resource as the server sent it: the SDK adds `output_text`, and to a stream's final response
 * `output_parsed` and each text part's `parsed`.
 */
function wire(resource: Resource): Record<string, unknown> {
  const { output_text: _text, output_parsed: _parsed, ...rest } = structuredClone(resource) as Resource & { output_parsed?: unknown };
  for (const item of rest.output) {
    if (item.type === "message") for (const part of item.content) delete (part as { parsed?: unknown }).parsed;
  }
  return rest;
}

function assertValidResource(resource: unknown): void {
  const parsed = responseResourceSchema.safeParse(resource);
  assert.ok(parsed.success, parsed.success ? "" : JSON.stringify(parsed.error.issues.slice(0, 3)));
}

/** The assistant text of a resource's message items. */
function textOf(resource: Resource): string {
  return resource.output
    .flatMap((item) => (item.type === "message" ? item.content.flatMap((part) => (part.type === "output_text" ? [part.text] : [])) : []))
    .join("");
}

type Created = { resource: Resource; events: OpenAI.Responses.ResponseStreamEvent[] };

/**
 * Creates a response streamed or not and returns its final resource (for a stream, the terminal
 * event's response, after checking the stream's grammar and that `finalResponse()` agrees).
 * Either way the stored response equals it exactly, when it is stored.
 */
async function create(params: CreateParams, stream: boolean, client: OpenAI = test.client): Promise<Created> {
  let resource: Resource;
  let events: OpenAI.Responses.ResponseStreamEvent[] = [];
  if (!stream) {
    resource = await client.responses.create(params);
  } else {
    const { stream: _stream, ...streamParams } = params;
    const streamed = client.responses.stream(streamParams);
    for await (const event of streamed) events.push(event);
    const final = await streamed.finalResponse();
    const terminal = events.at(-1)!;
    assert.ok(terminal.type === "response.completed" || terminal.type === "response.incomplete", terminal.type);
    resource = (terminal as OpenAI.Responses.ResponseCompletedEvent).response;
    assert.deepEqual(wire(final), wire(resource), "finalResponse() is the terminal event's response");
    const problems = checkEventGrammar(events, { finalResource: wire(resource) });
    assert.deepEqual(problems, []);
  }
  assertValidResource(wire(resource));
  if (params.store !== false) assert.deepEqual(wire(await client.responses.retrieve(resource.id)), wire(resource), "retrieve equals what was answered");
  return { resource, events };
}

const both = [false, true] as const;

describe("responses.create and responses.stream", () => {
  for (const stream of both) {
    const mode = stream ? "streamed" : "not streamed";

    it(`answers a string input (${mode}): the spec's resource, the story the model writes, usage counted`, async () => {
      const { resource, events } = await create({ model: "stories260K", input: "Once upon a time", max_output_tokens: 16, temperature: 0 }, stream);
      assert.equal(resource.object, "response");
      assert.match(resource.id, /^resp_/);
      assert.equal(resource.model, "stories260K");
      assert.equal(resource.status, "incomplete");
      assert.deepEqual(resource.incomplete_details, { reason: "max_output_tokens" });
      assert.equal(resource.output.length, 1);
      const message = resource.output[0]!;
      assert.equal(message.type, "message");
      assert.equal(message.type === "message" && message.role, "assistant");
      assert.ok(textOf(resource).length > 0);
      assert.equal(resource.usage!.output_tokens, 16);
      assert.ok(resource.usage!.input_tokens > 0);
      assert.equal(resource.usage!.total_tokens, resource.usage!.input_tokens + 16);
      assert.equal(resource.temperature, 0);
      assert.equal(resource.max_output_tokens, 16);
      assert.equal((resource as Resource & { store: boolean }).store, true);
      if (stream) {
        const deltas = events.filter((event) => event.type === "response.output_text.delta");
        assert.equal(deltas.map((event) => event.delta).join(""), textOf(resource));
      }
    });

    it(`answers the same story either way at temperature 0 (${mode})`, async () => {
      const params: CreateParams = { model: "stories260K", input: "Once upon a time", max_output_tokens: 24, temperature: 0 };
      const first = await create(params, stream);
      const again = await create(params, !stream);
      assert.equal(textOf(first.resource), textOf(again.resource));
      assert.equal(first.resource.usage!.input_tokens, again.resource.usage!.input_tokens);
    });

    it(`takes items, instructions and system/developer messages (${mode}), counting each in the prompt`, async () => {
      const plain = await create({ model: "chatml", input: [{ role: "user", content: "Tell me a story." }], max_output_tokens: 16, temperature: 0 }, stream);
      const instructed = await create({ model: "chatml", instructions: "You tell short stories.", input: [{ role: "user", content: "Tell me a story." }], max_output_tokens: 16, temperature: 0 }, stream);
      assert.equal(instructed.resource.instructions, "You tell short stories.");
      assert.ok(instructed.resource.usage!.input_tokens > plain.resource.usage!.input_tokens, "the instructions are in the prompt");
      const system = await create(
        {
          model: "chatml",
          input: [
            { type: "message", role: "system", content: "You tell short stories." },
            { type: "message", role: "user", content: [{ type: "input_text", text: "Tell me a story." }] },
          ],
          max_output_tokens: 16,
          temperature: 0,
        },
        stream,
      );
      // Instructions are a system message at the top: the same prompt, the same answer.
      assert.equal(system.resource.usage!.input_tokens, instructed.resource.usage!.input_tokens);
      assert.equal(textOf(system.resource), textOf(instructed.resource));
      const developer = await create(
        {
          model: "chatml",
          input: [
            { role: "developer", content: "You tell short stories." },
            { role: "user", content: "Tell me a story." },
          ],
          max_output_tokens: 16,
          temperature: 0,
        },
        stream,
      );
      assert.equal(developer.resource.usage!.input_tokens, instructed.resource.usage!.input_tokens, "a developer message is a system message to the model");
    });

    it(`continues a conversation sent whole, with the assistant's earlier output_text (${mode})`, async () => {
      const first = await create({ model: "chatml", input: "Tell me a story.", max_output_tokens: 16, temperature: 0 }, stream);
      const second = await create(
        {
          model: "chatml",
          input: [
            { role: "user", content: "Tell me a story." },
            { type: "message", role: "assistant", content: [{ type: "output_text", text: textOf(first.resource), annotations: [] }], id: first.resource.output[0]!.id!, status: "completed" },
            { role: "user", content: "And then?" },
          ],
          max_output_tokens: 16,
          temperature: 0,
        },
        stream,
      );
      assert.ok(second.resource.usage!.input_tokens > first.resource.usage!.input_tokens + 8);
    });

    it(`continues a stored response with previous_response_id (${mode}): the same prompt as the conversation sent whole`, async () => {
      const first = await create({ model: "chatml", instructions: "Be brief.", input: "Tell me a story.", max_output_tokens: 16, temperature: 0 }, stream);
      const continued = await create({ model: "chatml", previous_response_id: first.resource.id, input: "And then?", max_output_tokens: 16, temperature: 0 }, stream);
      assert.equal(continued.resource.previous_response_id, first.resource.id);
      assert.ok(continued.resource.usage!.input_tokens > first.resource.usage!.input_tokens + first.resource.usage!.output_tokens - 2, "the earlier turn is in the prompt");
      // Earlier instructions are not carried over (as OpenAI does): the whole conversation without them.
      const whole = await test.client.responses.inputTokens.count({
        model: "chatml",
        input: [
          { role: "user", content: "Tell me a story." },
          { role: "assistant", content: textOf(first.resource) },
          { role: "user", content: "And then?" },
        ],
      });
      assert.equal(continued.resource.usage!.input_tokens, whole.input_tokens);
      const counted = await test.client.responses.inputTokens.count({ model: "chatml", previous_response_id: first.resource.id, input: "And then?" });
      assert.equal(counted.input_tokens, whole.input_tokens);
    });

    it(`never stores a response with store: false, and refuses to continue it (${mode})`, async () => {
      const { resource } = await create({ model: "stories260K", input: "Once upon a time", max_output_tokens: 16, temperature: 0, store: false }, stream);
      assert.equal((resource as Resource & { store: boolean }).store, false);
      await assertApiError(test.client.responses.retrieve(resource.id), 404, "response_not_found");
      const refused = await assertApiError(test.client.responses.create({ model: "stories260K", previous_response_id: resource.id, input: "More" }), 404, "response_not_found");
      assert.equal(refused.param, "previous_response_id");
    });
  }
});

/** Awaits a call that must fail with an OpenAI error of this status and code; returns it. */
async function assertApiError(call: Promise<unknown>, status: number, code: string): Promise<InstanceType<typeof OpenAI.APIError>> {
  try {
    await call;
  } catch (error) {
    assert.ok(error instanceof OpenAI.APIError, String(error));
    assert.equal(error.status, status, error.message);
    assert.equal(error.code, code, error.message);
    return error;
  }
  assert.fail(`expected a ${status} ${code}`);
}

describe("stored responses", () => {
  it("lists a response's input items, paged by limit and after, in either order", async () => {
    const input: OpenAI.Responses.ResponseInput = [
      { role: "system", content: "one" },
      { role: "user", content: "two" },
      { role: "assistant", content: "three" },
      { role: "user", content: "four" },
      { role: "user", content: [{ type: "input_text", text: "five" }] },
    ];
    const { resource } = await create({ model: "chatml", input, max_output_tokens: 16, temperature: 0 }, false);
    const textOfItem = (item: OpenAI.Responses.ResponseItem) => (item.type === "message" ? (item.content[0] as { text: string }).text : item.type);
    const all = await test.client.responses.inputItems.list(resource.id, { order: "asc" });
    assert.deepEqual(all.data.map(textOfItem), ["one", "two", "three", "four", "five"]);
    for (const item of all.data) assert.match(item.id!, /^msg_/);
    const descending = await test.client.responses.inputItems.list(resource.id, { order: "desc" });
    assert.deepEqual(descending.data.map(textOfItem), ["five", "four", "three", "two", "one"]);
    const defaultOrder = await test.client.responses.inputItems.list(resource.id);
    assert.deepEqual(defaultOrder.data.map(textOfItem), ["five", "four", "three", "two", "one"], "OpenAI lists newest first by default");

    const firstPage = await test.client.responses.inputItems.list(resource.id, { order: "asc", limit: 2 });
    assert.deepEqual(firstPage.data.map(textOfItem), ["one", "two"]);
    assert.equal(firstPage.has_more, true);
    const secondPage = await test.client.responses.inputItems.list(resource.id, { order: "asc", limit: 2, after: firstPage.data.at(-1)!.id! });
    assert.deepEqual(secondPage.data.map(textOfItem), ["three", "four"]);
    // The SDK's own paging walks every page.
    const walked: string[] = [];
    for await (const item of test.client.responses.inputItems.list(resource.id, { order: "desc", limit: 2 })) walked.push(textOfItem(item));
    assert.deepEqual(walked, ["five", "four", "three", "two", "one"]);
    const last = await test.client.responses.inputItems.list(resource.id, { order: "asc", limit: 2, after: all.data[3]!.id! });
    assert.deepEqual(last.data.map(textOfItem), ["five"]);
    assert.equal(last.has_more, false);
  });

  it("deletes a stored response: then it is not found, and cannot be continued", async () => {
    const { resource } = await create({ model: "stories260K", input: "Once upon a time", max_output_tokens: 16, temperature: 0 }, false);
    await test.client.responses.delete(resource.id);
    await assertApiError(test.client.responses.retrieve(resource.id), 404, "response_not_found");
    await assertApiError(test.client.responses.inputItems.list(resource.id), 404, "response_not_found");
    await assertApiError(test.client.responses.delete(resource.id), 404, "response_not_found");
    const continued = await assertApiError(test.client.responses.create({ model: "stories260K", previous_response_id: resource.id, input: "More" }), 404, "response_not_found");
    assert.equal(continued.param, "previous_response_id");
  });

  it("keeps each account's responses its own: another account's id is a 404 that leaks nothing", async () => {
    const account = await createAccount(database, { email: `responses-${Date.now()}@example.com` });
    const otherKey = (await createApiKey(database, { name: "other", accountId: account.id })).key;
    const other = new OpenAI({ baseURL: test.baseURL, apiKey: otherKey, maxRetries: 0 });
    const secret = "The password is swordfish.";
    const { resource } = await create({ model: "stories260K", input: secret, max_output_tokens: 16, temperature: 0 }, false);
    const refusals = [
      await assertApiError(other.responses.retrieve(resource.id), 404, "response_not_found"),
      await assertApiError(other.responses.inputItems.list(resource.id), 404, "response_not_found"),
      await assertApiError(other.responses.delete(resource.id), 404, "response_not_found"),
      await assertApiError(other.responses.create({ model: "stories260K", previous_response_id: resource.id, input: "More", max_output_tokens: 16 }), 404, "response_not_found"),
      await assertApiError(other.responses.inputTokens.count({ model: "stories260K", previous_response_id: resource.id, input: "More" }), 404, "response_not_found"),
    ];
    // An id never made reads the same as another account's.
    const unknown = await assertApiError(other.responses.retrieve(`resp_${"0".repeat(48)}`), 404, "response_not_found");
    for (const refusal of refusals) assert.doesNotMatch(JSON.stringify(refusal.error), /swordfish|stories260K/);
    assert.equal(refusals[0]!.message.replace(resource.id, "ID"), unknown.message.replace(`resp_${"0".repeat(48)}`, "ID"));
    // Still there for its owner.
    assert.equal((await test.client.responses.retrieve(resource.id)).id, resource.id);
  });

  it("counts input tokens exactly as the response's usage counts them (POST /v1/responses/input_tokens)", async () => {
    const params: CreateParams = {
      model: "chatml",
      instructions: "You tell short stories.",
      input: [
        { role: "user", content: "Tell me a story." },
        { role: "assistant", content: "Once there was a cat." },
        { role: "user", content: "And then?" },
      ],
      max_output_tokens: 16,
      temperature: 0,
    };
    const counted = await test.client.responses.inputTokens.count({ model: params.model!, instructions: params.instructions, input: params.input });
    assert.equal(counted.object, "response.input_tokens");
    for (const stream of both) assert.equal((await create(params, stream)).resource.usage!.input_tokens, counted.input_tokens);
    const plain = await test.client.responses.inputTokens.count({ model: "stories260K", input: "Once upon a time" });
    assert.equal(plain.input_tokens, (await create({ model: "stories260K", input: "Once upon a time", max_output_tokens: 16 }, false)).resource.usage!.input_tokens);
  });
});
