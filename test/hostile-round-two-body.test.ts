/**
 * Issue 19 rows 1 and 4: the JSON body worker and its parse queue under hostile bodies.
 *
 * Row 1: a URL without a route answers 404 on the headers (its body is never read); bodies nested
 * deeper than the limit are refused with 400 `json_too_deep` on both parsing paths; a worker that
 * crashes fails only the body it was parsing, is replaced and logged; a keyless flood of deep
 * bodies does not fail a paying client's large requests.
 *
 * Row 4: the parse queue is shared fairly between keys (one key filling it cannot make another's
 * bodies get 503 or wait behind all of its own), and a key over its requests-per-minute limit is
 * refused on the headers of a large body, before the body is read.
 */
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, describe, it } from "node:test";
import type { Kysely } from "kysely";
import OpenAI from "openai";
import { pino } from "pino";
import { Writable } from "node:stream";
import { createApiKey } from "../src/auth/api-keys.ts";
import { JsonBodyWorker, MAX_WAITING_BODIES, MAX_WAITING_BODIES_PER_OWNER } from "../src/http/json-body/json-body-parser.ts";
import { MAX_JSON_DEPTH } from "../src/http/json-body/json-depth.ts";
import type { ApiError } from "../src/protocol/errors.ts";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { assertError, refusal } from "./helpers/api-error.ts";
import { postJson, startTestServer, type TestServer } from "./helpers/server.ts";

const MODEL = "stories260K";
/** `depth` arrays, one inside the other. */
const nested = (depth: number) => "[".repeat(depth) + "]".repeat(depth);
/** A valid chat request of about `bytes` bytes (an unknown field pads it: accepted and dropped). */
const paddedChat = (bytes: number) => JSON.stringify({ model: MODEL, max_tokens: 2, messages: [{ role: "user", content: "Once upon a time" }], padding: "p".repeat(bytes) });
/** A request the worker refuses after parsing and validating it: 100,000 empty messages (2.9 MB). */
const manyMessages = () => Buffer.from(JSON.stringify({ model: MODEL, max_tokens: 2, messages: Array.from({ length: 100_000 }, () => ({ role: "user", content: "" })) }));

/** A logger whose lines a test can read. */
function memoryLogger(): { logger: pino.Logger; lines: () => Array<Record<string, unknown>> } {
  let text = "";
  const sink = new Writable({
    write(chunk, _encoding, callback) {
      text += chunk.toString();
      callback();
    },
  });
  return {
    logger: pino({ level: "info" }, sink),
    lines: () =>
      text
        .split("\n")
        .filter((line) => line !== "")
        .map((line) => JSON.parse(line) as Record<string, unknown>),
  };
}

/**
 * Sends a request's headers announcing a body of `contentLength` bytes, and none of the body: the
 * status of the answer that comes anyway (0 when none came within `waitMs`).
 */
