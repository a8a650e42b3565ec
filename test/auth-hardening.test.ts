/**
 * Issue 9, rows 4, 6, 10 and 11 (scrypt), against real servers (and the real Redis):
 * - throttles are atomic: simultaneous wrong passwords or sign-ups never pass a limit, in memory
 *   or in Redis, because each attempt is reserved before its password is checked;
 * - a Host this server was not given is refused (DNS rebinding), Origins are checked against
 *   configured hosts, and the first admin needs the setup code `serve` printed (`--signup closed`
 *   lets nobody else in);
 * - behind `--trust-proxy 1` a forged X-Forwarded-For does not escape the sign-up throttle, and
 *   `--trust-proxy true` warns;
 * - new password hashes use scrypt N = 2^17 and old ones are replaced at the next sign-in.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes, randomInt, scryptSync } from "node:crypto";
import http from "node:http";
import { after, before, describe, it } from "node:test";
import { Redis } from "ioredis";
import { openStore } from "../src/store/open.ts";
import { runCli, startServeProcess } from "./helpers/process.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { ConsoleClient, setupCodeOf, type ApiResponse } from "./helpers/console.ts";
import { freshPostgresSchema } from "./helpers/databases.ts";

const redisUrl = process.env.TURNPIKE_TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

/** A request with any Host header (fetch cannot set one). */
function rawRequest(base: string, method: string, path: string, headers: Record<string, string>, body?: unknown): Promise<ApiResponse> {
  const url = new URL(path, base);
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const request = http.request(
      { hostname: url.hostname, port: url.port, path: url.pathname, method, headers: { ...(payload === undefined ? {} : { "content-type": "application/json" }), ...headers }, agent: false },
      (response) => {
        let text = "";
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => (text += chunk));
        response.on("end", () => {
          let parsed: unknown;
          try {
            parsed = JSON.parse(text);
          } catch {
            parsed = undefined;
          }
          const responseHeaders = new Headers();
          for (const [name, value] of Object.entries(response.headers)) if (typeof value === "string") responseHeaders.set(name, value);
          resolve({ status: response.statusCode ?? 0, headers: responseHeaders, body: parsed, text });
        });
      },
    );
    request.on("error", reject);
    request.end(payload);
  });
}

/** A random private address, so reruns against the same Redis never share a counter. */
function freshAddress(): string {
  return `10.${randomInt(1, 255)}.${randomInt(0, 255)}.${randomInt(1, 255)}`;
}

function count(replies: ApiResponse[], status: number): number {
  return replies.filter((reply) => reply.status === status).length;
}

describe("throttles are atomic (in memory)", () => {
  let test: TestServer;
  before(async () => {
    // Behind one proxy: the rightmost X-Forwarded-For entry is the client, so each test acts from its own address.
    test = await startTestServer({ flags: { trust_proxy: "1" } });
  });
  after(async () => {
    await test?.close();
  });

  it("checks only 5 of 40 simultaneous wrong passwords for one account; the other 35 get 429", async () => {
    assert.equal((await new ConsoleClient(test.url, { "x-forwarded-for": "10.40.0.1" }).signUp("victim@example.com")).status, 201);
    const attacker = new ConsoleClient(test.url, { "x-forwarded-for": "10.40.0.2" });
    const replies = await Promise.all(Array.from({ length: 40 }, (_unused, index) => attacker.signIn("victim@example.com", `guess number ${index}`)));
    assert.equal(count(replies, 401), 5, "exactly the limit's worth were checked");
    assert.equal(count(replies, 429), 35);
    for (const reply of replies.filter((candidate) => candidate.status === 429)) {
      assert.equal(reply.body.error.code, "too_many_sign_in_attempts");
      assert.ok(Number(reply.headers.get("retry-after")) > 0);
    }
    const logged = test.logs().filter((line) => line.msg === "sign-in refused").length;
    assert.equal(logged, 5, "only 5 passwords reached scrypt");
  });

  it("checks only 5 of a burst of 59 wrong passwords, and then refuses the correct one too", async () => {
    assert.equal((await new ConsoleClient(test.url, { "x-forwarded-for": "10.60.0.1" }).signUp("burst@example.com")).status, 201);
    const attacker = new ConsoleClient(test.url, { "x-forwarded-for": "10.60.0.2" });
    const replies = await Promise.all(Array.from({ length: 59 }, (_unused, index) => attacker.signIn("burst@example.com", `guess number ${index}`)));
    assert.equal(count(replies, 401), 5, "5 of the 59 were checked");
    assert.equal(count(replies, 429), 54, "the rest were refused unchecked");
    assert.equal((await attacker.signIn("burst@example.com")).status, 429, "the correct password waits for the window to end");
  });
});

