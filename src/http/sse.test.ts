import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { performance } from "node:perf_hooks";
import { describe, it } from "node:test";
import { SseWriter } from "./sse.ts";

/** Runs `write` against a real response and returns the body the client received. */
async function received(write: (sse: SseWriter) => void): Promise<string> {
  const server = http.createServer((_request, response) => {
    const sse = new SseWriter(response, {});
    write(sse);
    sse.done();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const response = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
    assert.equal(response.headers.get("content-type"), "text/event-stream; charset=utf-8");
    return await response.text();
  } finally {
    server.close();
  }
}

describe("SseWriter keep-alives", () => {
  it("comments only when the stream has been quiet for the idle time", async () => {
    const body = await received((sse) => {
      const start = performance.now();
      sse.pulse(1000, "too soon", start + 10);
      sse.data({ n: 1 });
      const written = performance.now();
      sse.pulse(1000, "still too soon", written + 999);
      sse.pulse(1000, "generating", written + 1000);
      // The comment counts as a write: the next is due a full idle time later.
      const commented = performance.now();
      sse.pulse(1000, "again too soon", commented + 500);
      sse.pulse(1000, "waiting", commented + 1500);
    });
    assert.equal(body, 'data: {"n":1}\n\n: generating\n\n: waiting\n\ndata: [DONE]\n\n');
  });

  it("sends them on its own while nothing else is written, until stopped", async () => {
    const body = await new Promise<string>((resolve) => {
      const server = http.createServer((_request, response) => {
        const sse = new SseWriter(response, {});
        const stop = sse.keepAlive(20, () => "quiet");
        setTimeout(() => {
          stop();
          sse.done();
        }, 200);
      });
      server.listen(0, "127.0.0.1", async () => {
        const response = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
        resolve(await response.text());
        server.close();
      });
    });
    assert.ok(body.endsWith("data: [DONE]\n\n"));
    assert.ok((body.match(/: quiet\n\n/g) ?? []).length >= 2, body);
  });
});
