/**
 * Faults of upstream servers, end to end: a Turnpike node in front of two fault-injecting
 * upstreams (test doubles, for failures a real server will not produce on demand), called with
 * the official `openai` client. Before content the client never sees a member fail (the next one
 * answers); after content a failure ends the stream with an error event, never mixed output; a
 * client that leaves closes the upstream request at once and pays for what was generated;
 * exhausted retries answer 502 or 504; an upstream refusing our key is a 503 and an error log
 * without the key.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, beforeEach, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import OpenAI from "openai";
import { openStore } from "../src/store/open.ts";
import { FaultUpstream, type FaultStep } from "./helpers/fault-upstream.ts";
import { startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";

const SECRET = "sk-upstream-secret-0123456789";

describe("an upstream that is down when Turnpike starts", () => {
  it("lists the model unavailable, then serves it once the upstream answers, by itself", async () => {
    // A port nothing listens on yet.
    const probe = await FaultUpstream.start();
    const port = Number(new URL(probe.origin).port);
    await probe.close();
    const gateway = await startTestServer({ flags: { models: [], upstreams: [`late=http://127.0.0.1:${port}/v1`] } });
    let upstream: FaultUpstream | undefined;
    try {
      const status = async () => ((await (await fetch(`${gateway.baseURL}/models/late`, { headers: { authorization: `Bearer ${gateway.key}` } })).json()) as { status: { state: string } }).status.state;
      assert.equal(await status(), "unavailable");
      await assert.rejects(gateway.client.chat.completions.create({ model: "late", messages: [{ role: "user", content: "Hi" }], max_tokens: 5 }), (error: unknown) => error instanceof OpenAI.APIError && error.status === 503);
      upstream = await FaultUpstream.start({ model: "late", maxModelLen: 2048, port });
      // The first try again comes 5 s after start.
      let state = await status();
      for (let attempt = 0; attempt < 150 && state !== "ready"; attempt++) {
        await delay(100);
        state = await status();
      }
      assert.equal(state, "ready");
      const completion = await gateway.client.chat.completions.create({ model: "late", messages: [{ role: "user", content: "Hi" }], max_tokens: 5 });
      assert.equal(completion.choices[0]!.message.content, "Hello there!");
    } finally {
      await gateway.close();
      await upstream?.close();
    }
  });
});

describe("upstream faults through Turnpike", () => {
  let first: FaultUpstream;
  let second: FaultUpstream;
  let gateway: TestServer;
  const configDir = temporaryDirectory("turnpike-faults-");

  before(async () => {
    first = await FaultUpstream.start({ model: "faulty", maxModelLen: 4096 });
    second = await FaultUpstream.start({ model: "faulty", maxModelLen: 4096 });
    const configFile = path.join(configDir, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [
          {
            id: "faulty",
            upstream: { kind: "vllm", urls: [first.baseUrl, second.baseUrl], api_key_env: "TURNPIKE_TEST_FAULT_KEY", first_token_timeout: 1, idle_timeout: 1, max_attempts: 2, health_interval: 60 },
          },
        ],
      }),
    );
    gateway = await startTestServer({ configFile, env: { TURNPIKE_TEST_FAULT_KEY: SECRET } });
  });

  beforeEach(() => {
    first.mode = { kind: "complete" };
    second.mode = { kind: "complete" };
  });

  after(async () => {
    await gateway?.close();
    await first?.close();
    await second?.close();
    fs.rmSync(configDir, { recursive: true, force: true });
  });

  /** Makes the member that gets the next request fail with `step`, and the other answer. */
  const ask = (stream: boolean) =>
    stream
      ? gateway.client.chat.completions.create({ model: "faulty", messages: [{ role: "user", content: "Hi" }], max_tokens: 10, stream: true })
      : gateway.client.chat.completions.create({ model: "faulty", messages: [{ role: "user", content: "Hi" }], max_tokens: 10 });

  async function text(stream: boolean): Promise<string> {
    if (!stream) return ((await ask(false)) as OpenAI.ChatCompletion).choices[0]!.message.content ?? "";
    let joined = "";
    for await (const chunk of (await ask(true)) as AsyncIterable<OpenAI.ChatCompletionChunk>) joined += chunk.choices[0]?.delta.content ?? "";
    return joined;
  }

  for (const stream of [false, true]) {
    it(`fails over before content, with no error the client sees: 5xx, garbage, a hang, a slow first token (stream: ${stream})`, async () => {
      for (const fault of [
        { kind: "status", status: 503 },
        { kind: "garbage", afterChunks: 0 },
        { kind: "hang" },
        { kind: "complete", firstTokenDelayMs: 3000 },
      ] as const) {
        // Whichever member is asked first fails; the other one answers. Decided as each request
        // arrives (not by a timer racing the failover, which a quick failover could beat).
        let failed = false;
        const firstFails = (): FaultStep => {
          if (failed) return { kind: "complete" };
          failed = true;
          return fault;
        };
        first.mode = firstFails;
        second.mode = firstFails;
        const before = first.requests.length + second.requests.length;
        assert.equal(await text(stream), "Hello there!", `${fault.kind}`);
        assert.equal(first.requests.length + second.requests.length - before, 2, `${fault.kind}: one failed attempt, then the other member`);
      }
    });
  }

  it("ends a stream cut after content with an error event and nothing from another member", async () => {
    first.mode = { kind: "cut", afterChunks: 2 };
    second.mode = { kind: "cut", afterChunks: 2 };
    const beforeSecond = second.requests.length + first.requests.length;
    const response = await fetch(`${gateway.baseURL}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${gateway.key}` },
      body: JSON.stringify({ model: "faulty", messages: [{ role: "user", content: "Hi" }], max_tokens: 10, stream: true }),
    });
    const body = await response.text();
    const events = body.split("\n\n").filter((event) => event.startsWith("data: ")).map((event) => event.slice(6));
    assert.notEqual(events.at(-1), "[DONE]");
    const last = JSON.parse(events.at(-1)!) as { error: { code: string; type: string } };
    assert.equal(last.error.code, "upstream_error");
    const content = events.slice(0, -1).map((event) => (JSON.parse(event) as OpenAI.ChatCompletionChunk).choices[0]?.delta.content ?? "").join("");
    assert.equal(content, "Hello there", "the first member's words, and only those");
    assert.equal(second.requests.length + first.requests.length, beforeSecond + 1, "no second member was asked");
  });

  it("closes the upstream request within a second of the client leaving, and bills what was generated", async () => {
    first.mode = { kind: "complete", text: Array.from({ length: 200 }, (_, index) => `w${index} `), chunkDelayMs: 20 };
    second.mode = first.mode;
    const before = first.requests.length + second.requests.length;
    const controller = new AbortController();
    const stream = await gateway.client.chat.completions.create(
      { model: "faulty", messages: [{ role: "user", content: "Hi" }], max_tokens: 300, stream: true },
      { signal: controller.signal },
    );
    let received = 0;
    try {
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta.content) received++;
        if (received === 5) controller.abort();
      }
    } catch {
      // The client's own abort.
    }
    const upstreamRequest = [...first.requests, ...second.requests].slice(before)[0]!;
    const leftAt = performance.now();
    await Promise.race([upstreamRequest.clientClosed, delay(1000).then(() => assert.fail("the upstream request was still open a second later"))]);
    assert.ok(performance.now() - leftAt < 1000);
    const database = await openStore({ dataDir: gateway.dataDir, databaseUrl: "" });
    try {
      let record;
      for (let attempt = 0; attempt < 100 && record === undefined; attempt++) {
        record = await database.selectFrom("usage_records").selectAll().where("status", "=", 499).orderBy("created_at", "desc").executeTakeFirst();
        if (record === undefined) await delay(20);
      }
      assert.ok(record !== undefined, "the cut request was recorded");
      assert.equal(record.usage_source, "estimated");
      assert.ok(Number(record.completion_tokens) >= received, `billed at least what the client received (${record.completion_tokens} >= ${received})`);
      assert.ok(Number(record.completion_tokens) < 200, "and not the whole answer");
    } finally {
      await database.destroy();
    }
  });

  it("answers 503 upstream_unavailable when the upstream refuses our key, logs it for the operator without the key, and says the member refuses it", async () => {
    // Its own pool: a refusal takes the member out until a probe finds the key accepted (60 s here).
    const refusing = await FaultUpstream.start({ model: "refusing", maxModelLen: 4096 });
    const directory = temporaryDirectory("turnpike-refusing-");
    const configFile = path.join(directory, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({ models: [{ id: "refusing", upstream: { kind: "vllm", urls: [refusing.baseUrl], api_key_env: "TURNPIKE_TEST_FAULT_KEY", health_interval: 60 } }] }),
    );
    const server = await startTestServer({ configFile, env: { TURNPIKE_TEST_FAULT_KEY: SECRET } });
    try {
      // The key was accepted when the pool opened; the upstream refuses it from now on (revoked there).
      refusing.mode = { kind: "status", status: 401, message: `Invalid key ${SECRET}` };
      await assert.rejects(server.client.chat.completions.create({ model: "refusing", messages: [{ role: "user", content: "Hi" }], max_tokens: 10 }), (error: unknown) => {
        assert.ok(error instanceof OpenAI.APIError);
        assert.equal(error.status, 503);
        assert.equal((error.error as { code: string }).code, "upstream_unavailable");
        assert.ok(!JSON.stringify(error.error).includes(SECRET));
        return true;
      });
      assert.ok(server.logs().some((line) => line.level === 50 && String(line.msg).includes("upstream")), "an error line for the operator");
      // One refused request is enough: the member is out, said to refuse the key that comes from this variable.
      const model = (await (await fetch(`${server.baseURL}/models/refusing`, { headers: { authorization: `Bearer ${server.key}` } })).json()) as { status: { state: string; detail?: string } };
      assert.equal(model.status.state, "unavailable");
      assert.match(model.status.detail ?? "", /401 Unauthorized: the server refused the credentials; the key comes from the environment variable TURNPIKE_TEST_FAULT_KEY/);
      assert.ok(server.logs().some((line) => String(line.msg).includes("refused the credentials")), "the refusal logged");
      assert.ok(!server.logText().includes(SECRET), "the key is in no log line");
      // The key went to the upstream as a bearer token.
      assert.equal(refusing.requests.at(-1)?.authorization, `Bearer ${SECRET}`);
    } finally {
      await server.close();
      await refusing.close();
      fs.rmSync(directory, { recursive: true, force: true });
    }
  });
  // Last: it takes both members out for a cooldown.
  it("answers 502 when every member fails, and 504 when none answers in time", async () => {
    first.mode = { kind: "status", status: 500 };
    second.mode = { kind: "status", status: 500 };
    await assert.rejects(ask(false), (error: unknown) => error instanceof OpenAI.APIError && error.status === 502 && (error.error as { code: string }).code === "upstream_error");
    first.mode = { kind: "hang" };
    second.mode = { kind: "hang" };
    await assert.rejects(ask(false), (error: unknown) => error instanceof OpenAI.APIError && error.status === 504 && (error.error as { code: string }).code === "upstream_timeout");
  });


  it("exposes per-member metrics: requests by outcome, time to first token, in flight and health", async () => {
    const text = await (await fetch(`${gateway.url}/metrics`)).text();
    const value = (pattern: RegExp) => text.split("\n").filter((line) => pattern.test(line)).reduce((sum, line) => sum + Number(line.split(" ").at(-1)), 0);
    // Members are labelled by name (here the default, `<model>#<index>`), never by URL.
    const member = "faulty#0";
    assert.ok(!text.includes(first.origin) && !text.includes(second.origin), "no member URL in /metrics");
    assert.ok(value(new RegExp(`^turnpike_upstream_requests_total\\{model="faulty",member="${member}",outcome="ok"\\}`)) > 0, "ok requests counted per member");
    assert.ok(value(/^turnpike_upstream_requests_total\{model="faulty",member="[^"]+",outcome="(status|timeout|protocol)"\}/) > 0, "failures counted by kind");
    assert.ok(value(/^turnpike_upstream_time_to_first_token_seconds_count\{model="faulty"/) > 0, "time to first token observed");
    assert.equal(text.split("\n").filter((line) => line.startsWith('turnpike_engine_member_healthy{model="faulty"')).length, 2, "a health gauge per member");
    assert.equal(text.split("\n").filter((line) => line.startsWith('turnpike_engine_member_in_flight{model="faulty"')).length, 2, "an in-flight gauge per member");
    assert.ok(!text.includes(SECRET));
  });
});
