/**
 * End-to-end: Anthropic's Messages API through the official `@anthropic-ai/sdk`, against a real
 * server on the real stories260K model (one llama.cpp thread). Each case runs with
 * `messages.create` and with `messages.stream(...).finalMessage()`; every answer is checked against
 * the spec's schemas (`helpers/messages-schemas.ts`), and every stream, read raw beside the SDK
 * (the same bytes), event by event against the spec's grammar and replayed to the SDK's final
 * message. `count_tokens` equals what the message reports as its prompt.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import { assertValidMessage, checkedMessagesClient, countParamsOf, GREEDY, promptOf, textOf, type CheckedMessagesClient, type Message, type Params } from "./helpers/messages-client.ts";
import { errorBodySchema } from "./helpers/messages-schemas.ts";
import { postJson, startTestServer, type TestServer } from "./helpers/server.ts";

let test: TestServer;
let checked: CheckedMessagesClient;
let client: Anthropic;

before(async () => {
  test = await startTestServer({});
  checked = checkedMessagesClient(test.url, test.key);
  client = checked.client;
});
after(async () => {
  await test?.close();
});

/**
 * Creates a message streamed or not. A stream is read by the SDK (`finalMessage()`) and, raw, by
 * the grammar check; both must agree (`helpers/messages-client.ts`).
 */
const create = (params: Params, stream: boolean): Promise<Message> => checked.create(params, stream);

/** The prompt's tokens, as `count_tokens` counts them for `params`. */
async function counted(params: Params): Promise<number> {
  return (await client.messages.countTokens(countParamsOf(params))).input_tokens;
}

const weather: Anthropic.Tool = {
  name: "get_weather",
  description: "The weather in a city",
  input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
};

describe("messages.create and messages.stream on stories260K", () => {
  for (const stream of [false, true]) {
    const mode = stream ? "streamed" : "not streamed";

    it(`answers a text prompt (${mode}): Anthropic's message, the max_tokens stop, the prompt counted exactly as count_tokens counts it`, async () => {
      const params: Params = { model: "stories260K", max_tokens: 16, ...GREEDY, messages: [{ role: "user", content: "Once upon a time" }] };
      const message = await create(params, stream);
      assert.equal(message.type, "message");
      assert.equal(message.role, "assistant");
      assert.equal(message.model, "stories260K");
      assert.equal(message.stop_reason, "max_tokens");
      assert.equal(message.stop_sequence, null);
      assert.equal(message.content.length, 1);
      assert.ok(textOf(message).length > 0);
      assert.equal(message.usage.output_tokens, 16);
      assert.equal(message.usage.cache_creation_input_tokens, 0);
      assert.equal(promptOf(message), await counted(params), "input + cache read = count_tokens");
    });

    it(`takes the system prompt as text blocks with cache_control, and a multi-turn conversation (${mode})`, async () => {
      const params: Params = {
        model: "stories260K",
        max_tokens: 12,
        ...GREEDY,
        system: [
          { type: "text", text: "You tell stories.", cache_control: { type: "ephemeral" } },
          { type: "text", text: "Short ones." },
        ],
        messages: [
          { role: "user", content: "Tell me about a cat." },
          { role: "assistant", content: [{ type: "text", text: "The cat sat on the mat." }] },
          { role: "user", content: [{ type: "text", text: "And then?", cache_control: { type: "ephemeral" } }] },
        ],
      };
      const message = await create(params, stream);
      assert.ok(textOf(message).length > 0);
      assert.equal(promptOf(message), await counted(params));
      const shorter = await counted({ ...params, system: undefined });
      assert.ok(shorter < promptOf(message), "the system blocks are in the prompt");
    });

    it(`calls the tool tool_choice forces, its input a JSON object (${mode})`, async () => {
      const message = await create({ model: "stories260K", max_tokens: 200, ...GREEDY, tools: [weather], tool_choice: { type: "tool", name: "get_weather" }, messages: [{ role: "user", content: "Weather in Paris?" }] }, stream);
      assert.equal(message.stop_reason, "tool_use");
      const uses = message.content.filter((block) => block.type === "tool_use");
      assert.equal(uses.length, 1);
      const use = uses[0]!;
      assert.equal(use.name, "get_weather");
      assert.match(use.id, /^toolu_/);
      assert.equal(typeof (use.input as { city?: unknown }).city, "string");
    });

    it(`answers after a tool_result turn (${mode})`, async () => {
      const params: Params = {
        model: "stories260K",
        max_tokens: 12,
        ...GREEDY,
        tools: [weather],
        messages: [
          { role: "user", content: "Weather in Paris?" },
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_paris", name: "get_weather", input: { city: "Paris" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_paris", content: "Sunny, 22 degrees" }] },
        ],
      };
      const message = await create(params, stream);
      assert.ok(["end_turn", "max_tokens", "tool_use"].includes(message.stop_reason!), message.stop_reason!);
      assert.equal(promptOf(message), await counted(params));
    });

    it(`stops at a stop sequence, which the text does not hold (${mode})`, async () => {
      const free = await create({ model: "stories260K", max_tokens: 40, ...GREEDY, messages: [{ role: "user", content: "Once upon a time" }] }, false);
      // A word the model writes at temperature 0, after its first token.
      const word = textOf(free).split(/\s+/).filter((candidate) => candidate.length >= 3).at(1)!;
      assert.ok(word !== undefined, textOf(free));
      const message = await create({ model: "stories260K", max_tokens: 40, ...GREEDY, stop_sequences: [word], messages: [{ role: "user", content: "Once upon a time" }] }, stream);
      assert.ok(!textOf(message).includes(word), `${JSON.stringify(textOf(message))} holds ${word}`);
      assert.ok(message.usage.output_tokens < 40);
      // `stop_sequence` once the engine says which sequence it met; never a guess before.
      if (message.stop_reason === "stop_sequence") assert.equal(message.stop_sequence, word);
      else assert.deepEqual([message.stop_reason, message.stop_sequence], ["end_turn", null]);
    });

    it(`lowers a max_tokens larger than the context to what it leaves, and stops at it with max_tokens (${mode})`, async () => {
      const [model] = (await fetch(`${test.baseURL}/models`, { headers: { authorization: `Bearer ${test.key}` } }).then((response) => response.json())).data;
      // The SDK refuses a non-streamed request it expects to take over 10 minutes (max_tokens over ~21,000).
      const message = await create({ model: "stories260K", max_tokens: stream ? 64_000 : 20_000, messages: [{ role: "user", content: "Once upon a time" }] }, stream);
      assert.equal(message.stop_reason, "max_tokens");
      assert.equal(promptOf(message) + message.usage.output_tokens, model.context_length, "prompt + completion fill the context");
    });
  }
});

