/**
 * `GET /v1/models`, `GET /v1/models/{id}`, `/health` and `/ready`, through the openai client.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import { startTestServer, storiesChatmlModel, storiesModel, type TestServer } from "./helpers/server.ts";

let test: TestServer;
before(async () => {
  test = await startTestServer({ flags: { models: [storiesModel, `team/chat-model=${storiesChatmlModel}`], context_size: "1024" } });
});
after(async () => {
  await test?.close();
});

describe("the model catalog", () => {
  it("lists every model with context length, modalities, pricing, parameters and status", async () => {
    const page = await test.client.models.list();
    const models = page.data as unknown as Array<Record<string, any>>;
    assert.deepEqual(models.map((model) => model.id), ["stories260K", "team/chat-model"]);
    for (const model of models) {
      assert.equal(model.object, "model");
      assert.equal(typeof model.created, "number");
      assert.equal(typeof model.owned_by, "string");
      assert.equal(model.context_length, 1024, "the configured context, capped by the model's own");
      assert.deepEqual(model.modalities, { input: ["text"], output: ["text"] });
      assert.deepEqual(model.pricing, { prompt: 0, cached_prompt: 0, completion: 0 });
      assert.ok(model.supported_parameters.includes("temperature"));
      assert.ok(model.supported_parameters.includes("stop"));
      for (const parameter of ["response_format", "tools", "tool_choice", "parallel_tool_calls"]) {
        assert.ok(model.supported_parameters.includes(parameter), `${parameter} is advertised`);
      }
      assert.deepEqual(model.status, { state: "ready", members_healthy: 1, members_total: 1 }, "an embedded model is one member: this process");
    }
  });

  it("retrieves one model by id, slashes included", async () => {
    const model = (await test.client.models.retrieve("team/chat-model")) as unknown as Record<string, any>;
    assert.equal(model.id, "team/chat-model");
    const plain = (await test.client.models.retrieve("stories260K")) as unknown as Record<string, any>;
    assert.equal(plain.context_length, 1024);
  });

  it("reads an id whose slash is percent-encoded, and one holding '%', decoding the path once", async () => {
    const encoded = await fetch(`${test.url}/v1/models/team%2Fchat-model`, { headers: { authorization: `Bearer ${test.key}` } });
    assert.equal(encoded.status, 200);
    assert.equal(((await encoded.json()) as { id: string }).id, "team/chat-model");
    const percent = await fetch(`${test.url}/v1/models/100%25`, { headers: { authorization: `Bearer ${test.key}` } });
    assert.equal(percent.status, 404, "an unknown id, not a 500 from decoding '%' twice");
    const body = (await percent.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, "model_not_found");
    assert.match(body.error.message, /100%/);
  });

  it("answers 404 model_not_found for an unknown id", async () => {
    await assert.rejects(
      test.client.models.retrieve("nope"),
      (error: unknown) => error instanceof OpenAI.NotFoundError && error.code === "model_not_found",
    );
  });
});

describe("health and readiness", () => {
  it("answers /health and /ready without a key", async () => {
    const health = await fetch(`${test.url}/health`);
    assert.equal(health.status, 200);
    assert.deepEqual(await health.json(), { status: "ok" });
    const ready = await fetch(`${test.url}/ready`);
    assert.equal(ready.status, 200);
    assert.deepEqual(await ready.json(), { status: "ready", models: { stories260K: "ready", "team/chat-model": "ready" } });
  });
});
