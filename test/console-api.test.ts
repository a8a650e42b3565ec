/**
 * The console's `/api` over HTTP against a real server: session cookies, CSRF, the sign-in
 * throttle, accounts never seeing each other's keys or balances, admin-only routes, disabled
 * accounts, and the console's static files beside the JSON 404s of `/v1` and `/api`.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import { openStore } from "../src/store/open.ts";
import { startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { ConsoleClient, writeConsoleConfig } from "./helpers/console.ts";

let test: TestServer;
let admin: ConsoleClient;
let alice: ConsoleClient;
let bob: ConsoleClient;

before(async () => {
  // Behind a proxy: x-forwarded-proto decides Secure, x-forwarded-for the client's address.
  test = await startTestServer({ configFile: writeConsoleConfig(temporaryDirectory()), flags: { models: undefined, trust_proxy: "true" } });
  admin = new ConsoleClient(test.url, { "x-forwarded-for": "10.0.0.1" });
  alice = new ConsoleClient(test.url, { "x-forwarded-for": "10.0.0.2" });
  bob = new ConsoleClient(test.url, { "x-forwarded-for": "10.0.0.3" });
});
after(async () => {
  await test?.close();
});

const chat = { model: "stories260K", messages: [{ role: "user" as const, content: "Hi" }], max_tokens: 2 };

describe("sign-up and sessions", () => {
  it("makes the first account signed up with the setup code admin, and later ones users", async () => {
    const first = await admin.signUpAdmin(test, "admin@example.com");
    assert.equal(first.status, 201, first.text);
    assert.equal(first.body.role, "admin");
    assert.match(first.body.csrf_token, /^[A-Za-z0-9_-]{20,}$/);
    const second = await alice.signUp("alice@example.com");
    assert.equal(second.status, 201, second.text);
    assert.equal(second.body.role, "user");
    assert.equal((await bob.signUp("bob@example.com")).body.role, "user");
  });

  it("refuses a taken email, a bad email and a short password", async () => {
    const taken = await new ConsoleClient(test.url).signUp("ALICE@example.com");
    assert.equal(taken.status, 409);
    assert.equal(taken.body.error.code, "account_exists");
    const bad = await new ConsoleClient(test.url).signUp("not-an-email");
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.param, "email");
    const short = await new ConsoleClient(test.url).signUp("carol@example.com", "short");
    assert.equal(short.status, 400);
    assert.equal(short.body.error.param, "password");
  });

  it("sets an HttpOnly, SameSite=Lax cookie, Secure only over HTTPS", async () => {
    const plain = await new ConsoleClient(test.url).signUp("plain@example.com");
    const cookie = plain.headers.get("set-cookie") ?? "";
    assert.match(cookie, /^turnpike_session=[A-Za-z0-9_-]{40,};/);
    assert.match(cookie, /; HttpOnly/i);
    assert.match(cookie, /; SameSite=Lax/i);
    assert.match(cookie, /; Path=\//i);
    assert.doesNotMatch(cookie, /; Secure/i);
    const https = await new ConsoleClient(test.url, { "x-forwarded-proto": "https" }).signUp("secure@example.com");
    assert.match(https.headers.get("set-cookie") ?? "", /; Secure/i);
  });

  it("stores only a hash of the session token", async () => {
    const token = alice.cookie.split("=")[1]!;
    const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
    try {
      const rows = await database.selectFrom("sessions").selectAll().execute();
      assert.ok(rows.length >= 3);
      assert.ok(rows.every((row) => row.token_hash !== token && /^[0-9a-f]{64}$/.test(row.token_hash)));
      const accounts = await database.selectFrom("accounts").select("password_hash").execute();
      assert.ok(accounts.every((row) => row.password_hash === null || row.password_hash.startsWith("scrypt$")));
    } finally {
      await database.destroy();
    }
    assert.ok(!test.logText().includes(token), "the session token is not logged");
    assert.ok(!test.logText().includes("correct horse battery"), "the password is not logged");
  });

  it("tells the console who is signed in, and 401 without a session", async () => {
    const session = await alice.get("/api/auth/session");
    assert.equal(session.status, 200);
    assert.equal(session.body.email, "alice@example.com");
    assert.equal(session.body.csrf_token, alice.csrfToken);
    const anonymous = await new ConsoleClient(test.url).get("/api/auth/session");
    assert.equal(anonymous.status, 401);
    assert.equal(anonymous.body.error.code, "authentication_required");
  });

  it("replaces the browser's previous session on sign-in", async () => {
    const client = new ConsoleClient(test.url, { "x-forwarded-for": "10.4.0.1" });
    await client.signUp("twice@example.com");
    const first = client.cookie;
    assert.equal((await client.signIn("twice@example.com")).status, 200);
    assert.notEqual(client.cookie, first);
    assert.equal((await fetch(`${test.url}/api/keys`, { headers: { cookie: first } })).status, 401, "the old session ended");
    assert.equal((await client.get("/api/keys")).status, 200);
  });

  it("signs out: the session stops working", async () => {
    const client = new ConsoleClient(test.url);
    await client.signUp("leaving@example.com");
    const cookie = client.cookie;
    const out = await client.post("/api/auth/signout");
    assert.equal(out.status, 200, out.text);
    assert.match(out.headers.get("set-cookie") ?? "", /turnpike_session=;/);
    const stale = await fetch(`${test.url}/api/keys`, { headers: { cookie } });
    assert.equal(stale.status, 401);
  });
});

describe("CSRF protection", () => {
  it("refuses a state-changing call without the CSRF token", async () => {
    const response = await alice.post("/api/keys", { name: "no token" }, { "x-csrf-token": "" });
    assert.equal(response.status, 403);
    assert.equal(response.body.error.code, "csrf_failed");
    const wrong = await alice.post("/api/keys", { name: "wrong token" }, { "x-csrf-token": bob.csrfToken });
    assert.equal(wrong.status, 403);
    assert.equal(wrong.body.error.code, "csrf_failed");
  });

  it("refuses a call from another origin even with the token", async () => {
    const response = await alice.post("/api/keys", { name: "evil" }, { origin: "https://evil.example" });
    assert.equal(response.status, 403);
    assert.equal(response.body.error.code, "csrf_failed");
    const signIn = await new ConsoleClient(test.url).post("/api/auth/signin", { email: "alice@example.com", password: "x" }, { origin: "https://evil.example" });
    assert.equal(signIn.status, 403, "login CSRF is refused too");
  });

  it("accepts the same origin with the token, and reads without it", async () => {
    const created = await alice.post("/api/keys", { name: "ok" }, { origin: test.url });
    assert.equal(created.status, 201, created.text);
    const listed = await alice.get("/api/keys", { "x-csrf-token": "" });
    assert.equal(listed.status, 200);
  });

  it("needs no CSRF token with an API key", async () => {
    const response = await fetch(`${test.url}/api/keys`, { method: "POST", headers: { authorization: `Bearer ${test.key}`, "content-type": "application/json" }, body: JSON.stringify({ name: "operator" }) });
    assert.equal(response.status, 201);
  });
});

describe("sign-in throttle", () => {
  it("answers 429 with retry-after after repeated failures on one account, even for the right password", async () => {
    const client = new ConsoleClient(test.url, { "x-forwarded-for": "10.1.0.1" });
    await client.signUp("target@example.com");
    for (let attempt = 0; attempt < 5; attempt++) {
      const response = await client.signIn("target@example.com", `wrong password ${attempt}`);
      assert.equal(response.status, 401);
      assert.equal(response.body.error.code, "invalid_credentials");
    }
    // From another address too: the account is what is being guessed.
    const other = new ConsoleClient(test.url, { "x-forwarded-for": "10.1.0.2" });
    const refused = await other.signIn("target@example.com");
    assert.equal(refused.status, 429);
    assert.equal(refused.body.error.code, "too_many_sign_in_attempts");
    assert.ok(Number(refused.headers.get("retry-after")) > 0);
  });

  it("answers 429 to an address that tries many accounts", async () => {
    const client = new ConsoleClient(test.url, { "x-forwarded-for": "10.2.0.1" });
    for (let attempt = 0; attempt < 20; attempt++) {
      const response = await client.signIn(`nobody${attempt}@example.com`);
      assert.equal(response.status, 401, "an unknown email is refused like a wrong password");
    }
    const refused = await client.signIn("alice@example.com");
    assert.equal(refused.status, 429);
    assert.ok(Number(refused.headers.get("retry-after")) > 0);
    const elsewhere = await new ConsoleClient(test.url, { "x-forwarded-for": "10.2.0.2" }).signIn("alice@example.com");
    assert.equal(elsewhere.status, 200, elsewhere.text);
  });

  it("answers 429 to an address that creates many accounts", async () => {
    const client = new ConsoleClient(test.url, { "x-forwarded-for": "10.9.0.1" });
    for (let attempt = 0; attempt < 20; attempt++) {
      const response = await client.signUp(`many${attempt}@example.com`);
      assert.equal(response.status, 201, response.text);
    }
    const refused = await client.signUp("one-too-many@example.com");
    assert.equal(refused.status, 429);
    assert.equal(refused.body.error.code, "too_many_sign_ups");
    assert.ok(Number(refused.headers.get("retry-after")) > 0);
    const elsewhere = await new ConsoleClient(test.url, { "x-forwarded-for": "10.9.0.2" }).signUp("one-too-many@example.com");
    assert.equal(elsewhere.status, 201, elsewhere.text);
  });
});

describe("accounts are isolated", () => {
  let aliceKey: { id: string; key: string };

  before(async () => {
    const created = await alice.post("/api/keys", { name: "alice's laptop", models: ["stories260K"], spend_cap: 1000 });
    assert.equal(created.status, 201, created.text);
    aliceKey = created.body;
  });

  it("shows the key once, then only its prefix", async () => {
    assert.match(aliceKey.key, /^tp-/);
    const listed = await alice.get("/api/keys");
    const entry = listed.body.data.find((key: { id: string }) => key.id === aliceKey.id);
    assert.equal(entry.name, "alice's laptop");
    assert.deepEqual(entry.models, ["stories260K"]);
    assert.equal(entry.spend_cap, 1000);
    assert.equal(entry.status, "active");
    assert.ok(aliceKey.key.startsWith(entry.display_prefix));
    assert.ok(!listed.text.includes(aliceKey.key));
  });

  it("never lists another account's keys", async () => {
    const listed = await bob.get("/api/keys");
    assert.equal(listed.status, 200);
    assert.ok(!listed.text.includes(aliceKey.id));
    assert.ok(listed.body.data.every((key: { account_id: string }) => key.account_id === listed.body.data[0]?.account_id));
  });

  it("cannot revoke another account's key", async () => {
    const response = await bob.delete(`/api/keys/${aliceKey.id}`);
    assert.equal(response.status, 404);
    assert.equal(response.body.error.code, "key_not_found");
    const client = new OpenAI({ baseURL: test.baseURL, apiKey: aliceKey.key, maxRetries: 0 });
    await assert.rejects(client.chat.completions.create(chat), (error: unknown) => error instanceof OpenAI.RateLimitError, "still alice's (no credit yet)");
  });

  it("shows each account its own balance", async () => {
    const grant = await admin.post(`/api/admin/accounts/${(await alice.get("/api/account")).body.id}/grant`, { plan: "starter" });
    assert.equal(grant.status, 200, grant.text);
    const aliceAccount = await alice.get("/api/account");
    const bobAccount = await bob.get("/api/account");
    assert.equal(aliceAccount.body.email, "alice@example.com");
    assert.equal(aliceAccount.body.balance, 5000);
    assert.equal(aliceAccount.body.plan.id, "starter");
    assert.equal(typeof aliceAccount.body.credit_expires, "number");
    assert.equal(bobAccount.body.email, "bob@example.com");
    assert.equal(bobAccount.body.balance, 0);
    assert.equal(bobAccount.body.plan, null);
  });

  it("never shows another account's usage", async () => {
    const client = new OpenAI({ baseURL: test.baseURL, apiKey: aliceKey.key, maxRetries: 0 });
    const completion = await client.chat.completions.create(chat);
    // Its usage is recorded in the group commit after its answer.
    await test.server.usageWritten();
    const own = await alice.get("/api/usage/requests?limit=10");
    assert.equal(own.status, 200, own.text);
    const record = own.body.data.find((row: { key_id: string }) => row.key_id === aliceKey.id);
    assert.equal(record.prompt_tokens, completion.usage!.prompt_tokens);
    assert.equal(record.completion_tokens, 2);
    const ownSums = await alice.get("/api/usage?group_by=model");
    assert.equal(ownSums.body.data[0].requests, 1);

    const others = await bob.get("/api/usage/requests?limit=10");
    assert.equal(others.status, 200);
    assert.deepEqual(others.body.data, []);
    const otherSums = await bob.get("/api/usage?group_by=key");
    assert.deepEqual(otherSums.body.data, []);
    const aliceId = (await alice.get("/api/account")).body.id;
    const named = await bob.get(`/api/usage?account=${aliceId}`);
    assert.equal(named.status, 403, "only admins may name an account");
  });

  it("revokes its own key with a session", async () => {
    const created = await bob.post("/api/keys", { name: "short-lived" });
    const revoked = await bob.delete(`/api/keys/${created.body.id}`);
    assert.equal(revoked.status, 200, revoked.text);
    assert.equal(revoked.body.status, "revoked");
    const client = new OpenAI({ baseURL: test.baseURL, apiKey: created.body.key, maxRetries: 0 });
    await assert.rejects(client.chat.completions.create(chat), (error: unknown) => error instanceof OpenAI.AuthenticationError);
  });

  it("validates new keys", async () => {
    const unknownModel = await bob.post("/api/keys", { name: "x", models: ["nope"] });
    assert.equal(unknownModel.status, 400);
    assert.equal(unknownModel.body.error.param, "models[0]");
    const past = await bob.post("/api/keys", { name: "x", expires_at: 1000 });
    assert.equal(past.status, 400);
    assert.equal(past.body.error.param, "expires_at");
    const noName = await bob.post("/api/keys", { name: "" });
    assert.equal(noName.status, 400);
    assert.equal(noName.body.error.param, "name");
    const notJson = await bob.request("POST", "/api/keys", undefined, { "content-type": "application/json" });
    assert.ok(notJson.status === 400, notJson.text);
  });
});

describe("administration", () => {
  it("is refused to users with 403", async () => {
    for (const [method, url] of [
      ["GET", "/api/admin/accounts"],
      ["GET", "/api/admin/keys"],
      ["POST", "/api/admin/accounts/x/grant"],
      ["POST", "/api/admin/accounts/x/disable"],
      ["POST", "/api/admin/accounts/x/enable"],
      ["DELETE", "/api/admin/keys/x"],
    ] as const) {
      const response = await alice.request(method, url, method === "POST" ? { plan: "starter" } : undefined);
      assert.equal(response.status, 403, `${method} ${url}: ${response.text}`);
      assert.equal(response.body.error.code, "admin_required");
    }
    const anonymous = await new ConsoleClient(test.url).get("/api/admin/accounts");
    assert.equal(anonymous.status, 401);
  });

  it("lists every account and every key to admins", async () => {
    const accounts = await admin.get("/api/admin/accounts");
    assert.equal(accounts.status, 200);
    const emails = accounts.body.data.map((account: { email: string }) => account.email);
    assert.ok(emails.includes("alice@example.com") && emails.includes("bob@example.com"));
    const keys = await admin.get("/api/admin/keys");
    assert.ok(keys.body.data.some((key: { account_email: string }) => key.account_email === "alice@example.com"));
  });

  it("refuses an unknown plan or account", async () => {
    const bobId = (await bob.get("/api/account")).body.id;
    const plan = await admin.post(`/api/admin/accounts/${bobId}/grant`, { plan: "nope" });
    assert.equal(plan.status, 400);
    assert.equal(plan.body.error.param, "plan");
    const account = await admin.post("/api/admin/accounts/acct_nope/grant", { plan: "starter" });
    assert.equal(account.status, 404);
  });

  it("disables an account: no sign-in, no session, and its keys stop working on /v1", async () => {
    const client = new ConsoleClient(test.url, { "x-forwarded-for": "10.3.0.1" });
    await client.signUp("dora@example.com");
    const id = (await client.get("/api/account")).body.id;
    const key = (await client.post("/api/keys", { name: "dora" })).body.key as string;
    const openai = new OpenAI({ baseURL: test.baseURL, apiKey: key, maxRetries: 0 });
    await openai.models.list();

    const disabled = await admin.post(`/api/admin/accounts/${id}/disable`);
    assert.equal(disabled.status, 200, disabled.text);
    assert.equal(typeof disabled.body.disabled, "number");
    await assert.rejects(openai.models.list(), (error: unknown) => error instanceof OpenAI.PermissionDeniedError && (error as { code?: string }).code === "account_disabled");
    assert.equal((await client.get("/api/keys")).status, 401, "the session ended");
    const signIn = await client.signIn("dora@example.com");
    assert.equal(signIn.status, 403);
    assert.equal(signIn.body.error.code, "account_disabled");
    const viaKey = await fetch(`${test.url}/api/account`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(viaKey.status, 403);

    assert.equal((await admin.post(`/api/admin/accounts/${id}/enable`)).status, 200);
    assert.ok(await openai.models.list());
    assert.equal((await client.signIn("dora@example.com")).status, 200);
  });

  it("does not let an admin disable itself", async () => {
    const id = (await admin.get("/api/account")).body.id;
    const response = await admin.post(`/api/admin/accounts/${id}/disable`);
    assert.equal(response.status, 400);
  });
});

describe("the console's files", () => {
  it("serves HTML at / and at client routes, JSON 404s under /v1 and /api", async () => {
    for (const url of ["/", "/keys", "/usage/anything"]) {
      const response = await fetch(`${test.url}${url}`);
      assert.equal(response.status, 200, url);
      assert.match(response.headers.get("content-type") ?? "", /^text\/html/);
    }
    for (const url of ["/v1/nope", "/api/nope", "/api", "/v1"]) {
      const response = await fetch(`${test.url}${url}`);
      assert.equal(response.status, 404, url);
      const body = (await response.json()) as { error: { code: string } };
      assert.equal(body.error.code, "unknown_url");
    }
    const post = await fetch(`${test.url}/somewhere`, { method: "POST" });
    assert.equal(post.status, 404);
  });
});
