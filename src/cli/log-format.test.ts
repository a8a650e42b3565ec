import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { pino } from "pino";
import { chooseLogFormat, colorsFor, prettyLine, prettyPrinter } from "./log-format.ts";

/** What a pino logger configured as `createLogger` writes, as JSON lines. */
function records(write: (logger: pino.Logger) => void): string[] {
  const lines: string[] = [];
  const logger = pino({ base: { service: "turnpike" } }, { write: (line: string) => void lines.push(line) });
  write(logger);
  return lines;
}

describe("--log-format", () => {
  it("auto logs JSON when standard output is not a terminal, pretty when it is", () => {
    assert.equal(chooseLogFormat("auto", false), "json");
    assert.equal(chooseLogFormat("auto", true), "pretty");
  });

  it("pretty and json are forced whatever the output", () => {
    assert.equal(chooseLogFormat("pretty", false), "pretty");
    assert.equal(chooseLogFormat("json", true), "json");
  });
});

describe("colors", () => {
  it("off when not a terminal, unless FORCE_COLOR asks for them", () => {
    assert.equal(colorsFor({ isTTY: false }, {}), false);
    assert.equal(colorsFor({}, { FORCE_COLOR: "1" }), true);
    assert.equal(colorsFor({}, { FORCE_COLOR: "0" }), false);
    assert.equal(colorsFor({}, { FORCE_COLOR: "false" }), false);
  });

  it("on a terminal, as the terminal says (Node's hasColors honours NO_COLOR and FORCE_COLOR)", () => {
    assert.equal(colorsFor({ isTTY: true, hasColors: () => false }, {}), false);
    assert.equal(colorsFor({ isTTY: true, hasColors: () => true }, {}), true);
  });
});

describe("pretty log lines", () => {
  const pretty = prettyLine({ color: false });

  it("a request is one short line: method, path, status, duration", () => {
    const [line] = records((logger) => logger.child({ reqId: "req_42" }).info({ method: "POST", url: "/v1/chat/completions", status: 200, latency_ms: 312 }, "request"));
    const text = pretty(line!);
    assert.match(text, /^\[\d\d:\d\d:\d\d\] INFO: POST \/v1\/chat\/completions 200 312ms\n$/);
  });

  it("other records: the message, then the fields that matter as key=value, without pid, hostname or service", () => {
    const [line] = records((logger) => logger.warn({ model: "stories", state: "degraded", detail: "1 of 2 members down" }, "model stories: degraded"));
    const text = pretty(line!);
    assert.match(text, /^\[\d\d:\d\d:\d\d\] WARN: model stories: degraded detail="1 of 2 members down"\n$/);
    assert.doesNotMatch(text, /pid|hostname|service|turnpike/);
  });

  it("an error shows its message, and its stack at error level", () => {
    const [warning, failure] = records((logger) => {
      logger.warn({ err: new Error("connection reset") }, "a database connection broke");
      logger.error({ err: new Error("disk full") }, "ledger sweep failed");
    });
    assert.match(pretty(warning!), /^\[\d\d:\d\d:\d\d\] WARN: a database connection broke err="connection reset"\n$/);
    const text = pretty(failure!);
    assert.match(text, /ERROR: ledger sweep failed err="disk full"\n {4}Error: disk full\n {8}at /);
  });

  it("a generation's record joins its request's line: model, key id, prompt + completion tokens", () => {
    const print = prettyPrinter({ color: false });
    const lines = records((logger) => {
      const request = logger.child({ reqId: "req_1" });
      request.info({ model: "stories", stream: true, key_id: "key_abc", status: 200, prompt_tokens: 21, completion_tokens: 16, finish_reason: "length", latency_ms: 30 }, "chat completion");
      logger.child({ reqId: "req_2" }).info({ method: "GET", url: "/v1/models", status: 200, latency_ms: 1 }, "request");
      request.info({ method: "POST", url: "/v1/chat/completions", status: 200, latency_ms: 31 }, "request");
      const embedding = logger.child({ reqId: "req_3" });
      embedding.info({ model: "minilm", inputs: 2, key_id: "key_abc", status: 200, prompt_tokens: 7, latency_ms: 3 }, "embeddings");
      embedding.info({ method: "POST", url: "/v1/embeddings", status: 200, latency_ms: 4 }, "request");
    });
    const text = lines.map(print).join("");
    assert.equal(text.replace(/^\[\d\d:\d\d:\d\d\] /gm, ""), [
      "INFO: GET /v1/models 200 1ms",
      "INFO: POST /v1/chat/completions 200 31ms model=stories key=key_abc 21+16 tok",
      "INFO: POST /v1/embeddings 200 4ms model=minilm key=key_abc 7 tok",
      "",
    ].join("\n"));
  });

  it("a generation's record that comes after its request's line is shown on its own", () => {
    const print = prettyPrinter({ color: false });
    const lines = records((logger) => {
      const request = logger.child({ reqId: "req_1" });
      request.info({ method: "POST", url: "/v1/chat/completions", status: 499, latency_ms: 31 }, "request");
      request.info({ model: "stories", key_id: "key_abc", status: 499, prompt_tokens: 21, completion_tokens: 3, latency_ms: 30 }, "chat completion");
    });
    const text = lines.map(print).join("");
    assert.match(text, /INFO: POST \/v1\/chat\/completions 499 31ms\n.*INFO: chat completion model=stories key_id=key_abc status=499 prompt_tokens=21 completion_tokens=3 latency_ms=30\n$/);
  });

  it("colors only when asked", () => {
    const [line] = records((logger) => logger.info({ method: "GET", url: "/v1/models", status: 404, latency_ms: 2 }, "request"));
    assert.ok(!pretty(line!).includes("\u001b["));
    assert.ok(prettyLine({ color: true })(line!).includes("\u001b["));
  });
});
