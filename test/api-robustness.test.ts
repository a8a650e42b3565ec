/**
 * Every `/api` route and `/v1/chat/completions`, hit with malformed bodies and queries, with a
 * valid, a missing and an unknown key: never a 5xx, and every error in the OpenAI shape. Paths
 * with NUL bytes, control characters and malformed or overlong encodings answer 400/404; every
 * response carries the security headers, the console its Content-Security-Policy; an unavailable
 * model's reason names no file-system path.
 */
import assert from "node:assert/strict";
import net from "node:net";
import path from "node:path";
import { after, before, it } from "node:test";
import { buildConsole } from "../console/build.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

let test: TestServer;
before(async () => {
  // The console's files are what a NUL in a path used to reach (fs.statSync throws on it).
  await buildConsole({ quiet: true });
  test = await startTestServer();
});
after(async () => {
  await test?.close();
});

const routes: Array<[string, string]> = [
  ["POST", "/api/keys"],
  ["GET", "/api/keys"],
  ["DELETE", "/api/keys/x"],
  ["GET", "/api/account"],
  ["GET", "/api/usage"],
  ["GET", "/api/usage/requests"],
  ["GET", "/api/plans"],
  ["POST", "/api/billing/redeem"],
  ["POST", "/api/billing/checkout"],
  ["GET", "/api/admin/plans"],
  ["POST", "/api/admin/plans"],
  ["PATCH", "/api/admin/plans/x"],
  ["GET", "/api/admin/codes"],
  ["POST", "/api/admin/codes"],
  ["GET", "/api/admin/accounts"],
  ["POST", "/api/admin/accounts/x/grant"],
  ["POST", "/api/admin/accounts/x/disable"],
  ["GET", "/api/admin/keys"],
  ["DELETE", "/api/admin/keys/x"],
  ["POST", "/api/auth/signup"],
  ["POST", "/api/auth/signin"],
  ["POST", "/api/auth/signout"],
  ["GET", "/api/auth/session"],
  ["GET", "/api/models"],
  ["POST", "/v1/chat/completions"],
];
const bodies = [
  "",
  "{",
  "[]",
  "null",
  "1",
  '"x"',
  "{}",
  '{"plan":1,"count":"x","code":[],"name":{},"email":5,"password":null,"model":[],"messages":{}}',
  JSON.stringify({ id: "a".repeat(5000), name: "", price: { amount: -1, currency: "usdd" }, credit: 1e300 }),
  '{"models":"x","expires_at":"never","spend_cap":-5,"messages":[{"role":"user","content":[{"type":"image_url"}]}]}',
  '{"__proto__":{"polluted":1},"constructor":{"prototype":{"polluted":2}}}',
];
const queries = ["", "?from=-1", "?to=abc&group_by=x", "?limit=1e9", "?before=%00", "?account=all", "?from=9999999999999999"];

it("never answers 5xx, and always answers errors in the OpenAI shape", async () => {
  const failures: string[] = [];
  for (const [method, route] of routes) {
    for (const body of method === "GET" || method === "DELETE" ? [undefined] : bodies) {
      for (const query of method === "GET" ? queries : [""]) {
        for (const authorization of [`Bearer ${test.key}`, undefined, "Bearer tp-unknown"]) {
          const response = await fetch(`${test.url}${route}${query}`, {
            method,
            headers: { ...(authorization ? { authorization } : {}), ...(body !== undefined ? { "content-type": "application/json" } : {}) },
            body,
          });
          const text = await response.text();
          let shaped = true;
          if (response.status >= 400) {
            try {
              const parsed = JSON.parse(text);
              shaped = typeof parsed.error?.message === "string" && typeof parsed.error?.code === "string" && typeof parsed.error?.type === "string";
            } catch {
              shaped = false;
            }
          }
          if (response.status >= 500 || !shaped) failures.push(`${method} ${route}${query} ${JSON.stringify(body)?.slice(0, 40)} → ${response.status} ${text.slice(0, 120)}`);
        }
      }
    }
  }
  assert.deepEqual(failures, []);
  assert.equal(({} as Record<string, unknown>).polluted, undefined, "no prototype pollution");
  assert.equal((await fetch(`${test.url}/health`)).status, 200);
});

/** Sends `GET target` as written (no URL normalisation, unlike fetch) and reads the answer. */
function rawGet(url: string, target: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: string; body: string }> {
  const { port } = new URL(url);
  const extra = Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join("");
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), "127.0.0.1", () => socket.write(`GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n${extra}Connection: close\r\n\r\n`));
    let text = "";
    socket.on("data", (chunk) => (text += chunk.toString("latin1")));
    socket.on("error", reject);
    socket.on("close", () => {
      const split = text.indexOf("\r\n\r\n");
      resolve({ status: Number(text.split(" ")[1]), headers: text.slice(0, split), body: text.slice(split + 4) });
    });
  });
}

