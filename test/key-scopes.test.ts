/**
 * Keys act within their scope (issue 9, row 3), over HTTP against a real server: the four things
 * the audit saw, each now refused with an OpenAI-shaped 403, and keys created by a key stopping
 * when their parent is revoked or expires.
 */
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import type { Kysely } from "kysely";
import OpenAI from "openai";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { createAccount } from "../src/accounts/accounts.ts";
import { createApiKey } from "../src/auth/api-keys.ts";
import { startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { ConsoleClient, writeConsoleConfig, type ApiResponse } from "./helpers/console.ts";

let test: TestServer;
let database: Kysely<Database>;
let admin: ConsoleClient;
let user: ConsoleClient;
let adminId: string;
let userId: string;

before(async () => {
  test = await startTestServer({ configFile: writeConsoleConfig(temporaryDirectory()), flags: { models: undefined } });
  database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
  adminId = (await createAccount(database, { email: "boss@example.com", password: "correct horse battery", role: "admin" })).id;
  userId = (await createAccount(database, { email: "user@example.com", password: "correct horse battery" })).id;
  admin = new ConsoleClient(test.url);
  user = new ConsoleClient(test.url);
  assert.equal((await admin.signIn("boss@example.com")).status, 200);
  assert.equal((await user.signIn("user@example.com")).status, 200);
});
after(async () => {
  await database?.destroy();
  await test?.close();
});

/** A request with `Authorization: Bearer <key>`. */
function withKey(key: string) {
  return new ConsoleClient(test.url, { authorization: `Bearer ${key}` });
}

function assertRefused(response: ApiResponse, status: number, code: string, param?: string): void {
  assert.equal(response.status, status, response.text);
  assert.deepEqual(Object.keys(response.body.error).sort(), ["code", "message", "param", "type"]);
  assert.equal(response.body.error.code, code, response.text);
  if (status === 403) assert.equal(response.body.error.type, "permission_error");
  if (param !== undefined) assert.equal(response.body.error.param, param);
}

const inAnHour = () => Math.floor(Date.now() / 1000) + 3600;

/** The audit's key: one model, spend cap 10, 5 rpm, an hour to live. */
async function restrictedKey(client: ConsoleClient = user) {
  const created = await client.post("/api/keys", { name: "restricted", models: ["stories260K"], spend_cap: 10, rpm: 5, expires_at: inAnHour() });
  assert.equal(created.status, 201, created.text);
  return created.body as { id: string; key: string; expires: number };
}

describe("a key creating a key", () => {
  it("cannot create a key looser than itself (the audit's unrestricted key)", async () => {
    const parent = await restrictedKey();
    const free = await withKey(parent.key).post("/api/keys", { name: "free" });
    assertRefused(free, 403, "key_looser_than_parent", "models");
    for (const [looser, param] of [
      [{ models: null }, "models"],
      [{ models: ["stories260K", "other"] }, "models[1]"],
      [{ spend_cap: 11 }, "spend_cap"],
      [{ spend_cap: null }, "spend_cap"],
      [{ rpm: 6 }, "rpm"],
      [{ expires_at: parent.expires + 60 }, "expires_at"],
      [{ expires_at: null }, "expires_at"],
      [{ scope: "admin" }, "scope"],
    ] as const) {
      const body = { name: "looser", models: ["stories260K"], spend_cap: 5, rpm: 5, expires_at: parent.expires, ...looser };
      const response = await withKey(parent.key).post("/api/keys", body);
      if (param === "models[1]") assertRefused(response, 400, "invalid_request_error", param);
      else if (param === "scope") assertRefused(response, 403, "admin_required");
      else assertRefused(response, 403, "key_looser_than_parent", param);
    }
    const keys = (await user.get("/api/keys")).body.data as Array<{ id: string }>;
    assert.equal(keys.length, 1, "nothing was created");
  });

  it("creates a child within its limits, records the parent, and moves the spend cap out of it", async () => {
    const parent = await restrictedKey();
    const child = await withKey(parent.key).post("/api/keys", { name: "child", models: ["stories260K"], spend_cap: 4, rpm: 5, expires_at: parent.expires, scope: "inference" });
    assert.equal(child.status, 201, child.text);
    assert.equal(child.body.parent_key_id, parent.id);
    assert.equal(child.body.scope, "inference");
    const keys = new Map(((await user.get("/api/keys")).body.data as Array<{ id: string; spend_cap: number }>).map((key) => [key.id, key]));
    assert.equal(keys.get(parent.id)!.spend_cap, 6, "the parent and its children together never spend more than 10");
    assertRefused(await withKey(parent.key).post("/api/keys", { name: "greedy", models: ["stories260K"], spend_cap: 7, rpm: 5, expires_at: parent.expires }), 403, "key_looser_than_parent", "spend_cap");
  });

  it("stops a child working when its parent is revoked", async () => {
    const parent = await restrictedKey();
    const child = await withKey(parent.key).post("/api/keys", { name: "child", models: ["stories260K"], spend_cap: 5, rpm: 5, expires_at: parent.expires });
    const client = new OpenAI({ baseURL: test.baseURL, apiKey: child.body.key, maxRetries: 0 });
    await client.models.list();
    assert.equal((await user.delete(`/api/keys/${parent.id}`)).status, 200);
    await assert.rejects(client.models.list(), (error: unknown) => error instanceof OpenAI.AuthenticationError && (error as { code?: string }).code === "invalid_api_key");
    const shown = ((await user.get("/api/keys")).body.data as Array<{ id: string; status: string }>).find((key) => key.id === child.body.id);
    assert.equal(shown?.status, "revoked");
    assertRefused(await withKey(child.body.key).get("/api/account"), 401, "invalid_api_key");
  });

  it("stops a child working when its parent expires", async () => {
    const parent = await restrictedKey();
    const child = await withKey(parent.key).post("/api/keys", { name: "child", models: ["stories260K"], spend_cap: 5, rpm: 5, expires_at: parent.expires });
    const client = new OpenAI({ baseURL: test.baseURL, apiKey: child.body.key, maxRetries: 0 });
    // The parent's hour is nearly up; the child's own expiry (no later than the parent's, by the rule) is moved out of the way.
    const parentExpires = Date.now() + 500;
    await database.updateTable("api_keys").set({ expires_at: parentExpires }).where("id", "=", parent.id).execute();
    await database.updateTable("api_keys").set({ expires_at: null }).where("id", "=", child.body.id).execute();
    // Verified (and kept in the node's cache of verified keys) while the parent still works...
    await client.models.list();
    // ...and refused the moment the parent expires, cached or not.
    await sleep(Math.max(0, parentExpires - Date.now()) + 10);
    await assert.rejects(client.models.list(), (error: unknown) => error instanceof OpenAI.AuthenticationError && /created by a key that has been revoked or has expired/.test((error as Error).message));
  });
});

describe("the rate limits of keys created by a key", () => {
  it("are shared with the key that created them: three children of a 3-rpm key get 3 requests in all, not 3 each", async () => {
    const parent = await createApiKey(database, { name: "limited parent", rpm: 3 });
    const children: string[] = [];
    for (let index = 0; index < 3; index++) {
      const child = await withKey(parent.key).post("/api/keys", { name: `child ${index}`, rpm: 3 });
      assert.equal(child.status, 201, child.text);
      children.push(child.body.key as string);
    }
    const grandchild = await withKey(children[0]!).post("/api/keys", { name: "grandchild", rpm: 3 });
    assert.equal(grandchild.status, 201, grandchild.text);
    const statuses: number[] = [];
    const startedAt = performance.now();
    for (const key of [...children, grandchild.body.key as string, parent.key]) {
      const client = new OpenAI({ baseURL: test.baseURL, apiKey: key, maxRetries: 0 });
      for (let attempt = 0; attempt < 2; attempt++) {
        const status = await client.chat.completions
          .create({ model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 1 })
          .then(() => 200, (error: unknown) => (error instanceof OpenAI.APIError ? (error.status ?? 0) : 0));
        statuses.push(status);
      }
    }
    // The bucket refills one request every 20 s: a slow machine may earn one more meanwhile (10 were served before).
    const refilled = Math.floor((performance.now() - startedAt) / 20_000);
    const served = statuses.filter((status) => status === 200).length;
    assert.ok(served >= 3 && served <= 3 + refilled, `statuses: ${statuses.join(", ")}`);
    assert.ok(statuses.every((status) => status === 200 || status === 429), `statuses: ${statuses.join(", ")}`);
  });
});

describe("admin routes", () => {
  it("refuse a key of an admin account without admin scope, restricted or not", async () => {
    const restricted = await restrictedKey(admin);
    const plain = await admin.post("/api/keys", { name: "plain" });
    for (const key of [restricted.key, plain.body.key as string]) {
      assertRefused(await withKey(key).post("/api/admin/codes", { plan: "starter", count: 2 }), 403, "admin_scope_required");
      assertRefused(await withKey(key).post(`/api/admin/accounts/${userId}/disable`), 403, "admin_scope_required");
      assertRefused(await withKey(key).get("/api/admin/accounts"), 403, "admin_scope_required");
      assertRefused(await withKey(key).post("/api/admin/plans", { id: "x", name: "X", price: { amount: 1, currency: "usd" }, credit: 1 }), 403, "admin_scope_required");
      assertRefused(await withKey(key).get(`/api/usage?account=${userId}`), 403, "admin_scope_required");
    }
    assert.equal((await user.get("/api/account")).body.disabled, null, "the account was not disabled");
    assert.equal(plain.body.scope, "account", "an admin's key has scope 'account' unless asked");
    // Nor can such a key make itself an admin key.
    assertRefused(await withKey(plain.body.key).post("/api/keys", { name: "escalate", scope: "admin" }), 403, "key_looser_than_parent", "scope");
  });

  it("take an admin's session, or a key an admin created with admin scope", async () => {
    const codes = await admin.post("/api/admin/codes", { plan: "starter" });
    assert.equal(codes.status, 201, codes.text);
    const adminKey = await admin.post("/api/keys", { name: "ops", scope: "admin" });
    assert.equal(adminKey.status, 201, adminKey.text);
    assert.equal(adminKey.body.scope, "admin");
    assert.equal((await withKey(adminKey.body.key).post("/api/admin/codes", { plan: "starter" })).status, 201);
    assert.equal((await withKey(adminKey.body.key).get("/api/admin/accounts")).status, 200);
    const cliKey = await createApiKey(database, { name: "cli", accountId: adminId, scope: "admin" });
    assert.equal((await withKey(cliKey.key).get("/api/admin/keys")).status, 200);
    // The operator's key (no account) stays admin.
    assert.equal((await withKey(test.key).get("/api/admin/accounts")).status, 200);
  });

  it("refuse admin scope to a user, and to an admin-scoped key whose account is no longer admin", async () => {
    assertRefused(await user.post("/api/keys", { name: "sneaky", scope: "admin" }), 403, "admin_required");
    const demoted = await createAccount(database, { email: "former@example.com", role: "admin" });
    const key = await createApiKey(database, { accountId: demoted.id, scope: "admin" });
    await database.updateTable("accounts").set({ role: "user" }).where("id", "=", demoted.id).execute();
    assertRefused(await withKey(key.key).get("/api/admin/accounts"), 403, "admin_required");
  });
});

describe("the playground's temporary key", () => {
  it("is inference-only: /v1 works, /api is refused", async () => {
    assert.equal((await admin.post(`/api/admin/accounts/${userId}/grant`, { plan: "starter" })).status, 200);
    // As the console's playground makes it.
    const created = await user.post("/api/keys", { name: "Playground (temporary)", scope: "inference", expires_at: Math.floor(Date.now() / 1000) + 12 * 3600 });
    assert.equal(created.status, 201, created.text);
    const key = created.body.key as string;
    const client = new OpenAI({ baseURL: test.baseURL, apiKey: key, maxRetries: 0 });
    const completion = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 2 });
    assert.equal(completion.object, "chat.completion");
    for (const [method, url, body] of [
      ["POST", "/api/keys", { name: "minted" }],
      ["GET", "/api/keys", undefined],
      ["DELETE", `/api/keys/${created.body.id}`, undefined],
      ["GET", "/api/account", undefined],
      ["GET", "/api/usage", undefined],
      ["POST", "/api/billing/redeem", { code: "x" }],
    ] as const) {
      assertRefused(await withKey(key).request(method, url, body), 403, "key_scope_exceeded");
    }
    assert.equal((await user.get("/api/keys")).body.data.find((listed: { id: string }) => listed.id === created.body.id).status, "active");
  });
});
