/**
 * Service tiers and plan weights (issue 24), end to end on the fake engine: a real server, real
 * HTTP, real SQLite. A plan says which tiers its accounts may use and at what multiplier; the
 * request's `service_tier` picks one (`auto`: `default`), the response and the usage record say
 * it, and the bill is the tokens' cost times its multiplier. A tier the plan does not offer is
 * refused (403) before any hold or rate-limit charge; a value that is no tier is a 400. The queue
 * ticket the engine gets carries the account, the plan's weight and the tier.
 */
import assert from "node:assert/strict";
import path from "node:path";
import fs from "node:fs";
import { after, before, describe, it } from "node:test";
import type { Kysely } from "kysely";
import { FakeEngine } from "../src/engines/fake/fake-engine.ts";
import type { QueueTicket } from "../src/engines/fair-queue.ts";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { assertError } from "./helpers/api-error.ts";
import { ConsoleClient } from "./helpers/console.ts";
import { meteredKey } from "./helpers/metered.ts";
import { postJson, startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";

/** One credit unit a token, prompt and completion alike: a request's cost at multiplier 1 is its tokens. */
const pricing = { prompt: 1_000_000, cached_prompt: 1_000_000, completion: 1_000_000 };
const CREDIT = 1_000_000;

function writeConfig(): string {
  const directory = temporaryDirectory();
  const file = path.join(directory, "turnpike.json");
  fs.writeFileSync(
    file,
    JSON.stringify({
      // Served by the fake engine (the file is never opened).
      models: [{ id: "fake", path: path.join(directory, "fake.gguf"), pricing }],
      plans: [
        { id: "tiered", name: "Tiered", price: { amount: 100, currency: "usd" }, credit: CREDIT, weight: 3, service_tiers: { default: 1, flex: 0.5, priority: 2 } },
        { id: "plain", name: "Plain", price: { amount: 100, currency: "usd" }, credit: CREDIT, rpm: 100 },
      ],
    }),
  );
  return file;
}

const messages = [{ role: "user", content: "Say hello." }];

describe("service tiers and plan weights", () => {
  let test: TestServer;
  let database: Kysely<Database>;
  /** The ticket each started generation was given, in order. */
  const tickets: Array<QueueTicket | undefined> = [];
  const engine = new FakeEngine({ script: () => [{ steps: [{ text: "Hello" }, { text: "," }, { text: " world" }] }] });
  const prepare = engine.prepare.bind(engine);
  engine.prepare = async (request) => {
    const prepared = await prepare(request);
    const start = prepared.start.bind(prepared);
    prepared.start = (signal, ticket) => {
      tickets.push(ticket);
      return start(signal, ticket);
    };
    return prepared;
  };

  before(async () => {
    // Standing leases off: the balance is read right after the requests, as their own holds left it.
    test = await startTestServer({ configFile: writeConfig(), flags: { models: undefined, flex_max_wait: "7", standing_lease_idle: "0" }, engines: { fake: engine } });
    database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
  });
  after(async () => {
    await database?.destroy();
    await test?.close();
  });

  const chat = (key: string, body: Record<string, unknown>) => postJson(`${test.baseURL}/chat/completions`, { model: "fake", messages, max_tokens: 8, ...body }, { authorization: `Bearer ${key}` });

  /** The usage record of a request (by its response's `x-request-id`), once written. */
  async function recordOf(requestId: string) {
    for (let attempt = 0; attempt < 200; attempt++) {
      const row = await database.selectFrom("usage_records").selectAll().where("request_id", "=", requestId).executeTakeFirst();
      if (row !== undefined) return row;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    throw new Error(`no usage record for ${requestId}`);
  }

  it("bills flex at half and priority at double, and the response and the usage record say the tier", async () => {
    const { key, accountId } = await meteredKey(database, "tiered");
    for (const [tier, multiplier] of [["default", 1], ["flex", 0.5], ["priority", 2]] as const) {
      const answered = await chat(key, { service_tier: tier });
      assert.equal(answered.status, 200, answered.text);
      assert.equal(answered.body.service_tier, tier);
      const tokens = answered.body.usage.prompt_tokens + answered.body.usage.completion_tokens;
      const record = await recordOf(answered.headers.get("x-request-id")!);
      assert.equal(record.service_tier, tier);
      assert.equal(Number(record.cost), Math.ceil(tokens * multiplier), `${tier} is billed at ${multiplier}`);
      assert.deepEqual(tickets.at(-1), { account: accountId, weight: 3, tier, ...(tier === "flex" ? { maxWaitMs: 7_000 } : {}) });
    }
    const account = await database.selectFrom("accounts").select("balance").where("id", "=", accountId).executeTakeFirstOrThrow();
    const charged = await database.selectFrom("usage_records").select((expression) => expression.fn.sum<number>("cost").as("cost")).where("account_id", "=", accountId).executeTakeFirstOrThrow();
    assert.equal(Number(account.balance), CREDIT - Number(charged.cost), "the balance is the credit less what the records say");
  });

  it("serves `auto` (and no tier) in the default tier, at its price", async () => {
    const { key } = await meteredKey(database, "tiered");
    for (const body of [{ service_tier: "auto" }, {}]) {
      const answered = await chat(key, body);
      assert.equal(answered.status, 200, answered.text);
      assert.equal(answered.body.service_tier, "default");
      const record = await recordOf(answered.headers.get("x-request-id")!);
      assert.equal(record.service_tier, "default");
      assert.equal(Number(record.cost), answered.body.usage.prompt_tokens + answered.body.usage.completion_tokens);
      assert.equal(tickets.at(-1)?.tier, "default");
    }
  });

  it("says the tier in every streamed chunk", async () => {
    const { key } = await meteredKey(database, "tiered");
    const response = await fetch(`${test.baseURL}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify({ model: "fake", messages, max_tokens: 8, stream: true, stream_options: { include_usage: true }, service_tier: "flex" }),
    });
    const chunks = (await response.text())
      .split("\n\n")
      .filter((block) => block.startsWith("data: {"))
      .map((block) => JSON.parse(block.slice(6)) as { service_tier: string });
    assert.ok(chunks.length > 2);
    assert.deepEqual(new Set(chunks.map((chunk) => chunk.service_tier)), new Set(["flex"]));
  });

  it("refuses a tier the plan does not offer with 403, before any hold or rate-limit charge", async () => {
    const { key, accountId } = await meteredKey(database, "plain");
    const before = await database.selectFrom("ledger_entries").select("id").where("account_id", "=", accountId).execute();
    for (const tier of ["priority", "flex"]) {
      const refused = await chat(key, { service_tier: tier });
      assertError(refused, 403, "service_tier_not_allowed", "service_tier");
      assert.match(refused.body.error.message, new RegExp(`'${tier}'.*'plain' allows only 'default'`));
      assert.ok([null, "100"].includes(refused.headers.get("x-ratelimit-remaining-requests")), "the rate limits charged nothing");
    }
    const holds = await database.selectFrom("holds").select("id").where("account_id", "=", accountId).execute();
    assert.equal(holds.length, 0, "no hold was placed");
    assert.equal((await database.selectFrom("ledger_entries").select("id").where("account_id", "=", accountId).execute()).length, before.length);
    // The plan's default tier is served, and the first request the limits count is this one.
    const served = await chat(key, { service_tier: "default" });
    assert.equal(served.status, 200, served.text);
    assert.equal(served.headers.get("x-ratelimit-remaining-requests"), "99");
  });

  it("refuses a value that is no tier with 400 naming service_tier, on every dialect", async () => {
    const { key } = await meteredKey(database, "tiered");
    const bearer = { authorization: `Bearer ${key}` };
    assertError(await chat(key, { service_tier: "scale" }), 400, "invalid_request_error", "service_tier");
    assertError(await chat(key, { service_tier: 1 }), 400, "invalid_request_error", "service_tier");
    assertError(await postJson(`${test.baseURL}/responses`, { model: "fake", input: "Hi", service_tier: "fast" }, bearer), 400, "invalid_request_error", "service_tier");
    assertError(await postJson(`${test.baseURL}/completions`, { model: "fake", prompt: "Hi", service_tier: "turbo" }, bearer), 400, "invalid_request_error", "service_tier");
    const anthropic = await postJson(`${test.url}/v1/messages`, { model: "fake", max_tokens: 8, messages, service_tier: "priority" }, { "x-api-key": key, "anthropic-version": "2023-06-01" });
    assert.equal(anthropic.status, 400, anthropic.text);
    assert.match(anthropic.body.error.message, /service_tier/);
  });

  it("says the served tier on a Responses object and in a Messages usage", async () => {
    const { key } = await meteredKey(database, "tiered");
    const response = await postJson(`${test.baseURL}/responses`, { model: "fake", input: "Hi", max_output_tokens: 16, service_tier: "priority", store: false }, { authorization: `Bearer ${key}` });
    assert.equal(response.status, 200, response.text);
    assert.equal(response.body.service_tier, "priority");
    assert.equal((await recordOf(response.headers.get("x-request-id")!)).service_tier, "priority");
    const message = await postJson(`${test.url}/v1/messages`, { model: "fake", max_tokens: 8, messages, service_tier: "standard_only" }, { "x-api-key": key, "anthropic-version": "2023-06-01" });
    assert.equal(message.status, 200, message.text);
    assert.equal(message.body.usage.service_tier, "standard");
    assert.equal((await recordOf(message.headers.get("x-request-id")!)).service_tier, "default");
  });

  it("lets the operator's keys use every tier, unbilled, on a ticket of their own", async () => {
    const answered = await chat(test.key, { service_tier: "priority" });
    assert.equal(answered.status, 200, answered.text);
    assert.equal(answered.body.service_tier, "priority");
    assert.deepEqual(tickets.at(-1), { account: `key:${test.keyId}`, weight: 1, tier: "priority" });
    const record = await recordOf(answered.headers.get("x-request-id")!);
    assert.equal(Number(record.cost), 0);
    assert.equal(record.service_tier, "priority");
  });

  it("round-trips a plan's weight and tiers through the admin API, and refuses bad ones naming the field", async () => {
    const admin = new ConsoleClient(test.url);
    assert.equal((await admin.signUpAdmin(test, "admin@example.com")).status, 201);
    const created = await admin.post("/api/admin/plans", { id: "weighted", name: "Weighted", price: { amount: 0, currency: "usd" }, credit: 10, weight: 2, service_tiers: { flex: 0.25, default: 1 } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal(created.body.weight, 2);
    assert.deepEqual(created.body.service_tiers, { flex: 0.25, default: 1 });
    const edited = await admin.request("PATCH", "/api/admin/plans/weighted", { service_tiers: { priority: 1.5 } });
    assert.equal(edited.status, 200, JSON.stringify(edited.body));
    assert.equal(edited.body.weight, 2, "a field not sent stays as it was");
    assert.deepEqual(edited.body.service_tiers, { priority: 1.5 });
    const listed = (await admin.get("/api/admin/plans")).body.data.find((plan: { id: string }) => plan.id === "weighted");
    assert.equal(listed.weight, 2);
    assert.deepEqual(listed.service_tiers, { priority: 1.5 });
    const untouched = (await admin.get("/api/admin/plans")).body.data.find((plan: { id: string }) => plan.id === "plain");
    assert.equal(untouched.weight, 1);
    assert.deepEqual(untouched.service_tiers, { default: 1 });
    for (const [body, param] of [
      [{ weight: 0 }, "weight"],
      [{ service_tiers: {} }, "service_tiers"],
      [{ service_tiers: { default: 0.333 } }, "service_tiers.default"],
      [{ service_tiers: { default: 101 } }, "service_tiers.default"],
    ] as const) {
      const refused = await admin.request("PATCH", "/api/admin/plans/weighted", body);
      assert.equal(refused.status, 400, JSON.stringify(body));
      assert.equal(refused.body.error.param, param, JSON.stringify(refused.body));
    }
  });
});
