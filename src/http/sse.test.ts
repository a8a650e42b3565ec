import assert from "node:assert/strict";
import http from "node:http";
import net, { type AddressInfo } from "node:net";
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

/** A server whose one response is handed to `use`, and a raw client that reads the headers, then stops reading. */
async function stalledClient(use: (sse: SseWriter) => Promise<void>): Promise<{ client: net.Socket; done: Promise<void> }> {
  let done!: Promise<void>;
  const server = http.createServer((_request, response) => {
    done = use(new SseWriter(response, {})).finally(() => {
      response.destroy();
      server.close();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const client = net.connect((server.address() as AddressInfo).port, "127.0.0.1");
  client.on("error", () => {});
  client.write("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
  await new Promise<void>((resolve) => client.once("data", () => resolve()));
  client.pause();
  return { client, done };
}

/**
 * Writes ~16 KB events until the writer reports congestion that lasts: the kernel's buffers
 * take megabytes first (each time they do, the writer drains). Bounded: 64 MB at most.
 */
async function fillUntilStalled(sse: SseWriter): Promise<void> {
  const event = { text: "x".repeat(16 * 1024) };
  for (let index = 0; index < 4096; index++) {
    sse.data(event);
    if (sse.congested && (await sse.waitForRoom(100)) === "stalled") return;
  }
  assert.fail("the buffer never stayed full");
}

describe("SseWriter backpressure", () => {
  it("reports a stalled client after the stall time, and sends no keep-alive into a full buffer", async () => {
    let state: string | undefined;
    let grew = -1;
    let waitedMs = 0;
    const { client, done } = await stalledClient(async (sse) => {
      await fillUntilStalled(sse);
      assert.ok(sse.congested);
      const buffered = sse.buffered;
      sse.pulse(0, "keep-alive", performance.now() + 1e9);
      grew = sse.buffered - buffered;
      const started = performance.now();
      state = await sse.waitForRoom(200);
      waitedMs = performance.now() - started;
    });
    await done;
    client.destroy();
    assert.equal(grew, 0, "the keep-alive was not buffered");
    assert.equal(state, "stalled");
    // Timers may fire a little early, never much: a lower bound is not flaky.
    assert.ok(waitedMs >= 150, `reported stalled after ${Math.round(waitedMs)} ms, before the stall time`);
  });

  it("reports room once the client reads again", async () => {
    let state: string | undefined;
    let resumeClient!: () => void;
    const resumed = new Promise<void>((resolve) => {
      resumeClient = resolve;
    });
    const { client, done } = await stalledClient(async (sse) => {
      await fillUntilStalled(sse);
      const waiting = sse.waitForRoom(60_000);
      resumeClient();
      state = await waiting;
    });
    await resumed;
    client.resume();
    await done;
    client.destroy();
    assert.equal(state, "drained");
  });

  it("stops waiting when the client goes or the caller aborts", async () => {
    const states: string[] = [];
    const abort = new AbortController();
    const { client, done } = await stalledClient(async (sse) => {
      await fillUntilStalled(sse);
      const aborted = sse.waitForRoom(60_000, abort.signal);
      abort.abort();
      states.push(await aborted);
      const closed = sse.waitForRoom(60_000);
      client.destroy();
      states.push(await closed);
    });
    await done;
    assert.deepEqual(states, ["aborted", "closed"]);
  });
});