describe("throttles are atomic (in Redis)", () => {
  let test: TestServer;
  let redis: Redis;
  const address = freshAddress();
  before(async () => {
    redis = new Redis(redisUrl);
    test = await startTestServer({ flags: { trust_proxy: "1", redis_url: redisUrl } });
  });
  after(async () => {
    await test?.close();
    const digest = createHash("sha256").update(address, "utf8").digest("base64url").slice(0, 32);
    await redis.del(`turnpike:signup:address:${digest}`, `turnpike:signin:address:${digest}`);
    redis.disconnect();
  });

  it("creates exactly 20 of 100 simultaneous sign-ups from one address", async () => {
    const client = new ConsoleClient(test.url, { "x-forwarded-for": address });
    const tag = randomBytes(4).toString("hex");
    const replies = await Promise.all(Array.from({ length: 100 }, (_unused, index) => client.signUp(`crowd-${tag}-${index}@example.com`)));
    assert.equal(count(replies, 201), 20, replies.find((reply) => reply.status !== 201 && reply.status !== 429)?.text);
    assert.equal(count(replies, 429), 80);
    assert.ok(replies.filter((reply) => reply.status === 429).every((reply) => reply.body.error.code === "too_many_sign_ups"));
  });

  it("checks only 5 of 40 simultaneous wrong passwords for one account", async () => {
    const email = `redis-victim-${randomBytes(4).toString("hex")}@example.com`;
    assert.equal((await new ConsoleClient(test.url, { "x-forwarded-for": freshAddress() }).signUp(email)).status, 201);
    const attacker = new ConsoleClient(test.url, { "x-forwarded-for": address });
    const replies = await Promise.all(Array.from({ length: 40 }, (_unused, index) => attacker.signIn(email, `guess number ${index}`)));
    assert.equal(count(replies, 401), 5);
    assert.equal(count(replies, 429), 35);
  });
});

describe("proxies (--trust-proxy)", () => {
  it("with one trusted hop, counts a client forging X-Forwarded-For by the address the proxy saw", async () => {
    const test = await startTestServer({ flags: { trust_proxy: "1" } });
    try {
      const replies: ApiResponse[] = [];
      for (let index = 0; index < 30; index++) {
        // The client claims a new address each time; the proxy appends the one it really saw.
        const client = new ConsoleClient(test.url, { "x-forwarded-for": `198.51.100.${index + 1}, 127.0.0.2` });
        replies.push(await client.signUp(`forger-${index}@example.com`));
      }
      assert.equal(count(replies, 201), 20);
      assert.equal(count(replies, 429), 10, "the forged entries bought nothing");
      // The entry the proxy appended is what counts: a new one there is a new address.
      const elsewhere = new ConsoleClient(test.url, { "x-forwarded-for": "198.51.100.99, 127.0.0.3" });
      assert.equal((await elsewhere.signUp("forger-elsewhere@example.com")).status, 201);
      assert.equal(test.logs().filter((line) => /believes any X-Forwarded-For/.test(String(line.msg))).length, 0, "a hop count is not warned about");
    } finally {
      await test.close();
    }
  });

  it("warns at start-up that --trust-proxy true believes any X-Forwarded-For", async () => {
    const test = await startTestServer({ flags: { trust_proxy: "true" } });
    try {
      const warning = test.logs().find((line) => /believes any X-Forwarded-For/.test(String(line.msg)));
      assert.ok(warning, "a warning was logged");
      assert.equal(warning.level, 40);
      assert.match(String(warning.msg), /hop count/);
    } finally {
      await test.close();
    }
  });
});

