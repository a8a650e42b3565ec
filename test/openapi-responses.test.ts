/**
 * The answers `/openapi.json` documents are the answers the server gives: real routes of a real
 * server (with a credit value, so money fields appear, and one without), every body checked with
 * ajv against the document's schema for its operation and status, and walked so that a field
 * the schema does not declare fails the test (the schemas are open objects, as OpenAI's are, so
 * ajv alone would let an undocumented field through). Every streamed chunk is checked too, and
 * every operation with a response schema must have been exercised (Stripe's two excepted).
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { API_OPERATIONS } from "../src/http/routes/operations.ts";
import { embeddingModelPath } from "./helpers/test-models.ts";
import { readSse, startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { fimModelPath } from "./helpers/test-models.ts";
import { ConsoleClient } from "./helpers/console.ts";
import { setupCodeOf } from "./helpers/console.ts";
import { answerSchema, assertConforms, inlineRefs, resolved, undeclaredProperties, validatorIn } from "./helpers/openapi.ts";

type Json = Record<string, any>;

/** Operations whose answers need Stripe; `payments.test.ts` covers them. */
const NOT_EXERCISED = new Set(["post /api/billing/checkout", "post /api/billing/stripe/webhook"]);

describe("the answers /openapi.json documents", () => {
  let priced: TestServer;
  let plain: TestServer;
  let document: Json;
  let plainDocument: Json;
  const configDirectory = temporaryDirectory("turnpike-openapi-responses-");
  /** `method path` of each operation whose success answer was checked. */
  const checked = new Set<string>();

  /** Checks `body` against the document (its schema, and no field the schema leaves out), and notes the operation as checked. */
  function conforms(method: string, route: string, status: number, body: unknown, options: { contentType?: string; from?: Json } = {}): void {
    assertConforms(options.from ?? document, method, route, status, body, options.contentType);
    if (status < 300) checked.add(`${method} ${route}`);
  }

  /** Calls the server and checks the answer against `route` (the documented path) with the status expected. */
  async function call(
    client: ConsoleClient,
    method: "get" | "post" | "patch" | "delete",
    url: string,
    options: { route?: string; status?: number; body?: unknown; from?: Json } = {},
  ): Promise<any> {
    const response = await client.request(method.toUpperCase(), url, options.body);
    const route = options.route ?? url.split("?")[0]!;
    const operation = API_OPERATIONS.find((candidate) => candidate.method === method && candidate.path === route);
    const status = options.status ?? operation?.success.status ?? 200;
    assert.equal(response.status, status, `${method} ${url}: ${response.text.slice(0, 500)}`);
    conforms(method, route, status, response.body, { from: options.from });
    return response.body;
  }

  let operator: ConsoleClient;
  let admin: ConsoleClient;
  let alice: ConsoleClient;
  let bob: ConsoleClient;

  before(async () => {
    const configFile = path.join(configDirectory, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        credit_value: { currency: "USD", per_million_credits: "2.50" },
        models: [
          { id: "story", path: storiesModel, pricing: { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 } },
          { id: "embed", path: embeddingModelPath(), embeddings: { matryoshka: [16] }, pricing: { prompt: 1_000_000, embeddings: 250_000 } },
        ],
        plans: [{ id: "starter", name: "Starter", price: { amount: 500, currency: "usd" }, credit: 500_000, days: 30, rpm: 600 }],
      }),
    );
    priced = await startTestServer({ configFile });
    // A model whose file is missing stays unavailable: `/ready` answers 503.
    plain = await startTestServer({ flags: { models: [storiesModel, "missing=/nonexistent/missing.gguf"] }, env: { TURNPIKE_CREDIT_VALUE: "" } });
    operator = new ConsoleClient(priced.url, { authorization: `Bearer ${priced.key}` });
    admin = new ConsoleClient(priced.url, { "x-forwarded-for": "10.0.0.1" });
    alice = new ConsoleClient(priced.url);
    bob = new ConsoleClient(priced.url);
    document = (await new ConsoleClient(priced.url).get("/openapi.json")).body;
    plainDocument = (await new ConsoleClient(plain.url).get("/openapi.json")).body;
    // The document itself is an answer it documents.
    conforms("get", "/openapi.json", 200, document);
  });
  after(async () => {
    await priced?.close();
    await plain?.close();
    fs.rmSync(configDirectory, { recursive: true, force: true });
  });

  it("documents a schema for every JSON answer, and a stream's event for chat completions", () => {
    for (const operation of API_OPERATIONS) {
      const content = document.paths[operation.path][operation.method].responses[String(operation.success.status)].content;
      if (operation.success.contentType !== undefined) {
        assert.deepEqual(content[operation.success.contentType].schema, { type: "string" });
        continue;
      }
      assert.ok(Object.keys(content["application/json"].schema).length > 0, `${operation.method} ${operation.path}: no response schema`);
    }
    const chat = document.paths["/v1/chat/completions"].post.responses["200"].content;
    assert.equal(resolved(document, chat["text/event-stream"].schema).properties.object.const, "chat.completion.chunk");
    assert.ok(!JSON.stringify(document).includes('"additionalProperties":false'), "answers are open objects");
  });

  it("answers sign-up, sign-in, the session, the setup state and sign-out as documented", async () => {
    await call(new ConsoleClient(priced.url), "get", "/api/auth/setup");
    await call(admin, "post", "/api/auth/signup", { body: { email: "admin@example.com", password: "correct horse battery", setup_code: setupCodeOf(priced) } });
    admin.csrfToken = (await admin.get("/api/auth/session")).body.csrf_token;
    const signedUp = await call(alice, "post", "/api/auth/signup", { body: { email: "alice@example.com", password: "correct horse battery" } });
    alice.csrfToken = signedUp.csrf_token;
    await call(bob, "post", "/api/auth/signup", { body: { email: "bob@example.com", password: "correct horse battery" } });
    bob.csrfToken = (await bob.get("/api/auth/session")).body.csrf_token;
    const signedIn = await call(bob, "post", "/api/auth/signin", { body: { email: "bob@example.com", password: "correct horse battery" } });
    bob.csrfToken = signedIn.csrf_token;
    await call(bob, "get", "/api/auth/session");
    await call(bob, "post", "/api/auth/signout");
    // Errors follow the document too: a wrong password, no session.
    await call(bob, "post", "/api/auth/signin", { body: { email: "bob@example.com", password: "not the password" }, status: 401 });
    await call(bob, "get", "/api/auth/session", { status: 401 });
    await bob.signIn("bob@example.com");
  });

  it("answers the service routes as documented, with and without a credit value, and /ready's 503 while a model is unavailable", async () => {
    const anyone = new ConsoleClient(priced.url);
    await call(anyone, "get", "/health");
    await call(anyone, "get", "/ready");
    const settings = await call(anyone, "get", "/api/settings");
    assert.deepEqual(settings.credit_value, { currency: "usd", per_million_credits: "2.5" });
    const notReady = await call(new ConsoleClient(plain.url), "get", "/ready", { status: 503, from: plainDocument });
    assert.deepEqual(notReady, { status: "not_ready", models: { stories260K: "ready", missing: "unavailable" } });
    const plainSettings = await call(new ConsoleClient(plain.url), "get", "/api/settings", { from: plainDocument });
    assert.equal(plainSettings.credit_value, null);
  });

  it("answers the catalog as documented, prices in money included", async () => {
    const models = await call(operator, "get", "/v1/models");
    assert.equal(models.data[0].pricing.currency, "usd");
    await call(operator, "get", "/v1/models/story", { route: "/v1/models/{id}" });
    await call(operator, "get", "/v1/models/nope", { route: "/v1/models/{id}", status: 404 });
    await call(alice, "get", "/api/models");
    await call(new ConsoleClient(priced.url), "get", "/v1/models", { status: 401 });
    const plainModels = await call(new ConsoleClient(plain.url, { authorization: `Bearer ${plain.key}` }), "get", "/v1/models", { from: plainDocument });
    assert.equal(plainModels.data[0].pricing.currency, undefined);
  });

  it("answers chat completions as documented: JSON, and every chunk of a stream", async () => {
    const request = { model: "story", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 6 };
    const completion = await call(operator, "post", "/v1/chat/completions", { body: request });
    assert.equal(completion.object, "chat.completion");
    const withLogprobs = await call(operator, "post", "/v1/chat/completions", { body: { ...request, n: 2, logprobs: true, top_logprobs: 2 } });
    assert.equal(withLogprobs.choices.length, 2);
    assert.ok(withLogprobs.choices[0].logprobs.content.length > 0);
    await call(operator, "post", "/v1/chat/completions", { body: { ...request, model: "nope" }, status: 404 });

    for (const extra of [{}, { stream_options: { include_usage: true }, logprobs: true, top_logprobs: 2, n: 2 }]) {
      const response = await fetch(`${priced.baseURL}/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${priced.key}`, "content-type": "application/json" },
        body: JSON.stringify({ ...request, stream: true, ...extra }),
      });
      assert.equal(response.status, 200);
      assert.match(response.headers.get("content-type") ?? "", /^text\/event-stream/);
      const { events } = await readSse(response);
      assert.equal(events.at(-1), "[DONE]");
      const chunks = events.slice(0, -1).map((event) => JSON.parse(event));
      assert.ok(chunks.length >= 3, `${chunks.length} chunks`);
      for (const chunk of chunks) conforms("post", "/v1/chat/completions", 200, chunk, { contentType: "text/event-stream" });
      if ("stream_options" in extra) assert.equal(chunks.at(-1).usage.total_tokens > 0, true);
    }
  });

  it("answers text completions as documented: JSON with legacy logprobs, a refusal, and every chunk of a stream", async () => {
    const request = { model: "story", prompt: ["Once upon a time", "The dog"], max_tokens: 6 };
    const completion = await call(operator, "post", "/v1/completions", { body: request });
    assert.equal(completion.object, "text_completion");
    const withLogprobs = await call(operator, "post", "/v1/completions", { body: { ...request, n: 2, logprobs: 2, echo: false } });
    assert.equal(withLogprobs.choices.length, 4);
    assert.ok(withLogprobs.choices[0].logprobs.tokens.length > 0);
    await call(operator, "post", "/v1/completions", { body: { ...request, suffix: "the end" }, status: 400 });
    const response = await fetch(`${priced.baseURL}/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${priced.key}`, "content-type": "application/json" },
      body: JSON.stringify({ ...request, stream: true, stream_options: { include_usage: true }, logprobs: 1, echo: false }),
    });
    assert.equal(response.status, 200);
    const { events } = await readSse(response);
    assert.equal(events.at(-1), "[DONE]");
    const chunks = events.slice(0, -1).map((event) => JSON.parse(event));
    assert.ok(chunks.length >= 3, `${chunks.length} chunks`);
    for (const chunk of chunks) conforms("post", "/v1/completions", 200, chunk, { contentType: "text/event-stream" });
    assert.equal(chunks.at(-1).usage.total_tokens > 0, true);
  });

  it("answers /infill and /v1/infill as documented: llama-server's result, and every event of a stream", async () => {
    const fim = await startTestServer({ flags: { models: [`story-fim=${fimModelPath()}`], context_size: "512" } });
    try {
      const post = (pathname: string, body: unknown) =>
        fetch(`${fim.url}${pathname}`, { method: "POST", headers: { authorization: `Bearer ${fim.key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
      const request = { input_prefix: "Once upon a time", input_suffix: " The end.", input_extra: [{ filename: "a.txt", text: "Lily had a ball." }], n_predict: 6 };
      for (const pathname of ["/infill", "/v1/infill"]) {
        const response = await post(pathname, request);
        assert.equal(response.status, 200);
        conforms("post", pathname, 200, await response.json());
      }
      const { events } = await readSse(await post("/infill", { ...request, stream: true }));
      assert.ok(events.length >= 2 && !events.includes("[DONE]"), `${events.length} events`);
      for (const event of events) conforms("post", "/infill", 200, JSON.parse(event), { contentType: "text/event-stream" });
    } finally {
      await fim.close();
    }
  });

  it("answers plans, codes, redemption and grants as documented", async () => {
    await call(alice, "get", "/api/plans");
    await call(admin, "get", "/api/admin/plans");
    await call(admin, "post", "/api/admin/plans", { body: { id: "pro", name: "Pro", price: { amount: 2000, currency: "usd" }, credit: 2_500_000, days: null, models: ["story"] } });
    await call(admin, "patch", "/api/admin/plans/pro", { route: "/api/admin/plans/{id}", body: { rpm: 120 } });
    await call(admin, "patch", "/api/admin/plans/none", { route: "/api/admin/plans/{id}", body: { rpm: 120 }, status: 404 });
    const codes = await call(admin, "post", "/api/admin/codes", { body: { plan: "starter", count: 2 } });
    await call(alice, "post", "/api/billing/redeem", { body: { code: codes.data[0].code } });
    await call(alice, "post", "/api/billing/redeem", { body: { code: codes.data[0].code }, status: 409 });
    await call(admin, "get", "/api/admin/codes");
    const queues = await call(admin, "get", "/api/admin/queues");
    assert.ok(queues.data.some((queue: Json) => queue.model === "story"), "every model's queue");
    const accounts = await call(admin, "get", "/api/admin/accounts");
    const bobId = accounts.data.find((account: Json) => account.email === "bob@example.com").id;
    await call(admin, "post", `/api/admin/accounts/${bobId}/grant`, { route: "/api/admin/accounts/{id}/grant", body: { plan: "pro" } });
    await call(admin, "post", `/api/admin/accounts/${bobId}/disable`, { route: "/api/admin/accounts/{id}/disable" });
    await call(admin, "post", `/api/admin/accounts/${bobId}/enable`, { route: "/api/admin/accounts/{id}/enable" });
    await call(alice, "get", "/api/admin/accounts", { status: 403 });
    await call(alice, "get", "/api/account");
  });

  it("answers keys, usage and billing history as documented, with costs in money", async () => {
    const created = await call(alice, "post", "/api/keys", { body: { name: "laptop", scope: "account", spend_cap: 400_000, models: ["story"], rpm: 60 } });
    const aliceKey = new ConsoleClient(priced.url, { authorization: `Bearer ${created.key}` });
    await call(aliceKey, "post", "/v1/chat/completions", { body: { model: "story", messages: [{ role: "user", content: "Hi" }], max_tokens: 3 } });
    const spare = await call(aliceKey, "post", "/api/keys", { body: { name: "child", scope: "inference", models: ["story"], spend_cap: 1000, rpm: 30 } });
    await call(alice, "get", "/api/keys");
    await call(alice, "delete", `/api/keys/${spare.id}`, { route: "/api/keys/{id}" });
    await call(alice, "delete", "/api/keys/key_none", { route: "/api/keys/{id}", status: 404 });
    const keys = await call(admin, "get", "/api/admin/keys");
    assert.ok(keys.data.some((key: Json) => key.account_email === null), "the operator's key has no owner");
    await call(admin, "delete", `/api/admin/keys/${created.id}`, { route: "/api/admin/keys/{id}" });
    // Usage is recorded, and holds settled, in the group commit after each answer.
    await priced.server.usageWritten();

    for (const groupBy of ["day", "model", "key"]) {
      const usage = await call(operator, "get", `/api/usage?group_by=${groupBy}`);
      assert.equal(usage.currency, "usd");
      assert.ok(usage.data.length > 0 && usage.data.every((row: Json) => typeof row.cost_money === "string"), JSON.stringify(usage.data));
    }
    await call(alice, "get", "/api/usage?group_by=model");
    const requests = await call(operator, "get", "/api/usage/requests?limit=2");
    assert.equal(requests.has_more, true);
    assert.equal(typeof requests.data[0].cost_money, "string");
    await call(operator, "get", `/api/usage/requests?limit=2&after=${requests.data[1].id}`, { route: "/api/usage/requests" });
    await call(operator, "get", "/api/usage?from=2026-01-02&to=2026-01-01", { route: "/api/usage", status: 400 });

    const history = await call(alice, "get", "/api/billing/history?limit=10");
    assert.ok(history.data.some((entry: Json) => entry.kind === "settle") && history.data.some((entry: Json) => entry.kind === "grant"), JSON.stringify(history.data));
    await call(operator, "get", "/api/billing/history", { status: 400 });
  });

  it("answers the Responses API as documented: a response, its stream's events, the stored one, its input items, a cancel, a count and a deletion", async () => {
    const ask = { model: "story", input: "Once upon a time", max_output_tokens: 16, temperature: 0 };
    const created = await call(operator, "post", "/v1/responses", { body: ask });
    assert.equal(created.object, "response");
    const response = await fetch(`${priced.baseURL}/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${priced.key}`, "content-type": "application/json" },
      body: JSON.stringify({ ...ask, stream: true, include: ["message.output_text.logprobs"], top_logprobs: 2 }),
    });
    assert.equal(response.status, 200);
    const { events } = await readSse(response);
    assert.equal(events.at(-1), "[DONE]");
    const streamed = events.slice(0, -1).map((event) => JSON.parse(event));
    for (const event of streamed) conforms("post", "/v1/responses", 200, event, { contentType: "text/event-stream" });
    await call(operator, "get", `/v1/responses/${created.id}`, { route: "/v1/responses/{id}" });
    await call(operator, "get", `/v1/responses/${created.id}/input_items?limit=1&order=asc`, { route: "/v1/responses/{id}/input_items" });
    await call(operator, "post", "/v1/responses/input_tokens", { body: ask });
    const background = await call(operator, "post", "/v1/responses", { body: { ...ask, background: true } });
    await call(operator, "post", `/v1/responses/${background.id}/cancel`, { route: "/v1/responses/{id}/cancel" });
    await call(operator, "post", `/v1/responses/${created.id}/cancel`, { route: "/v1/responses/{id}/cancel", status: 400 });
    await call(operator, "delete", `/v1/responses/${created.id}`, { route: "/v1/responses/{id}" });
    await call(operator, "get", `/v1/responses/${created.id}`, { route: "/v1/responses/{id}", status: 404 });
  });

  it("answers the Anthropic Messages API as documented: a message, its stream's events, a token count and an Anthropic error", async () => {
    const ask = { model: "story", max_tokens: 16, system: "Tell a story.", messages: [{ role: "user", content: "Once upon a time" }] };
    const message = await call(operator, "post", "/v1/messages", { body: ask });
    assert.equal(message.type, "message");
    const response = await fetch(`${priced.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": priced.key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({ ...ask, stream: true }),
    });
    assert.equal(response.status, 200);
    const { events } = await readSse(response);
    const streamed = events.map((event) => JSON.parse(event));
    assert.equal(streamed.at(-1).type, "message_stop");
    for (const event of streamed) conforms("post", "/v1/messages", 200, event, { contentType: "text/event-stream" });
    const counted = await call(operator, "post", "/v1/messages/count_tokens", { body: { model: "story", messages: ask.messages, system: ask.system } });
    assert.equal(counted.input_tokens, message.usage.input_tokens + (message.usage.cache_read_input_tokens ?? 0));
    const unknown = await call(operator, "post", "/v1/messages", { body: { ...ask, model: "nope" }, status: 404 });
    assert.equal(unknown.type, "error");
  });

  it("answers embeddings as documented: float and base64 vectors, a shortened one, and an error", async () => {
    const floats = await call(operator, "post", "/v1/embeddings", { body: { model: "embed", input: ["Once upon a time", "a cat"], encoding_format: "float" } });
    assert.equal(floats.data.length, 2);
    const base64 = await call(operator, "post", "/v1/embeddings", { body: { model: "embed", input: [[1, 300, 301]], encoding_format: "base64", dimensions: 16 } });
    assert.equal(typeof base64.data[0].embedding, "string");
    const refused = await call(operator, "post", "/v1/embeddings", { body: { model: "story", input: "x" }, status: 400 });
    assert.equal(refused.error.code, "model_does_not_support_endpoint");
  });

  it("answers usage without money fields on a server without a credit value", async () => {
    const client = new ConsoleClient(plain.url, { authorization: `Bearer ${plain.key}` });
    await call(client, "post", "/v1/chat/completions", { body: { model: plain.server.catalog.list()[0]!.id, messages: [{ role: "user", content: "Hi" }], max_tokens: 2 }, from: plainDocument });
    await plain.server.usageWritten();
    const usage = await call(client, "get", "/api/usage?group_by=model", { from: plainDocument });
    assert.ok(usage.data.length > 0);
    assert.ok(!("currency" in usage) && usage.data.every((row: Json) => !("cost_money" in row)));
    const requests = await call(client, "get", "/api/usage/requests", { from: plainDocument });
    assert.ok(!("currency" in requests) && requests.data.every((row: Json) => !("cost_money" in row)));
  });

  it("has checked the answer of every operation with a JSON schema", () => {
    const expected = API_OPERATIONS.filter((operation) => operation.success.contentType === undefined).map((operation) => `${operation.method} ${operation.path}`);
    const missing = expected.filter((operation) => !checked.has(operation) && !NOT_EXERCISED.has(operation));
    assert.deepEqual(missing, []);
  });

  it("fails a body with a field the schema does not declare, or a wrong type", () => {
    const written = answerSchema(document, "get", "/api/account", 200);
    const schema = inlineRefs(written, document);
    const account = { id: "acct_1", email: "a@example.com", role: "user", balance: 0, plan: null, credit_expires: null, created: 1, disabled: null };
    assert.deepEqual(undeclaredProperties(account, [schema]), []);
    assert.deepEqual(undeclaredProperties({ ...account, secret: 1 }, [schema]), ["$.secret"]);
    const withPlan = { ...account, plan: { id: "p", name: "P", price: { amount: 1, currency: "usd", cents: 1 }, credit: 1, days: null, rpm: null, tpm: null, models: null, weight: 1, service_tiers: { default: 1 } } };
    assert.deepEqual(undeclaredProperties(withPlan, [schema]), ["$.plan.price.cents"]);
    assert.equal(validatorIn(document, written)({ ...account, balance: "0" }), false);
    assert.equal(validatorIn(document, written)({ ...account, disabled: undefined }), false);
  });
});
