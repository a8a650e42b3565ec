/**
 * Image content parts end to end: `/v1/models` says which models read images, and a text-only
 * model answers an `image_url` part (data URL or http URL, streaming or not) with a 400 that
 * names the part, never by ignoring it. The embedded engine (node-llama-cpp 3.22) loads no vision
 * projectors, so every GGUF model here is text-only.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import { postJson, startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

type Message = OpenAI.Chat.Completions.ChatCompletionMessageParam;

/** A 1×1 PNG. */
const png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

let test: TestServer;
let configDirectory: string;

before(async () => {
  configDirectory = temporaryDirectory();
  const configFile = path.join(configDirectory, "turnpike.json");
  fs.writeFileSync(configFile, JSON.stringify({ models: [{ id: "story", path: storiesModel, input_modalities: ["text"] }] }));
  test = await startTestServer({ configFile });
});
after(async () => {
  await test?.close();
  fs.rmSync(configDirectory, { recursive: true, force: true });
});

const withImage = (url: string): Message[] => [
  { role: "system", content: "Describe pictures." },
  {
    role: "user",
    content: [
      { type: "text", text: "What is in this picture?" },
      { type: "image_url", image_url: { url, detail: "low" } },
    ],
  },
];

describe("image input", () => {
  it("lists the model's input modalities as text only", async () => {
    const model = (await test.client.models.retrieve("story")) as unknown as { modalities: { input: string[]; output: string[] } };
    assert.deepEqual(model.modalities, { input: ["text"], output: ["text"] });
  });

  for (const stream of [false, true]) {
    for (const [kind, url] of [
      ["a data URL", png],
      ["an http URL", "https://example.com/cat.png"],
    ] as const) {
      it(`refuses ${kind} for a text-only model with 400 model_does_not_support_images naming the part (${stream ? "streaming" : "non-streaming"})`, async () => {
        const error = await test.client.chat.completions.create({ model: "story", messages: withImage(url), max_tokens: 4, stream }).then(
          () => assert.fail("expected a 400"),
          (caught: unknown) => caught,
        );
        assert.ok(error instanceof OpenAI.BadRequestError, String(error));
        assert.equal(error.code, "model_does_not_support_images");
        assert.equal(error.type, "invalid_request_error");
        assert.equal(error.param, "messages[1].content[1]");
        assert.match(error.message, /does not accept images/);
      });
    }
  }

  it("answers with the OpenAI error body, and still serves text content parts", async () => {
    const response = await postJson(`${test.baseURL}/chat/completions`, { model: "story", messages: withImage(png) }, { authorization: `Bearer ${test.key}` });
    assert.equal(response.status, 400);
    assert.deepEqual(Object.keys(response.body.error).sort(), ["code", "message", "param", "type"]);
    const text = await test.client.chat.completions.create({
      model: "story",
      messages: [{ role: "user", content: [{ type: "text", text: "What is in this picture?" }] }],
      max_tokens: 4,
      temperature: 0,
    });
    assert.equal(text.choices.length, 1);
  });

  it("refuses an image part without a URL with 400 naming the message's content", async () => {
    const response = await postJson(
      `${test.baseURL}/chat/completions`,
      { model: "story", messages: [{ role: "user", content: [{ type: "image_url", image_url: {} }] }] },
      { authorization: `Bearer ${test.key}` },
    );
    assert.equal(response.status, 400);
    assert.equal(response.body.error.code, "invalid_request_error");
    assert.match(response.body.error.param, /^messages\[0\]\.content/);
  });
});
