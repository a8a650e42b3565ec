/**
 * callJson: answers parsed, failures classified (connect, timeout, status, protocol), the key sent
 * as a bearer header and never echoed, the caller's abort rethrown.
 */
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, describe, it } from "node:test";
import { FaultUpstream, sendJson } from "../../../test/helpers/fault-upstream.ts";
import { callJson, retryAfterMs } from "./upstream-json.ts";

describe("callJson", () => {
  let upstream: FaultUpstream;
  before(async () => {
    upstream = await FaultUpstream.start({
      routes: {
        "GET /not-json": (_body, response) => {
          response.writeHead(200, { "content-type": "text/html" });
          response.end("<html>");
        },
        "GET /slow": (_body, response) => void setTimeout(() => sendJson(response, 200, {}), 2000).unref(),
        "GET /auth": (_body, response, request) => sendJson(response, 200, { authorization: request.headers.authorization ?? null }),
        "GET /busy": (_body, response) => sendJson(response, 503, {}, { "retry-after": "4" }),
      },
    });
  });
  after(() => upstream.close());

  it("parses a JSON answer and sends the key as a bearer token", async () => {
    const answer = await callJson(`${upstream.origin}/auth`, { apiKey: "sk-secret", timeoutMs: 1000 });
    assert.deepEqual(answer, { ok: true, status: 200, body: { authorization: "Bearer sk-secret" } });
  });

  it("turns credentials in the URL into basic auth, not into the request line", async () => {
    const answer = await callJson(`http://user:pa%20ss@127.0.0.1:${new URL(upstream.origin).port}/auth`, { timeoutMs: 1000 });
    assert.deepEqual(answer, { ok: true, status: 200, body: { authorization: `Basic ${Buffer.from("user:pa ss").toString("base64")}` } });
  });

  it("classifies an error status with its retry-after", async () => {
    assert.deepEqual(await callJson(`${upstream.origin}/busy`, { timeoutMs: 1000 }), { ok: false, failure: "status", status: 503, retryAfterMs: 4000 });
  });

  it("classifies a body that is not JSON as protocol", async () => {
    assert.deepEqual(await callJson(`${upstream.origin}/not-json`, { timeoutMs: 1000 }), { ok: false, failure: "protocol" });
  });

  it("classifies no answer in time as timeout", async () => {
    assert.deepEqual(await callJson(`${upstream.origin}/slow`, { timeoutMs: 100 }), { ok: false, failure: "timeout" });
  });

  it("classifies a refused connection as connect", async () => {
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    assert.deepEqual(await callJson(`http://127.0.0.1:${port}/health`, { timeoutMs: 1000, apiKey: "sk-secret" }), { ok: false, failure: "connect" });
  });

  it("rethrows the caller's abort", async () => {
    const controller = new AbortController();
    const pending = callJson(`${upstream.origin}/slow`, { timeoutMs: 5000, signal: controller.signal });
    controller.abort(new Error("caller left"));
    await assert.rejects(pending, /caller left/);
  });
});

describe("retryAfterMs", () => {
  it("reads seconds and HTTP dates", () => {
    assert.equal(retryAfterMs("3"), 3000);
    assert.equal(retryAfterMs(["1.5"]), 1500);
    assert.equal(retryAfterMs(new Date(10_000).toUTCString(), 4000), 6000);
    assert.equal(retryAfterMs(undefined), undefined);
    assert.equal(retryAfterMs("soon"), undefined);
  });
});
