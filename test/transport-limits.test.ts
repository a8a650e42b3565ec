/**
 * Transport limits against a real server over real sockets: a request (headers or body) that
 * trickles in is cut with 408 `request_timeout` once `--request-timeout` has passed (Node checks
 * only every `connectionsCheckingInterval`, which Turnpike sets from the timeout); one without a
 * valid key is refused on its headers and cut all the same; a streamed response longer than the timeout is not cut; idle keep-alive
 * connections close after `--idle-timeout`; `--max-connections` refuses connections past the
 * cap and `/health` answers again once they are gone; `/api/auth/*` takes small bodies only.
 */
import assert from "node:assert/strict";
import net from "node:net";
import { setTimeout as delay } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import { startTestServer, type TestServer } from "./helpers/server.ts";
import { connectionsCheckingInterval } from "../src/http/transport.ts";

const REQUEST_TIMEOUT_S = 2;
const IDLE_TIMEOUT_S = 1;
/** When a trickled request must have been cut: the timeout, Node's checking interval, and room for a loaded machine. */
const CUT_WITHIN_MS = REQUEST_TIMEOUT_S * 1000 + connectionsCheckingInterval(REQUEST_TIMEOUT_S * 1000) + 4000;

type Exchange = { text: string; elapsedMs: number; closed: boolean };

function portOf(test: TestServer): number {
  return Number(new URL(test.url).port);
}

function connect(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1", () => resolve(socket));
    socket.once("error", reject);
  });
}

/**
 * Sends `head`, then one byte of `trickle` every `everyMs` (never all of it, if it is long
 * enough) until the server answers and closes, or `giveUpMs` passes. Elapsed time counts from
 * the first byte sent.
 */
async function trickle(port: number, head: string, trickleText: string, everyMs: number, giveUpMs: number): Promise<Exchange> {
  const socket = await connect(port);
  const started = performance.now();
  let text = "";
  let closed = false;
  socket.on("data", (chunk) => (text += chunk.toString()));
  socket.on("error", () => {});
  const done = new Promise<void>((resolve) => socket.once("close", () => ((closed = true), resolve())));
  socket.write(head);
  let sent = 0;
  const timer = setInterval(() => {
    if (sent < trickleText.length && !socket.destroyed) socket.write(trickleText[sent++]!);
  }, everyMs);
  await Promise.race([done, delay(giveUpMs)]);
  clearInterval(timer);
  const elapsedMs = performance.now() - started;
  socket.destroy();
  return { text, elapsedMs, closed };
}

/** A `GET /health` on its own connection (`Connection: close`): the status, or the error. */
async function healthOnce(port: number): Promise<number | string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1", () => socket.write("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
    let text = "";
    socket.on("data", (chunk) => (text += chunk.toString()));
    socket.on("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
    socket.on("close", () => resolve(text === "" ? "closed without an answer" : Number(text.split(" ")[1])));
    socket.setTimeout(10_000, () => socket.destroy());
  });
}

function assertTimeoutAnswer(exchange: Exchange): void {
  assert.ok(exchange.closed, `the connection was still open after ${Math.round(exchange.elapsedMs)} ms`);
  assert.ok(exchange.elapsedMs < CUT_WITHIN_MS, `cut after ${Math.round(exchange.elapsedMs)} ms, later than ${CUT_WITHIN_MS} ms`);
  assert.ok(exchange.elapsedMs > REQUEST_TIMEOUT_S * 1000 * 0.75, `cut after ${Math.round(exchange.elapsedMs)} ms, before the request timeout`);
  assert.match(exchange.text, /^HTTP\/1\.1 408 /);
  const body = JSON.parse(exchange.text.slice(exchange.text.indexOf("\r\n\r\n") + 4));
  assert.deepEqual(body, { error: { message: "The request did not arrive in time.", type: "invalid_request_error", param: null, code: "request_timeout" } });
  assert.match(exchange.text, /\r\nx-content-type-options: nosniff\r\n/i);
}

