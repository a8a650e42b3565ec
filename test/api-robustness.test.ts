/**
 * Every `/api` route and `/v1/chat/completions`, hit with malformed bodies and queries, with a
 * valid, a missing and an unknown key: never a 5xx, and every error in the OpenAI shape.
 */
import assert from "node:assert/strict";
import { after, before, it } from "node:test";
import { startTestServer, type TestServer } from "./helpers/server.ts";

let test: TestServer;
before(async () => {
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
