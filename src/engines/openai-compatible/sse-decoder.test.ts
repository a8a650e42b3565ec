import { test } from "node:test";
import assert from "node:assert/strict";
import { decodeServerSentEvents, SseProtocolError, type ServerSentEvent } from "./sse-decoder.ts";

async function* pieces(...texts: (string | Uint8Array)[]): AsyncGenerator<Uint8Array> {
  for (const text of texts) yield typeof text === "string" ? new TextEncoder().encode(text) : text;
}

async function decode(...texts: (string | Uint8Array)[]): Promise<ServerSentEvent[]> {
  const events: ServerSentEvent[] = [];
  for await (const event of decodeServerSentEvents(pieces(...texts))) events.push(event);
  return events;
}

test("gives each data payload of an LF stream", async () => {
  assert.deepEqual(await decode('data: {"a":1}\n\ndata: [DONE]\n\n'), [{ data: '{"a":1}' }, { data: "[DONE]" }]);
});

test("reads CRLF and CR line ends, also split between pieces", async () => {
  assert.deepEqual(await decode("data: one\r", "\n\r\ndata: two\r\r"), [{ data: "one" }, { data: "two" }]);
});

test("skips comments, keeps event names, joins multi-line data, accepts a missing space", async () => {
  const events = await decode(": keep-alive\n\nevent: error\ndata:{\"error\":\ndata: 1}\nid: 7\nretry: 10\n\n");
  assert.deepEqual(events, [{ event: "error", data: '{"error":\n1}' }]);
});

test("reassembles a multi-byte character split between pieces", async () => {
  const bytes = new TextEncoder().encode("data: é€\n\n");
  assert.deepEqual(await decode(bytes.slice(0, 7), bytes.slice(7, 9), bytes.slice(9)), [{ data: "é€" }]);
});

test("gives an event cut before its blank line when the stream ends", async () => {
  assert.deepEqual(await decode("data: a\n\ndata: b"), [{ data: "a" }, { data: "b" }]);
});

test("refuses a line over the limit without holding it all", async () => {
  const events = decodeServerSentEvents(pieces("data: ", "x".repeat(40), "x".repeat(40)), { maxLineLength: 64 });
  await assert.rejects(async () => {
    for await (const _ of events);
  }, SseProtocolError);
});

test("refuses an event whose data lines add up past the limit", async () => {
  const events = decodeServerSentEvents(pieces("data: 0123456789\n".repeat(10)), { maxEventLength: 50 });
  await assert.rejects(async () => {
    for await (const _ of events);
  }, SseProtocolError);
});

test("a long line arriving one byte at a time is decoded whole", async () => {
  const line = `data: ${"y".repeat(5000)}\n\n`;
  const events = await decode(...line.split(""));
  assert.equal(events.length, 1);
  assert.equal(events[0]!.data.length, 5000);
});