it("answers paths with NUL bytes, control characters and malformed encodings with 400 or 404, never 500", async () => {
  const targets = [
    "/%00",
    "/a%00b",
    "/v1/%00",
    "/api/%00",
    "/health%00",
    "/assets/%00.js",
    "/v1/models/%00",
    "/v1/models/%25",
    "/v1/models/a%25zz",
    "/api/keys/%00",
    "/%01",
    "/%7f",
    "/%0d%0aSet-Cookie:%20x=1",
    "/%ZZ",
    "/%",
    "/%E0%A4%A",
    "/%c0%ae",
    "/%c0%ae%c0%ae/%c0%ae%c0%ae/etc/passwd",
    "/%ff",
    "/%ed%a0%80",
    "/v1/%ZZ",
    "/api/keys/%ZZ",
  ];
  const failures: string[] = [];
  for (const target of targets) {
    const response = await rawGet(test.url, target, { authorization: `Bearer ${test.key}` });
    let shaped = false;
    try {
      const error = JSON.parse(response.body).error;
      shaped = typeof error.message === "string" && typeof error.code === "string" && typeof error.type === "string";
    } catch {}
    if (![400, 404].includes(response.status) || !shaped) failures.push(`${target} → ${response.status} ${response.body.slice(0, 120)}`);
  }
  assert.deepEqual(failures, []);
});

it("never serves a file outside the console's directory, and never answers 5xx to odd paths", async () => {
  const targets = ["/..%2f..%2fpackage.json", "/%2e%2e/%2e%2e/package.json", "/..%5c..%5cpackage.json", "/assets/..%2f..%2f..%2fpackage.json", "/index.html/x", `/${"a".repeat(5000)}`, "/.build-stamp", "/assets/"];
  for (const target of targets) {
    const response = await rawGet(test.url, target);
    assert.ok(response.status < 500, `${target.slice(0, 60)} → ${response.status}`);
    assert.doesNotMatch(response.body, /"name": "turnpike"/, target);
  }
});

it("sends nosniff, no framing and no referrer on every response, and a Content-Security-Policy", async () => {
  const responses = {
    health: await rawGet(test.url, "/health"),
    error: await rawGet(test.url, "/v1/models"),
    models: await rawGet(test.url, "/v1/models", { authorization: `Bearer ${test.key}` }),
    console: await rawGet(test.url, "/"),
    consoleRoute: await rawGet(test.url, "/keys"),
  };
  for (const [name, response] of Object.entries(responses)) {
    assert.match(response.headers, /\r\nx-content-type-options: nosniff\r\n/i, name);
    assert.match(response.headers, /\r\nx-frame-options: DENY\r\n/i, name);
    assert.match(response.headers, /\r\nreferrer-policy: no-referrer\r\n/i, name);
    assert.match(response.headers, /\r\ncontent-security-policy: [^\r]*frame-ancestors 'none'/i, name);
  }
  assert.match(responses.console.headers, /\r\ncontent-security-policy: default-src 'self'; script-src 'self'; /i);
  assert.match(responses.console.body, /<div id="root">/);
  assert.match(responses.health.headers, /\r\ncontent-security-policy: default-src 'none'/i);
  const asset = /src="(\/assets\/[^"]+\.js)"/.exec(responses.console.body)?.[1];
  assert.ok(asset !== undefined, "the built console names its script");
  const script = await rawGet(test.url, asset);
  assert.equal(script.status, 200);
  assert.match(script.headers, /\r\nx-content-type-options: nosniff\r\n/i);
  assert.match(script.headers, /\r\ncontent-type: (text|application)\/javascript/i);
  // A stream carries them too (it writes its own head).
  const stream = await fetch(`${test.baseURL}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${test.key}` },
    body: JSON.stringify({ model: "stories260K", stream: true, max_tokens: 2, messages: [{ role: "user", content: "Hi" }] }),
  });
  await stream.text();
  assert.equal(stream.headers.get("x-content-type-options"), "nosniff");
  assert.equal(stream.headers.get("x-frame-options"), "DENY");
});

it("tells clients an unavailable model's file is missing without its path, and logs the path", async () => {
  const secretDirectory = temporaryDirectory("turnpike-secret-place-");
  const missing = path.join(secretDirectory, "weights", "missing.gguf");
  const other = await startTestServer({ flags: { models: [storiesModel, `missing=${missing}`] } });
  try {
    const headers = { authorization: `Bearer ${other.key}` };
    const texts: string[] = [];
    for (const url of [`${other.baseURL}/models`, `${other.baseURL}/models/missing`, `${other.url}/api/models`]) {
      const response = await fetch(url, { headers });
      assert.equal(response.status, 200, url);
      texts.push(await response.text());
    }
    const listed = (JSON.parse(texts[0]!).data as Array<{ id: string; status: { state: string; detail?: string } }>).find((model) => model.id === "missing");
    assert.equal(listed?.status.state, "unavailable");
    assert.match(listed?.status.detail ?? "", /^Model 'missing' is not available: the model file is missing\. /);
    const chat = await fetch(`${other.baseURL}/chat/completions`, {
      method: "POST",
      headers: { ...headers, "content-type": "application/json" },
      body: JSON.stringify({ model: "missing", messages: [{ role: "user", content: "Hi" }] }),
    });
    assert.equal(chat.status, 503);
    texts.push(await chat.text());
    assert.match(texts.at(-1)!, /the model file is missing/);
    for (const text of texts) assert.ok(!text.includes(secretDirectory) && !text.includes("turnpike-secret-place"), `a response shows the path: ${text.slice(0, 300)}`);
    assert.ok(other.logText().includes(missing), "the operator's log names the file");
  } finally {
    await other.close();
  }
});