function answerWithoutBody(port: number, path: string, headers: Record<string, string>, contentLength: number, waitMs = 15_000): Promise<{ status: number; text: string }> {
  return new Promise((resolve) => {
    const lines = [`POST ${path} HTTP/1.1`, "Host: 127.0.0.1", "Content-Type: application/json", `Content-Length: ${contentLength}`, ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`)];
    const socket = net.connect(port, "127.0.0.1", () => socket.write(`${lines.join("\r\n")}\r\n\r\n`));
    let received = "";
    const timer = setTimeout(() => socket.destroy(), waitMs);
    socket.on("data", (chunk) => {
      received += chunk.toString("latin1");
      const split = received.indexOf("\r\n\r\n");
      const length = /\r\ncontent-length: (\d+)/i.exec(received.slice(0, split))?.[1];
      if (split >= 0 && length !== undefined && Buffer.byteLength(received.slice(split + 4), "latin1") >= Number(length)) socket.destroy();
    });
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(timer);
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3}) /.exec(received)?.[1] ?? 0), text: received.slice(received.indexOf("\r\n\r\n") + 4) });
    });
  });
}

/**
 * Floods `url` with `body` from `connections` clients until `stop()` or `maxRequests` sent in all;
 * the statuses seen (0: the server closed the connection while the body was being sent).
 */
async function flood(url: string, body: string | Uint8Array, headers: Record<string, string>, connections: number, maxRequests: number, stop: () => boolean): Promise<Map<number, number>> {
  const statuses = new Map<number, number>();
  let sent = 0;
  const client = async () => {
    while (!stop() && sent < maxRequests) {
      sent++;
      let status = 0;
      try {
        const response = await fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: body as BodyInit, signal: AbortSignal.timeout(30_000) });
        await response.arrayBuffer();
        status = response.status;
      } catch {
        status = 0;
      }
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
    }
  };
  await Promise.all(Array.from({ length: connections }, client));
  return statuses;
}

describe("the body worker's queue", () => {
  it("answers owners in turn: another key's body waits behind one body of a key that queued many", async () => {
    const worker = new JsonBodyWorker({ logger: memoryLogger().logger });
    try {
      const order: string[] = [];
      const body = Buffer.from(paddedChat(400_000));
      const parse = (owner: string, label: string) => worker.parse(Buffer.from(body), { route: "/v1/chat/completions" }, owner).then(() => order.push(label));
      const all = [parse("a", "a1"), parse("a", "a2"), parse("a", "a3"), parse("b", "b1")];
      await Promise.all(all);
      assert.deepEqual(order, ["a1", "b1", "a2", "a3"]);
    } finally {
      await worker.close();
    }
  });

  it("lets one key hold only its share of the queue, so another key's bodies still get in", async () => {
    const worker = new JsonBodyWorker({ logger: memoryLogger().logger });
    try {
      const body = Buffer.from(paddedChat(400_000));
      const outcome = (owner: string) => worker.parse(Buffer.from(body), { route: "/v1/chat/completions" }, owner).then(() => "parsed", (error: ApiError) => `${error.status} ${error.code}`);
      const greedy = Array.from({ length: 20 }, () => outcome("greedy"));
      // What the server asks on a large body's headers, before reading it.
      assert.equal(worker.wouldRefuse("greedy"), true);
      assert.equal(worker.wouldRefuse("other"), false);
      const others = Array.from({ length: 4 }, () => outcome("other"));
      const greedyOutcomes = await Promise.all(greedy);
      assert.deepEqual(await Promise.all(others), Array(4).fill("parsed"), "another key's bodies are parsed");
      assert.equal(greedyOutcomes.filter((item) => item === "parsed").length, MAX_WAITING_BODIES_PER_OWNER);
      assert.ok(greedyOutcomes.filter((item) => item !== "parsed").every((item) => item === "503 server_busy"));
      assert.ok(MAX_WAITING_BODIES_PER_OWNER < MAX_WAITING_BODIES);
      assert.equal(worker.waiting, 0);
    } finally {
      await worker.close();
    }
  });

  it("fails only the body a crashed worker was parsing, logs the crash and parses the rest in a new worker", async () => {
    const { logger, lines } = memoryLogger();
    // A worker that exits on a body starting with "crash" and is the real worker otherwise.
    const worker = new JsonBodyWorker({ logger, workerUrl: new URL("./helpers/crashing-json-body-worker.ts", import.meta.url) });
    try {
      const body = paddedChat(300_000);
      const outcome = (text: string) => worker.parse(Buffer.from(text), { route: "/v1/chat/completions" }, "someone").then(() => "parsed", (error: ApiError) => `${error.status} ${error.code}`);
      const outcomes = await Promise.all([outcome(body), outcome(`crash${body}`), outcome(body), outcome(body)]);
      assert.deepEqual(outcomes, ["parsed", "500 internal_error", "parsed", "parsed"]);
      const crashes = lines().filter((line) => line.level === 50);
      assert.equal(crashes.length, 1, JSON.stringify(lines()));
      assert.match(String(crashes[0]!.msg), /JSON body worker/);
      assert.equal(worker.waiting, 0);
    } finally {
      await worker.close();
    }
  });

  it("refuses a body nested deeper than the limit, naming it, without crashing", async () => {
    const worker = new JsonBodyWorker({ logger: memoryLogger().logger });
    try {
      const deep = await refusal(worker.parse(Buffer.from(nested(200_000)), "none", "someone"));
      assert.equal(deep.status, 400);
      assert.equal(deep.code, "json_too_deep");
      assert.match(deep.message, new RegExp(String(MAX_JSON_DEPTH)));
      // Brackets inside strings are text, not nesting.
      const inString = JSON.stringify({ text: nested(200_000), escaped: '\\"[[[' });
      assert.deepEqual(await worker.parse(Buffer.from(inString), "none", "someone"), JSON.parse(inString));
      assert.deepEqual(await worker.parse(Buffer.from(`${nested(MAX_JSON_DEPTH)}${" ".repeat(300_000)}`), "none", "someone"), JSON.parse(nested(MAX_JSON_DEPTH)));
    } finally {
      await worker.close();
    }
  });
});

describe("a server under hostile bodies", () => {
  let test: TestServer;
  let database: Kysely<Database>;
  let port: number;
  before(async () => {
    test = await startTestServer({ flags: { body_limit: String(10 * 1024 * 1024), parallel: "2", queue_size: "64" } });
    database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
    port = Number(new URL(test.url).port);
  });
  after(async () => {
    await database?.destroy();
    await test?.close();
  });
  const keyOf = async (options: { rpm?: number } = {}) => (await createApiKey(database, { name: "hostile", ...options })).key;

  it("answers a URL without a route 404 on the headers, without reading its body", async () => {
    const answer = await answerWithoutBody(port, "/nope", {}, 10_000_000);
    assert.equal(answer.status, 404, "the 404 came before any of the body was sent");
    assert.equal(JSON.parse(answer.text).error.code, "unknown_url");
    const sent = await postJson(`${test.url}/nope`, nested(1000));
    assertError(sent, 404, "unknown_url");
  });

  it("refuses bodies nested deeper than the limit with 400 json_too_deep, small and large, on /v1 and /api", async () => {
    const authorization = { authorization: `Bearer ${test.key}` };
    const small = await postJson(`${test.baseURL}/chat/completions`, `{"model":"${MODEL}","messages":${nested(5000)}}`, authorization);
    assertError(small, 400, "json_too_deep");
    assert.match(small.body.error.message, new RegExp(String(MAX_JSON_DEPTH)));
    const large = await postJson(`${test.baseURL}/chat/completions`, `{"model":"${MODEL}","messages":${nested(200_000)}}`, authorization);
    assertError(large, 400, "json_too_deep");
    assertError(await postJson(`${test.url}/api/keys`, `{"name":${nested(MAX_JSON_DEPTH + 1)}}`, authorization), 400, "json_too_deep");
    // A deep but legitimate shape (a JSON schema of nested objects) is served.
    let schema: Record<string, unknown> = { type: "string" };
    for (let level = 0; level < 20; level++) schema = { type: "object", properties: { x: schema }, required: ["x"], additionalProperties: false };
    const served = await postJson(
      `${test.baseURL}/chat/completions`,
      { model: MODEL, max_tokens: 2, messages: [{ role: "user", content: "Hi" }], response_format: { type: "json_schema", json_schema: { name: "deep", schema } } },
      authorization,
    );
    assert.equal(served.status, 200, served.text.slice(0, 300));
    assert.equal(test.logs().filter((line) => line.level === 50).length, 0, "nothing logged at error level");
  });

  it("serves a paying client's large requests while a keyless client floods deep bodies", async () => {
    const deep = nested(200_000);
    let done = false;
    const flooding = Promise.all([
      flood(`${test.url}/nope`, deep, {}, 2, 400, () => done),
      flood(`${test.baseURL}/chat/completions`, deep, {}, 2, 400, () => done),
    ]);
    const outcomes: string[] = [];
    try {
      for (let index = 0; index < 12; index++) {
        const response = await postJson(`${test.baseURL}/chat/completions`, paddedChat(300_000), { authorization: `Bearer ${test.key}` });
        outcomes.push(response.status === 200 ? "200" : `${response.status} ${response.text.slice(0, 200)}`);
      }
    } finally {
      done = true;
    }
    const [unrouted, chat] = await flooding;
    assert.deepEqual(outcomes, Array(12).fill("200"), `flood statuses: /nope ${JSON.stringify([...unrouted])}, chat ${JSON.stringify([...chat])}`);
    assert.ok(![...unrouted.keys(), ...chat.keys()].some((status) => status >= 500), `flood statuses: /nope ${JSON.stringify([...unrouted])}, chat ${JSON.stringify([...chat])}`);
  });

  it("keeps another key's 300 KB requests served while one key fills the parse queue from 20 connections", async () => {
    const greedy = await keyOf();
    const victim = new OpenAI({ baseURL: test.baseURL, apiKey: await keyOf(), maxRetries: 0, timeout: 60_000 });
    const attack = manyMessages();
    let done = false;
    const flooding = flood(`${test.baseURL}/chat/completions`, attack, { authorization: `Bearer ${greedy}` }, 20, 400, () => done);
    const outcomes: string[] = [];
    const latencies: number[] = [];
    try {
      // Let the flood fill the queue first.
      await new Promise((resolve) => setTimeout(resolve, 1000));
      for (let index = 0; index < 10; index++) {
        const started = performance.now();
        try {
          await victim.chat.completions.create({
            model: MODEL,
            max_tokens: 2,
            messages: [{ role: "user", content: "Once upon a time" }],
            // @ts-expect-error unknown fields are accepted and dropped: this one makes the body large
            padding: "p".repeat(300_000),
          });
          outcomes.push("ok");
          latencies.push(Math.round(performance.now() - started));
        } catch (error) {
          outcomes.push(String(error));
        }
      }
    } finally {
      done = true;
    }
    const statuses = await flooding;
    process.stderr.write(`the other key's latencies (ms): ${latencies.join(", ")}; the greedy key's statuses: ${JSON.stringify([...statuses])}\n`);
    assert.deepEqual(outcomes, Array(10).fill("ok"), `the greedy key's statuses: ${JSON.stringify([...statuses])}`);
    assert.ok((statuses.get(400) ?? 0) > 0, `the greedy key's bodies were parsed too: ${JSON.stringify([...statuses])}`);
  });

  it("refuses a key over its requests per minute on a large body's headers, before the body is read", async () => {
    const key = await keyOf({ rpm: 1 });
    const first = await postJson(`${test.baseURL}/chat/completions`, paddedChat(300_000), { authorization: `Bearer ${key}` });
    assert.equal(first.status, 200, first.text.slice(0, 300));
    const answers = await Promise.all(Array.from({ length: 16 }, () => answerWithoutBody(port, "/v1/chat/completions", { authorization: `Bearer ${key}` }, 10_000_000)));
    assert.deepEqual(
      answers.map((answer) => answer.status),
      Array(16).fill(429),
      "each 429 came with none of the 10 MB body sent",
    );
    assert.equal(JSON.parse(answers[0]!.text).error.code, "rate_limit_exceeded");
  });

  it("counts a large request once against requests per minute", async () => {
    const key = await keyOf({ rpm: 2 });
    for (let index = 0; index < 2; index++) {
      const response = await postJson(`${test.baseURL}/chat/completions`, paddedChat(300_000), { authorization: `Bearer ${key}` });
      assert.equal(response.status, 200, response.text.slice(0, 300));
      assert.equal(response.headers.get("x-ratelimit-remaining-requests"), String(1 - index));
    }
    const third = await postJson(`${test.baseURL}/chat/completions`, paddedChat(300_000), { authorization: `Bearer ${key}` });
    assertError(third, 429, "rate_limit_exceeded");
  });
});
