/**
 * Prices in money: with `credit_value` set, `/v1/models` shows each price per million tokens in
 * the currency beside the credits, `/api/usage` gives each cost in money too, and
 * `/api/settings` tells the console what a credit is worth. Without it, credits only.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { recordUsage } from "../src/billing/usage.ts";
import { openStore } from "../src/store/open.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

let priced: TestServer;
let plain: TestServer;
const configDirectory = temporaryDirectory("turnpike-money-");

before(async () => {
  const configFile = path.join(configDirectory, "turnpike.json");
  fs.writeFileSync(
    configFile,
    JSON.stringify({
      credit_value: { currency: "USD", per_million_credits: "2.50" },
      models: [
        { id: "priced", path: storiesModel, pricing: { prompt: 100, cached_prompt: 25, completion: 300 } },
        { id: "free", path: storiesModel },
      ],
    }),
  );
  priced = await startTestServer({ configFile });
  plain = await startTestServer({ flags: { models: [storiesModel] }, env: { TURNPIKE_CREDIT_VALUE: "" } });
  const database = await openStore({ dataDir: priced.dataDir, databaseUrl: "" });
  try {
    const created = Date.now() - 60_000;
    for (const [index, cost] of [1234, 1_000_000].entries()) {
      await recordUsage(database, {
        request_id: `req_money_${index}`,
        account_id: null,
        key_id: priced.keyId,
        model: "priced",
        prompt_tokens: 10,
        cached_prompt_tokens: 0,
        completion_tokens: 5,
        cost,
        latency_ms: 7,
        status: 200,
        finish_reason: "stop",
        stream: 0,
        created_at: created + index,
      });
    }
  } finally {
    await database.destroy();
  }
});

after(async () => {
  await priced?.close();
  await plain?.close();
  fs.rmSync(configDirectory, { recursive: true, force: true });
});

async function getJson(server: TestServer, route: string, withKey = true): Promise<any> {
  const response = await fetch(`${server.url}${route}`, { headers: withKey ? { authorization: `Bearer ${server.key}` } : {} });
  assert.equal(response.status, 200, `${route}: ${response.status}`);
  return response.json();
}

describe("prices in money", () => {
  it("lists each model's prices per million tokens in money beside the credits, through the openai client", async () => {
    const page = await priced.client.models.list();
    const models = page.data as unknown as Array<Record<string, any>>;
    const byId = new Map(models.map((model) => [model.id, model]));
    // 100 credits at 2.50 USD per 1,000,000 credits: 0.00025 USD.
    assert.deepEqual(byId.get("priced")!.pricing, {
      prompt: 100,
      cached_prompt: 25,
      completion: 300,
      currency: "usd",
      money: { prompt: "0.00025", cached_prompt: "0.0000625", completion: "0.00075" },
    });
    assert.deepEqual(byId.get("free")!.pricing, { prompt: 0, cached_prompt: 0, completion: 0, currency: "usd", money: { prompt: "0", cached_prompt: "0", completion: "0" } });
    const one = (await priced.client.models.retrieve("priced")) as unknown as Record<string, any>;
    assert.deepEqual(one.pricing.money, { prompt: "0.00025", cached_prompt: "0.0000625", completion: "0.00075" });
  });

  it("shows credits only, with no currency, when no credit value is set", async () => {
    const models = (await plain.client.models.list()).data as unknown as Array<Record<string, any>>;
    assert.deepEqual(models[0]!.pricing, { prompt: 0, cached_prompt: 0, completion: 0 });
    assert.deepEqual(await getJson(plain, "/api/settings", false), { object: "settings", credit_value: null });
  });

  it("tells the console what a credit is worth at GET /api/settings, without a session or key", async () => {
    assert.deepEqual(await getJson(priced, "/api/settings", false), { object: "settings", credit_value: { currency: "usd", per_million_credits: "2.5" } });
  });

  it("gives usage sums and requests a money cost beside the credits, exactly", async () => {
    const usage = await getJson(priced, "/api/usage?group_by=model");
    assert.equal(usage.currency, "usd");
    const row = usage.data.find((entry: { group: string }) => entry.group === "priced");
    assert.equal(row.cost, 1_001_234);
    assert.equal(row.cost_money, "2.503085");
    const requests = await getJson(priced, "/api/usage/requests");
    assert.equal(requests.currency, "usd");
    const costs = requests.data.map((entry: { cost: number; cost_money: string }) => [entry.cost, entry.cost_money]);
    assert.deepEqual(costs, [
      [1_000_000, "2.5"],
      [1234, "0.003085"],
    ]);
  });

  it("leaves usage in credits only without a credit value", async () => {
    const usage = await getJson(plain, "/api/usage");
    assert.equal(usage.currency, undefined);
    for (const row of usage.data) assert.equal(row.cost_money, undefined);
  });
});