describe("hosts and the first admin", () => {
  let test: TestServer;
  before(async () => {
    test = await startTestServer({ flags: { allowed_hosts: "turnpike.internal,.corp.example" } });
  });
  after(async () => {
    await test?.close();
  });

  it("refuses a rebinding Host with a matching Origin (421), on every route", async () => {
    const port = new URL(test.url).port;
    const host = `rebind.attacker.example:${port}`;
    const headers = { host, origin: `http://${host}` };
    // What a rebinding page would send: it has no setup code, but on a fresh install it used to be made admin without one.
    const signUp = await rawRequest(test.url, "POST", "/api/auth/signup", headers, { email: "rebind@example.com", password: "correct horse battery" });
    assert.equal(signUp.status, 421, signUp.text);
    assert.deepEqual(Object.keys(signUp.body.error).sort(), ["code", "message", "param", "type"]);
    assert.equal(signUp.body.error.code, "host_not_allowed");
    for (const path of ["/health", "/v1/models", "/api/auth/session", "/"]) {
      assert.equal((await rawRequest(test.url, "GET", path, { host })).status, 421, path);
    }
    const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
    try {
      assert.equal(await database.selectFrom("accounts").select("id").where("email", "=", "rebind@example.com").executeTakeFirst(), undefined, "no account was made");
    } finally {
      await database.destroy();
    }
  });

  it("answers loopback names, IP addresses and the allowed hosts", async () => {
    const port = new URL(test.url).port;
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, `192.0.2.7:${port}`, `app.localhost:${port}`, `turnpike.internal:${port}`, `corp.example`, `ai.corp.example:${port}`]) {
      assert.equal((await rawRequest(test.url, "GET", "/health", { host })).status, 200, host);
    }
    for (const host of [`turnpike.internal.attacker.example`, `evilcorp.example`, `127.0.0.1.nip.io:${port}`, `user@127.0.0.1:${port}`]) {
      assert.equal((await rawRequest(test.url, "GET", "/health", { host })).status, 421, host);
    }
  });

  it("checks Origin against this server's origins, not whatever Host the request names", async () => {
    const port = new URL(test.url).port;
    const other = await rawRequest(test.url, "POST", "/api/auth/signin", { host: `127.0.0.1:${port}`, origin: `http://localhost:${port}` }, { email: "x@example.com", password: "whatever" });
    assert.equal(other.status, 403, "another loopback origin is another site");
    assert.equal(other.body.error.code, "csrf_failed");
    const same = await rawRequest(test.url, "POST", "/api/auth/signin", { host: `turnpike.internal:${port}`, origin: `http://turnpike.internal:${port}` }, { email: "x@example.com", password: "whatever" });
    assert.equal(same.status, 401, "an allowed host's own origin may sign in");
  });

  it("does not make the first visitor admin without the setup code; the code makes the admin once", async () => {
    const visitor = new ConsoleClient(test.url);
    const first = await visitor.signUp("first-visitor@example.com");
    assert.equal(first.status, 201, first.text);
    assert.equal(first.body.role, "user", "signing up first makes nobody admin");
    assert.equal((await visitor.get("/api/admin/accounts")).status, 403);
    assert.deepEqual((await new ConsoleClient(test.url).get("/api/auth/setup")).body, { object: "auth_setup", signup: "open", setup_required: true });
    const guessed = await new ConsoleClient(test.url).signUp("guesser@example.com", undefined, "AAAA-BBBB-CCCC-DDDD");
    assert.equal(guessed.status, 403);
    assert.equal(guessed.body.error.code, "invalid_setup_code");
    assert.equal(guessed.body.error.param, "setup_code");
    const code = setupCodeOf(test);
    assert.match(code, /^[A-Z2-9]{4}(-[A-Z2-9]{4}){3}$/);
    const operator = new ConsoleClient(test.url);
    const admin = await operator.signUp("operator@example.com", undefined, code.toLowerCase().replaceAll("-", " "));
    assert.equal(admin.status, 201, admin.text);
    assert.equal(admin.body.role, "admin");
    assert.equal((await operator.get("/api/admin/accounts")).status, 200);
    const again = await new ConsoleClient(test.url).signUp("second@example.com", undefined, code);
    assert.equal(again.status, 403, "the code is spent");
    assert.equal((await new ConsoleClient(test.url).get("/api/auth/setup")).body.setup_required, false);
    assert.ok(!test.logText().includes(code), "the setup code is not in the JSON log");
    const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
    try {
      const claims = await database.selectFrom("installation_claims").select("name").execute();
      assert.ok(claims.every((claim) => !claim.name.startsWith("setup_code:")), "spent codes are forgotten");
    } finally {
      await database.destroy();
    }
  });
});

