/**
 * `UpstreamClient.streamGeneration` against a real HTTP server: the body arrives whole and in
 * order however slowly it is read (the connection pauses meanwhile), a reader that stops early
 * closes the upstream request, and failures before the answer are the same typed errors as the
 * other posts give.
 */
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import { UpstreamClient, UpstreamConnectionError } from "./upstream-client.ts";

const PIECE = "x".repeat(16 * 1024);
const PIECES = 64;

describe("UpstreamClient.streamGeneration", () => {
  let server: http.Server;
  let base: string;
  let closedEarly = 0;
  let bodies: string[] = [];
  before(async () => {
    server = http.createServer((request, response) => {
      let body = "";
      request.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")));
      request.on("end", () => {
        bodies.push(body);
        if (request.url === "/endless") {
          // An answer that never ends on its own: only the client closing it stops it.
          response.writeHead(418, { "content-type": "text/plain" });
          const timer = setInterval(() => response.write(PIECE), 5);
          response.on("close", () => {
            clearInterval(timer);
            closedEarly++;
          });
          return;
        }
        response.writeHead(200, { "content-type": "text/event-stream" });
        let sent = 0;
        const more = () => {
          while (sent < PIECES) {
            sent++;
            if (!response.write(PIECE)) return void response.once("drain", more);
          }
          response.end();
        };
        more();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it("gives the whole body in order to a slow reader, and sends the body and headers asked for", async () => {
    const client = new UpstreamClient({ connectTimeoutMs: 5000, connectionsPerOrigin: 4, apiKey: "secret" });
    bodies = [];
    const answer = await client.streamGeneration(`${base}/v1/chat/completions`, '{"model":"m"}', new AbortController().signal);
    assert.equal(answer.status, 200);
    assert.equal(answer.headers["content-type"], "text/event-stream");
    let received = 0;
    let pieces = 0;
    for await (const piece of answer.body) {
      received += piece.length;
      // A reader slower than the socket: the handler holds at most its bound and pauses the rest.
      if (pieces++ % 8 === 0) await sleep(5);
    }
    assert.equal(received, PIECE.length * PIECES);
    assert.deepEqual(bodies, ['{"model":"m"}']);
    await client.close();
  });

  it("closes the upstream request when the reader stops early", async () => {
    const client = new UpstreamClient({ connectTimeoutMs: 5000, connectionsPerOrigin: 4 });
    const before = closedEarly;
    const answer = await client.streamGeneration(`${base}/endless`, "{}", new AbortController().signal);
    assert.equal(answer.status, 418);
    for await (const _piece of answer.body) break;
    for (let waited = 0; closedEarly === before && waited < 2000; waited += 10) await sleep(10);
    assert.equal(closedEarly, before + 1);
    await client.close();
  });

  it("aborts on the request's signal, before and after the answer", async () => {
    const client = new UpstreamClient({ connectTimeoutMs: 5000, connectionsPerOrigin: 4 });
    const early = new AbortController();
    early.abort(new Error("gone"));
    await assert.rejects(client.streamGeneration(`${base}/v1/chat/completions`, "{}", early.signal), (error: unknown) => error instanceof UpstreamConnectionError && error.kind === "aborted");
    const late = new AbortController();
    const answer = await client.streamGeneration(`${base}/v1/chat/completions`, "{}", late.signal);
    const reading = (async () => {
      for await (const _piece of answer.body) await sleep(20);
    })();
    late.abort(new Error("client left"));
    await assert.rejects(reading, /client left/);
    await client.close();
  });

  it("fails as a connection failure where nothing listens", async () => {
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const client = new UpstreamClient({ connectTimeoutMs: 5000, connectionsPerOrigin: 4 });
    await assert.rejects(client.streamGeneration(`http://127.0.0.1:${port}/v1/chat/completions`, "{}", new AbortController().signal), (error: unknown) => error instanceof UpstreamConnectionError && error.kind === "connect");
    await client.close();
  });
});
