import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { RouteOptions } from "fastify";
import { API_BODY_LIMIT, AUTH_BODY_LIMIT, connectionsCheckingInterval, limitApiBodies, serverTimeouts } from "./transport.ts";

describe("transport limits", () => {
  it("checks for late requests every quarter of the timeout, within 1 to 30 seconds", () => {
    assert.equal(connectionsCheckingInterval(2000), 1000);
    assert.equal(connectionsCheckingInterval(60_000), 15_000);
    assert.equal(connectionsCheckingInterval(3_600_000), 30_000);
  });

  it("gives the headers no longer than the whole request, and leaves Node's defaults without limits", () => {
    const options = serverTimeouts({ requestTimeoutMs: 60_000, idleTimeoutMs: 5000, maxConnections: 10 });
    assert.equal(options.requestTimeout, 60_000);
    assert.equal(options.keepAliveTimeout, 5000);
    assert.deepEqual(options.http, { requestTimeout: 60_000, headersTimeout: 60_000, keepAliveTimeout: 5000, connectionsCheckingInterval: 15_000 });
    assert.deepEqual(serverTimeouts(undefined), {});
  });

  it("limits /api/auth bodies to 16 KiB and other /api bodies to 256 KiB, never above the server's limit", () => {
    const route = (url: string, bodyLimit?: number) => ({ url, method: "POST", handler: () => {}, bodyLimit }) as RouteOptions;
    const limit = limitApiBodies(10 * 1024 * 1024);
    const routes = [route("/api/auth/signin"), route("/api/keys"), route("/v1/chat/completions"), route("/api/billing/stripe/webhook", 1234)];
    for (const each of routes) limit(each);
    assert.deepEqual(
      routes.map((each) => each.bodyLimit),
      [AUTH_BODY_LIMIT, API_BODY_LIMIT, undefined, 1234],
    );
    const small = route("/api/keys");
    limitApiBodies(4096)(small);
    assert.equal(small.bodyLimit, 4096);
  });
});