describe("refusals in Anthropic's shape, as the SDK's error classes", () => {
  it("refuses an image sent to a text-only model: BadRequestError naming the block", async () => {
    const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg==";
    const error = await client.messages
      .create({ model: "stories260K", max_tokens: 8, messages: [{ role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image", source: { type: "base64", media_type: "image/png", data: png } }] }] })
      .then(() => assert.fail("answered"), (caught: unknown) => caught);
    assert.ok(error instanceof Anthropic.BadRequestError, String(error));
    assert.equal(error.type, "invalid_request_error");
    assert.match(error.message, /messages\[0\]\.content\[1\]/);
    assert.match(error.requestID ?? "", /\S/);
  });

  it("refuses a prompt that leaves no room in the context with a 400", async () => {
    const error = await client.messages.create({ model: "stories260K", max_tokens: 8, messages: [{ role: "user", content: "story time ".repeat(2000) }] }).then(() => assert.fail("answered"), (caught: unknown) => caught);
    assert.ok(error instanceof Anthropic.BadRequestError, String(error));
    assert.match(error.message, /context length/);
  });

  it("refuses a wrong key (AuthenticationError) and an unknown model (NotFoundError); takes the key as a bearer token too", async () => {
    const wrong = new Anthropic({ baseURL: test.url, apiKey: "sk-wrong", maxRetries: 0 });
    const denied = await wrong.messages.create({ model: "stories260K", max_tokens: 4, messages: [{ role: "user", content: "Hi" }] }).then(() => assert.fail("answered"), (caught: unknown) => caught);
    assert.ok(denied instanceof Anthropic.AuthenticationError, String(denied));
    assert.equal(denied.type, "authentication_error");
    const missing = await client.messages.create({ model: "no-such-model", max_tokens: 4, messages: [{ role: "user", content: "Hi" }] }).then(() => assert.fail("answered"), (caught: unknown) => caught);
    assert.ok(missing instanceof Anthropic.NotFoundError, String(missing));
    assert.equal(missing.type, "not_found_error");
    const bearer = new Anthropic({ baseURL: test.url, apiKey: null, authToken: test.key, maxRetries: 0 });
    const message = await bearer.messages.create({ model: "stories260K", max_tokens: 4, messages: [{ role: "user", content: "Hi" }] });
    assertValidMessage(message);
  });

  it("answers the body parser's and the schema's refusals in Anthropic's shape, with request-id", async () => {
    const headers = { "x-api-key": test.key, "anthropic-version": "2023-06-01" };
    for (const [body, pattern] of [
      ["{not json", /JSON/],
      [{ model: "stories260K", messages: [{ role: "user", content: "Hi" }] }, /max_tokens/],
    ] as const) {
      const answer = await postJson(`${test.url}/v1/messages`, body, headers);
      assert.equal(answer.status, 400, answer.text);
      const parsed = errorBodySchema.safeParse(answer.body);
      assert.ok(parsed.success, answer.text);
      assert.equal(answer.body.error.type, "invalid_request_error");
      assert.match(answer.body.error.message, pattern);
      assert.equal(answer.headers.get("request-id"), answer.body.request_id);
    }
    const unauthenticated = await postJson(`${test.url}/v1/messages/count_tokens`, { model: "stories260K", messages: [] }, { "anthropic-version": "2023-06-01" });
    assert.equal(unauthenticated.status, 401);
    assert.equal(unauthenticated.body.error.type, "authentication_error");
    assert.match(unauthenticated.body.error.message, /x-api-key/);
  });
});

describe("the model list for Anthropic's clients", () => {
  it("lists the models in Anthropic's shape to a request with anthropic-version, and /v1/messages among each model's endpoints", async () => {
    const page = await client.models.list();
    assert.deepEqual(
      page.data.map((model) => ({ ...model, created_at: typeof model.created_at })),
      [{ type: "model", id: "stories260K", display_name: "stories260K", created_at: "string" }],
    );
    assert.ok(!Number.isNaN(Date.parse(page.data[0]!.created_at)));
    const one = await client.models.retrieve("stories260K");
    assert.equal(one.id, "stories260K");
    const openai = await test.client.models.list();
    assert.ok((openai.data[0] as unknown as { endpoints: string[] }).endpoints.includes("/v1/messages"));
  });
});
