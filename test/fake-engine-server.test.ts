/**
 * A full server (HTTP, keys, admission, billing, SSE) on the scripted fake engine, driven by the
 * official openai client: what end-to-end tests of a wire dialect run on where a real model adds
 * nothing (`startTestServer({ engines })`).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { FakeEngine, fakePromptTokens } from "../src/engines/fake/fake-engine.ts";
import type { GenerationRequest } from "../src/engines/engine.ts";
import { startTestServer, type TestServer } from "./helpers/server.ts";

describe("a server on the fake engine", () => {
  let server: TestServer;
  const engine = new FakeEngine({ startLoading: true, script: () => [{ steps: [{ text: "Hello" }, { text: "," }, { text: " world" }] }] });
  const messages = [{ role: "user" as const, content: "Say hello." }];
  const promptTokens = fakePromptTokens({ messages } as unknown as GenerationRequest);

  before(async () => {
    server = await startTestServer({ engines: { fake: engine } });
  });
  after(async () => {
    await server?.close();
  });

  it("opened the engine it was given and lists its model", async () => {
    assert.equal(engine.status().state, "ready");
    const models = await server.client.models.list();
    assert.deepEqual(models.data.map((model) => model.id), ["fake"]);
  });

  it("answers a chat completion from the fake's script", async () => {
    const started = engine.started;
    const completion = await server.client.chat.completions.create({ model: "fake", messages, max_tokens: 16 });
    assert.equal(engine.started, started + 1, "the fake generated it");
    assert.equal(completion.model, "fake");
    assert.equal(completion.choices[0]!.message.content, "Hello, world");
    assert.equal(completion.choices[0]!.finish_reason, "stop");
    assert.equal(completion.usage?.prompt_tokens, promptTokens);
    assert.equal(completion.usage?.completion_tokens, 3);
  });

  it("streams a chat completion from the fake's script, usage last", async () => {
    const stream = await server.client.chat.completions.create({ model: "fake", messages, max_tokens: 2, stream: true, stream_options: { include_usage: true } });
    let text = "";
    const finishes: (string | null)[] = [];
    let usage: { prompt_tokens: number; completion_tokens: number } | undefined | null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      if (chunk.choices[0]?.finish_reason != null) finishes.push(chunk.choices[0].finish_reason);
      if (chunk.usage != null) usage = chunk.usage;
    }
    // max_tokens 2 cuts the three-token script: the fake ends it `length`, as a real engine would.
    assert.equal(text, "Hello,");
    assert.deepEqual(finishes, ["length"]);
    assert.equal(usage?.prompt_tokens, promptTokens);
    assert.equal(usage?.completion_tokens, 2);
  });
});