describe("hosts behind a trusted proxy", () => {
  it("refuses a disallowed name in Host or in X-Forwarded-Host, whichever a client forged", async () => {
    const test = await startTestServer({ flags: { trust_proxy: "1", public_url: "https://ai.example.com" } });
    try {
      const port = new URL(test.url).port;
      const check = (host: string, forwardedHost?: string) =>
        rawRequest(test.url, "GET", "/health", { host, ...(forwardedHost === undefined ? {} : { "x-forwarded-host": forwardedHost }) }).then((reply) => reply.status);
      assert.equal(await check("ai.example.com"), 200);
      assert.equal(await check(`127.0.0.1:${port}`, "ai.example.com"), 200, "a proxy that sends its upstream's address and the public name");
      assert.equal(await check("rebind.attacker.example", "ai.example.com"), 421, "a forged X-Forwarded-Host does not launder a rebinding Host");
      assert.equal(await check(`127.0.0.1:${port}`, "rebind.attacker.example"), 421);
    } finally {
      await test.close();
    }
  });
});

describe("a server listening on every interface", () => {
  it("answers by IP address and loopback only, and says at start-up how to add names", async () => {
    const test = await startTestServer({ flags: { host: "0.0.0.0" } });
    try {
      const port = new URL(test.url).port;
      assert.ok(test.logs().some((line) => /--public-url/.test(String(line.msg)) && /--allowed-hosts/.test(String(line.msg))), "the start-up log names the settings");
      assert.equal((await rawRequest(test.url, "GET", "/health", { host: `127.0.0.1:${port}` })).status, 200);
      assert.equal((await rawRequest(test.url, "GET", "/health", { host: `203.0.113.9:${port}` })).status, 200);
      assert.equal((await rawRequest(test.url, "GET", "/health", { host: `turnpike.example:${port}` })).status, 421);
      const first = await new ConsoleClient(test.url).signUp("first@example.com");
      assert.equal(first.body.role, "user", "its first visitor is not made admin");
    } finally {
      await test.close();
    }
  });
});

describe("--signup closed", () => {
  let test: TestServer;
  before(async () => {
    test = await startTestServer({ flags: { signup: "closed" } });
  });
  after(async () => {
    await test?.close();
  });

  it("refuses sign-ups except the first admin's with the setup code", async () => {
    const refused = await new ConsoleClient(test.url).signUp("stranger@example.com");
    assert.equal(refused.status, 403);
    assert.equal(refused.body.error.code, "signup_closed");
    assert.deepEqual((await new ConsoleClient(test.url).get("/api/auth/setup")).body, { object: "auth_setup", signup: "closed", setup_required: true });
    const admin = await new ConsoleClient(test.url).signUpAdmin(test, "owner@example.com");
    assert.equal(admin.status, 201, admin.text);
    assert.equal(admin.body.role, "admin");
    assert.equal((await new ConsoleClient(test.url).signUp("late@example.com")).body.error.code, "signup_closed");
    assert.equal((await new ConsoleClient(test.url).signUpAdmin(test, "late@example.com")).body.error.code, "invalid_setup_code");
  });
});

