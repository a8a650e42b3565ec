/**
 * The account API the console and scripts use: usage, plans, codes and redemption. Real
 * server, real model; usage numbers are checked against the completions and the ledger.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import type { Kysely } from "kysely";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { createAccount } from "../src/accounts/accounts.ts";
import { createApiKey } from "../src/auth/api-keys.ts";
import { checkLedger } from "../src/billing/ledger.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { runCli } from "./helpers/process.ts";

const pricing = { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 };

let test: TestServer;
let database: Kysely<Database>;
let configFile: string;

before(async () => {
  configFile = path.join(temporaryDirectory(), "turnpike.json");
  fs.writeFileSync(
    configFile,
    JSON.stringify({
      models: [{ id: "story", path: storiesModel, pricing }],
      plans: [{ id: "starter", name: "Starter", price: { amount: 500, currency: "usd" }, credit: 5000, days: 30 }],
    }),
  );
  // Standing leases off: these tests read an account's balance right after its requests, as each request's own hold left it.
  test = await startTestServer({ configFile, flags: { standing_lease_idle: "0" } });
  database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
});
after(async () => {
  await database?.destroy();
  await test?.close();
});

async function api(method: string, route: string, key: string | null, body?: unknown) {
  const response = await fetch(`${test.url}${route}`, {
    method,
    headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
}

async function account() {
  const created = await createAccount(database, { email: `api-${Math.random().toString(36).slice(2)}@example.com` });
  const key = await createApiKey(database, { name: "api", accountId: created.id });
  return { id: created.id, key: key.key, keyId: key.id, client: new OpenAI({ baseURL: test.baseURL, apiKey: key.key, maxRetries: 0 }) };
}

describe("redemption codes through the API", () => {
  it("lets an admin make codes that an account redeems once", async () => {
    const made = await api("POST", "/api/admin/codes", test.key, { plan: "starter", count: 2 });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.equal(made.body.data.length, 2);
    const buyer = await account();
    const redeemed = await api("POST", "/api/billing/redeem", buyer.key, { code: made.body.data[0].code });
    assert.equal(redeemed.status, 200, JSON.stringify(redeemed.body));
    assert.equal(redeemed.body.granted, true);
    assert.equal(redeemed.body.balance, 5000);
    assert.equal(redeemed.body.plan.id, "starter");
    const again = await api("POST", "/api/billing/redeem", buyer.key, { code: made.body.data[0].code });
    assert.equal(again.status, 409);
    assert.equal(again.body.error.code, "code_already_redeemed");
    const stranger = await account();
    assert.equal((await api("POST", "/api/billing/redeem", stranger.key, { code: made.body.data[0].code })).status, 409);
    assert.equal((await checkLedger(database, buyer.id)).balance, 5000);
    assert.equal((await checkLedger(database, stranger.id)).balance, 0);
    const listed = await api("GET", "/api/admin/codes", test.key);
    assert.equal(listed.body.data.filter((row: any) => row.redeemed_by === buyer.id).length, 1);
    assert.ok(!JSON.stringify(listed.body).includes(made.body.data[1].code), "codes are never shown again");
  });

  it("redeems codes printed by `turnpike codes create`", async () => {
    const result = await runCli(["codes", "create", "--plan", "starter", "--count", "3", "--data-dir", test.dataDir]);
    assert.equal(result.code, 0, result.stderr);
    const codes = result.stdout.trim().split("\n");
    assert.equal(codes.length, 3);
    assert.match(result.stderr, /shown only now/);
    const buyer = await account();
    const redeemed = await api("POST", "/api/billing/redeem", buyer.key, { code: codes[2]!.toLowerCase() });
    assert.equal(redeemed.status, 200, JSON.stringify(redeemed.body));
    assert.equal((await api("POST", "/api/billing/redeem", buyer.key, { code: codes[2] })).status, 409);
  });

  it("answers unknown codes, missing fields and operator keys clearly", async () => {
    const buyer = await account();
    const unknown = await api("POST", "/api/billing/redeem", buyer.key, { code: "TP-00000-00000-00000-00000" });
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.error.code, "code_not_found");
    const missing = await api("POST", "/api/billing/redeem", buyer.key, {});
    assert.equal(missing.status, 400);
    assert.equal(missing.body.error.param, "code");
    const operator = await api("POST", "/api/billing/redeem", test.key, { code: "TP-1" });
    assert.equal(operator.body.error.code, "account_required");
    assert.equal((await api("POST", "/api/billing/redeem", null, { code: "x" })).status, 401);
  });

  it("keeps code making to admins", async () => {
    const user = await account();
    const refused = await api("POST", "/api/admin/codes", user.key, { plan: "starter" });
    assert.equal(refused.status, 403);
    assert.equal(refused.body.error.code, "admin_required");
    assert.equal((await api("POST", "/api/admin/codes", test.key, { plan: "nope" })).body.error.code, "plan_not_found");
  });
});

describe("plans through the API", () => {
  it("lists plans on offer, and lets admins create and edit them", async () => {
    const listed = await api("GET", "/api/plans", test.key);
    assert.deepEqual(
      listed.body.data.map((plan: any) => plan.id),
      ["starter"],
    );
    const plan = { id: "team", name: "Team", price: { amount: 9900, currency: "EUR" }, credit: 200000, days: 31, rpm: 600, tpm: 100000 };
    const created = await api("POST", "/api/admin/plans", test.key, plan);
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal(created.body.price.currency, "eur");
    assert.equal((await api("POST", "/api/admin/plans", test.key, plan)).status, 409);
    const edited = await api("PATCH", "/api/admin/plans/team", test.key, { credit: 250000, models: ["story"] });
    assert.equal(edited.status, 200);
    assert.equal(edited.body.credit, 250000);
    assert.equal(edited.body.rpm, 600);
    const admin = await api("GET", "/api/admin/plans", test.key);
    const team = admin.body.data.find((row: any) => row.id === "team");
    assert.equal(team.origin, "admin");
    assert.deepEqual(team.models, ["story"]);
    // Granted right away: the server's plan list follows the edit.
    const buyer = await account();
    const codes = await api("POST", "/api/admin/codes", test.key, { plan: "team" });
    assert.equal((await api("POST", "/api/billing/redeem", buyer.key, { code: codes.body.data[0].code })).body.balance, 250000);
  });

  it("validates plans and keeps them to admins", async () => {
    const bad = await api("POST", "/api/admin/plans", test.key, { id: "x", name: "X", price: { amount: 1.5, currency: "usd" }, credit: 1 });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.param, "price.amount");
    assert.equal((await api("PATCH", "/api/admin/plans/none", test.key, { credit: 1 })).status, 404);
    const user = await account();
    assert.equal((await api("POST", "/api/admin/plans", user.key, { id: "y", name: "Y", price: { amount: 1, currency: "usd" }, credit: 1 })).status, 403);
    assert.equal((await api("GET", "/api/admin/plans", user.key)).status, 403);
  });
});

describe("usage through the API", () => {
  it("reports exactly what the completions used and the ledger charged, per day, model and key", async () => {
    const buyer = await account();
    const codes = await api("POST", "/api/admin/codes", test.key, { plan: "starter" });
    await api("POST", "/api/billing/redeem", buyer.key, { code: codes.body.data[0].code });
    const completions = [];
    for (const content of ["Once", "Upon"]) {
      completions.push(await buyer.client.chat.completions.create({ model: "story", messages: [{ role: "user", content }], max_tokens: 12, temperature: 0 }));
    }
    const prompt = completions.reduce((sum, completion) => sum + completion.usage!.prompt_tokens, 0);
    const completion = completions.reduce((sum, completion) => sum + completion.usage!.completion_tokens, 0);
    // Their holds are settled in the group commit after each answer.
    await test.server.usageWritten();
    const charged = 5000 - (await checkLedger(database, buyer.id)).balance;
    assert.ok(charged > 0);

    for (const groupBy of ["day", "model", "key"]) {
      const usage = await api("GET", `/api/usage?group_by=${groupBy}`, buyer.key);
      assert.equal(usage.status, 200, JSON.stringify(usage.body));
      assert.equal(usage.body.data.length, 1, groupBy);
      const [row] = usage.body.data;
      assert.equal(row.requests, 2);
      assert.equal(row.prompt_tokens, prompt);
      assert.equal(row.completion_tokens, completion);
      assert.equal(row.cost, charged, "usage cost = what the ledger charged");
    }
    assert.equal((await api("GET", "/api/usage?group_by=key", buyer.key)).body.data[0].group, buyer.keyId);
    assert.equal((await api("GET", "/api/usage?group_by=model", buyer.key)).body.data[0].group, "story");

    const recent = await api("GET", "/api/usage/requests?limit=1", buyer.key);
    assert.equal(recent.body.data.length, 1);
    assert.equal(recent.body.has_more, true);
    assert.equal(recent.body.data[0].key_name, "api");
    assert.equal(recent.body.data[0].completion_tokens, completions[1]!.usage!.completion_tokens);
    assert.equal(recent.body.data[0].status, 200);
    assert.ok(Math.abs(recent.body.data[0].created - Date.now() / 1000) < 60, "a request's time is in seconds");
    assert.ok(Number.isInteger(recent.body.data[0].created));
    const older = await api("GET", `/api/usage/requests?after=${recent.body.data[0].id}`, buyer.key);
    assert.equal(older.body.data.length, 1);
    assert.equal(older.body.data[0].completion_tokens, completions[0]!.usage!.completion_tokens);
    const beforeNow = await api("GET", `/api/usage/requests?before=${Math.floor(Date.now() / 1000) + 1}`, buyer.key);
    assert.equal(beforeNow.body.data.length, 2, "'before' takes seconds");

    // Another account sees none of it; the admin can look at any account.
    const stranger = await account();
    assert.deepEqual((await api("GET", "/api/usage", stranger.key)).body.data, []);
    assert.equal((await api("GET", `/api/usage?account=${buyer.id}`, stranger.key)).status, 403);
    assert.equal((await api("GET", `/api/usage?account=${buyer.id}&group_by=model`, test.key)).body.data[0].cost, charged);
  });

  it("takes ISO dates or seconds and refuses bad ranges with the parameter named", async () => {
    const buyer = await account();
    const now = Math.floor(Date.now() / 1000);
    const range = await api("GET", `/api/usage?from=2026-01-01&to=${now}`, buyer.key);
    assert.equal(range.status, 200);
    assert.equal(range.body.to, now, "'to' answers in seconds too");
    assert.equal(range.body.from, Date.parse("2026-01-01") / 1000);
    const reversed = await api("GET", `/api/usage?from=${now}&to=${now - 1}`, buyer.key);
    assert.equal(reversed.status, 400);
    assert.equal(reversed.body.error.param, "from");
    const group = await api("GET", "/api/usage?group_by=week", buyer.key);
    assert.equal(group.status, 400);
    assert.equal(group.body.error.param, "group_by");
    assert.equal((await api("GET", "/api/usage?from=yesterday", buyer.key)).body.error.param, "from");
    assert.equal((await api("GET", "/api/usage/requests?limit=0", buyer.key)).body.error.param, "limit");
    assert.equal((await api("GET", "/api/usage", null)).status, 401);
  });
});
