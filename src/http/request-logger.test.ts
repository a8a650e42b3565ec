import { test } from "node:test";
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import pino from "pino";
import type { FastifyBaseLogger } from "fastify";
import { requestLoggerFactory } from "./request-logger.ts";

/** A pino logger at `level` (redacting `authorization` as the server's does) and the lines it wrote. */
function logger(level: string) {
  const lines: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split("\n")) if (line !== "") lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { parent: pino({ level, redact: ["authorization"] }, stream) as unknown as FastifyBaseLogger, lines };
}

test("a request's logger writes the lines pino's child writes, and is made only by a line the level lets through", async () => {
  const lazy = logger("warn");
  const eager = logger("warn");
  const request = requestLoggerFactory(lazy.parent, { reqId: "req_1" }, {});
  const reference = eager.parent.child({ reqId: "req_1" }, {});
  for (const log of [request, reference]) {
    log.info({ skipped: true }, "below the level");
    log.debug("below the level");
    log.warn({ status: 503, authorization: "Bearer sk-secret" }, "upstream down");
    log.error(new Error("boom"), "failed");
    log.child({ part: "inner" }).warn("from a grandchild");
  }
  await new Promise((resolve) => setImmediate(resolve));
  const strip = (line: Record<string, unknown>) => {
    const { time: _time, pid: _pid, hostname: _hostname, ...rest } = line;
    if (typeof rest.err === "object" && rest.err !== null) delete (rest.err as Record<string, unknown>).stack;
    return rest;
  };
  assert.equal(lazy.lines.length, 3);
  assert.deepEqual(lazy.lines.map(strip), eager.lines.map(strip));
  assert.equal(lazy.lines[0]!.reqId, "req_1");
  assert.equal(lazy.lines[0]!.authorization, "[Redacted]");
  assert.equal(request.level, "warn");
});

test("below the level nothing is made or written; the level read and set is the request's", () => {
  const { parent, lines } = logger("info");
  const request = requestLoggerFactory(parent, { reqId: "req_2" }, {});
  assert.equal(request.level, "info");
  request.debug("nothing");
  request.level = "debug";
  assert.equal(request.level, "debug");
  // The parent keeps its own level.
  assert.equal(parent.level, "info");
  request.debug("now written");
  assert.deepEqual(
    lines.map((line) => [line.reqId, line.msg]),
    [["req_2", "now written"]],
  );
});

test("a route level or serializers of its own get pino's child as it is", () => {
  const { parent } = logger("info");
  const child = requestLoggerFactory(parent, { reqId: "req_3" }, { level: "debug" });
  assert.equal(child.level, "debug");
  assert.equal(typeof (child as unknown as { bindings(): unknown }).bindings, "function");
});