describe("the setup code on several nodes", () => {
  it("lets each node sharing a PostgreSQL database print its own code, any of which works on every node, once", async () => {
    const schema = await freshPostgresSchema();
    const nodeA = await startTestServer({ flags: { database_url: schema.url } });
    const nodeB = await startTestServer({ flags: { database_url: schema.url } });
    try {
      const codeA = setupCodeOf(nodeA);
      const codeB = setupCodeOf(nodeB);
      assert.notEqual(codeA, codeB);
      const admin = await new ConsoleClient(nodeB.url).signUp("admin@example.com", undefined, codeA);
      assert.equal(admin.status, 201, admin.text);
      assert.equal(admin.body.role, "admin", "node A's code works on node B");
      for (const [node, code] of [[nodeA, codeA], [nodeA, codeB], [nodeB, codeB]] as const) {
        const late = await new ConsoleClient(node.url).signUp(`late-${randomBytes(3).toString("hex")}@example.com`, undefined, code);
        assert.equal(late.body.error?.code, "invalid_setup_code", "every code stops working once an admin exists");
      }
    } finally {
      await nodeB.close();
      await nodeA.close();
      await schema.drop();
    }
  });
});

describe("the setup code and the CLI", () => {
  it("is printed by serve on stderr, and stops working once `accounts create --admin` made an admin", async () => {
    const dataDir = temporaryDirectory();
    const server = await startServeProcess(["--data-dir", dataDir, "--model", storiesModel]);
    let stopped: number | null;
    try {
      // stderr (the code) and stdout (the log line pointing at it) arrive on separate pipes: wait for both.
      let code: string | undefined;
      for (let attempt = 0; attempt < 200 && (code === undefined || !/no admin account yet/.test(server.stdout())); attempt++) {
        code = /setup code:\s+([A-Z2-9-]{19})/.exec(server.stderr())?.[1];
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assert.ok(code, `no setup code on stderr: ${server.stderr()}`);
      assert.ok(!server.stdout().includes(code), "not in the JSON log");
      assert.match(server.stdout(), /no admin account yet/);
      const created = await runCli(["accounts", "create", "--email", "cli-admin@example.com", "--admin", "--data-dir", dataDir]);
      assert.equal(created.code, 0, created.stderr);
      const late = await new ConsoleClient(server.url).signUp("web@example.com", undefined, code);
      assert.equal(late.status, 403);
      assert.equal(late.body.error.code, "invalid_setup_code");
    } finally {
      stopped = await server.stop();
    }
    assert.equal(stopped, 0);
  });
});

describe("password hashing", () => {
  let test: TestServer;
  before(async () => {
    test = await startTestServer();
  });
  after(async () => {
    await test?.close();
  });

  it("hashes new passwords with scrypt N = 2^17 and replaces an old N = 2^14 hash at the next sign-in", async () => {
    const client = new ConsoleClient(test.url);
    assert.equal((await client.signUp("new@example.com")).status, 201);
    const salt = randomBytes(16);
    const old = ["scrypt", 16384, 8, 1, salt.toString("base64url"), scryptSync("correct horse battery", salt, 32, { N: 16384, r: 8, p: 1 }).toString("base64url")].join("$");
    const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
    try {
      const fresh = await database.selectFrom("accounts").select("password_hash").where("email", "=", "new@example.com").executeTakeFirstOrThrow();
      assert.match(fresh.password_hash ?? "", /^scrypt\$131072\$8\$1\$/);
      await database.updateTable("accounts").set({ password_hash: old }).where("email", "=", "new@example.com").execute();
      assert.equal((await new ConsoleClient(test.url).signIn("new@example.com")).status, 200, "the old hash still verifies");
      const upgraded = await database.selectFrom("accounts").select("password_hash").where("email", "=", "new@example.com").executeTakeFirstOrThrow();
      assert.match(upgraded.password_hash ?? "", /^scrypt\$131072\$8\$1\$/);
      assert.notEqual(upgraded.password_hash, old);
      assert.equal((await new ConsoleClient(test.url).signIn("new@example.com")).status, 200, "and the new one does");
      assert.equal((await new ConsoleClient(test.url).signIn("new@example.com", "wrong password")).status, 401);
    } finally {
      await database.destroy();
    }
  });
});