describe("request and idle timeouts", () => {
  let test: TestServer;
  before(async () => {
    test = await startTestServer({ flags: { request_timeout: String(REQUEST_TIMEOUT_S), idle_timeout: String(IDLE_TIMEOUT_S), parallel: "1" } });
  });
  after(async () => {
    await test?.close();
  });

  it("cuts a body trickled at one byte a second with 408 request_timeout", async () => {
    const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${test.key}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n`;
    const exchange = await trickle(portOf(test), head, "x".repeat(1000), 1000, CUT_WITHIN_MS + 2000);
    assertTimeoutAnswer(exchange);
    assert.equal(await healthOnce(portOf(test)), 200);
  });

  it("answers a trickled body without a key 401 at once, and still cuts the connection within the request timeout", async () => {
    const head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n";
    const exchange = await trickle(portOf(test), head, "x".repeat(1000), 1000, CUT_WITHIN_MS + 2000);
    assert.match(exchange.text, /^HTTP\/1\.1 401 /, "refused on its headers, before the body arrived");
    assert.ok(exchange.closed, `the connection was still open after ${Math.round(exchange.elapsedMs)} ms`);
    assert.ok(exchange.elapsedMs < CUT_WITHIN_MS, `cut after ${Math.round(exchange.elapsedMs)} ms, later than ${CUT_WITHIN_MS} ms`);
  });

  it("cuts headers trickled at one byte every half second with 408 request_timeout", async () => {
    const exchange = await trickle(portOf(test), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", "y".repeat(1000), 500, CUT_WITHIN_MS + 2000);
    assertTimeoutAnswer(exchange);
  });

  it("closes a connection that never sends a byte", async () => {
    const exchange = await trickle(portOf(test), "", "", 1000, CUT_WITHIN_MS + 2000);
    assert.ok(exchange.closed, `the connection was still open after ${Math.round(exchange.elapsedMs)} ms`);
    assert.ok(exchange.elapsedMs < CUT_WITHIN_MS, `closed after ${Math.round(exchange.elapsedMs)} ms`);
  });

  it("does not cut a streamed response that lasts longer than the request timeout", async () => {
    // The client makes the response last: it reads one chunk, then nothing for longer than the cut
    // could take. Chunks with 20 log probabilities for 4 choices are more than socket buffers
    // hold, so the server is still sending (paused by backpressure) when the timeout has passed.
    const response = await fetch(`${test.baseURL}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${test.key}`, connection: "close" },
      body: JSON.stringify({ model: "stories260K", stream: true, n: 4, logprobs: true, top_logprobs: 20, max_tokens: 1500, logit_bias: { "2": -100 }, messages: [{ role: "user", content: "Once upon a time" }] }),
    });
    assert.equal(response.status, 200);
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let text = decoder.decode((await reader.read()).value);
    await delay(CUT_WITHIN_MS);
    for (let part = await reader.read(); !part.done; part = await reader.read()) text += decoder.decode(part.value, { stream: true });
    // The server's own record: the generation ended only after the cut would have come.
    const logged = test.logs().filter((line) => line.msg === "chat completion" && line.choices === 4).at(-1);
    assert.ok(logged !== undefined && Number(logged.latency_ms) > CUT_WITHIN_MS, `the stream ended on the server after ${logged?.latency_ms} ms`);
    assert.equal((text.match(/"finish_reason":"length"/g) ?? []).length, 4);
    assert.match(text, /data: \[DONE\]\n\n$/);
  });

  it("closes an idle keep-alive connection after the idle timeout", async () => {
    const socket = await connect(portOf(test));
    let text = "";
    socket.on("data", (chunk) => (text += chunk.toString()));
    const closed = new Promise<number>((resolve) => socket.once("close", () => resolve(performance.now())));
    socket.write("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    for (let attempt = 0; attempt < 100 && !text.includes('{"status":"ok"}'); attempt++) await delay(20);
    assert.match(text, /^HTTP\/1\.1 200 /);
    assert.match(text, /keep-alive/i);
    const answeredAt = performance.now();
    const closedAt = await Promise.race([closed, delay(IDLE_TIMEOUT_S * 1000 + 6000).then(() => Number.NaN)]);
    socket.destroy();
    assert.ok(!Number.isNaN(closedAt), "the idle connection was still open");
    assert.ok(closedAt - answeredAt >= IDLE_TIMEOUT_S * 1000 * 0.75, `closed after ${Math.round(closedAt - answeredAt)} ms`);
  });
});

describe("the connection cap", () => {
  const cap = 4;
  let test: TestServer;
  before(async () => {
    test = await startTestServer({ flags: { max_connections: String(cap), idle_timeout: "60" } });
  });
  after(async () => {
    await test?.close();
  });

  it("refuses connections past --max-connections, and /health answers again once they are gone", async () => {
    const port = portOf(test);
    const held: net.Socket[] = [];
    for (let index = 0; index < cap; index++) {
      const socket = await connect(port);
      let text = "";
      socket.on("data", (chunk) => (text += chunk.toString()));
      socket.write("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
      for (let attempt = 0; attempt < 100 && !text.includes('{"status":"ok"}'); attempt++) await delay(20);
      assert.match(text, /^HTTP\/1\.1 200 /, `connection ${index + 1} of ${cap} is served`);
      held.push(socket);
    }
    const refused = await healthOnce(port);
    assert.equal(typeof refused, "string", `a connection past the cap is closed unanswered, got ${refused}`);
    assert.ok(
      test.logs().some((entry) => entry.msg === "refused connections: --max-connections open already" && entry.max_connections === cap),
      "the operator's log says connections are being refused",
    );
    for (const socket of held) socket.destroy();
    let status: number | string = refused;
    for (let attempt = 0; attempt < 50 && status !== 200; attempt++) {
      await delay(100);
      status = await healthOnce(port);
    }
    assert.equal(status, 200, "/health answers once the held connections are gone");
  });
});

describe("body limits on /api", () => {
  let test: TestServer;
  before(async () => {
    test = await startTestServer();
  });
  after(async () => {
    await test?.close();
  });

  async function post(path: string, body: string): Promise<{ status: number; body: any }> {
    const response = await fetch(`${test.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${test.key}`, origin: test.url },
      body,
    });
    return { status: response.status, body: await response.json() };
  }

  it("answers 413 request_too_large to a sign-in body over 16 KB, in the OpenAI shape", async () => {
    for (const path of ["/api/auth/signin", "/api/auth/signup"]) {
      const { status, body } = await post(path, JSON.stringify({ email: "a@example.com", password: "p".repeat(17 * 1024) }));
      assert.equal(status, 413, path);
      assert.deepEqual(body, { error: { message: "The request body is too large.", type: "invalid_request_error", param: null, code: "request_too_large" } });
    }
    const small = await post("/api/auth/signin", JSON.stringify({ email: "a@example.com", password: "p".repeat(15 * 1024) }));
    // Read and validated: the 15 KB password is refused by the schema, not by the body limit.
    assert.equal(small.status, 400);
    assert.equal(small.body.error.param, "password");
  });

  it("answers 413 to other /api bodies over 256 KB, while chat completions take larger ones", async () => {
    const large = JSON.stringify({ name: "k".repeat(300 * 1024) });
    assert.equal((await post("/api/keys", large)).status, 413);
    const chat = await post("/v1/chat/completions", JSON.stringify({ model: "no-such-model", messages: [{ role: "user", content: "x".repeat(300 * 1024) }] }));
    assert.notEqual(chat.status, 413);
    assert.equal(chat.body.error.code, "model_not_found");
  });
});
