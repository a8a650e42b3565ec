/**
 * Issue 19, row 6: an upstream's own words never reach a client. Whatever an upstream's error
 * says (Windows and UNC paths, host names, e-mail addresses, IPv6 forms, `Authorization: Basic`,
 * AWS key ids), the client gets a fixed message for the upstream's status, in a 400 and in a
 * mid-stream error event alike; the words are in the log, at warn, with the member's name.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import type http from "node:http";
import { after, before, describe, it } from "node:test";
import { FaultUpstream, sendJson } from "./helpers/fault-upstream.ts";
import { startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";

/** What an upstream's error may say, each a form the old sanitiser let through. */
const LEAKY_WORDS = [
  "C:\\Users\\svc-llm\\models\\qwen.gguf",
  "\\\\fileserver01\\share\\weights",
  "gpu-node-7.prod.example.net",
  "ops-team@example-corp.com",
  "fe80::1ff:fe23:4567:890a%eth0",
  "::ffff:10.1.2.3",
  "2001:db8::8a2e:370:7334",
  "Authorization: Basic dXNlcjpwYXNzd29yZA==",
  "AKIAIOSFODNN7EXAMPLE",
];
const LEAKY_MESSAGE = `Bad request (${LEAKY_WORDS.join(", ")})`;
/** Pieces of each form that must not appear in anything a client receives. */
const FRAGMENTS = ["svc-llm", "qwen.gguf", "fileserver01", "gpu-node-7", "example.net", "example-corp", "ops-team", "fe80", "ffff", "10.1.2.3", "2001:db8", "dXNlcjpwYXNzd29yZA", "AKIA", "Basic"];

/** How the upstream answers the next chat request. */
type Behaviour = { kind: "status"; status: number } | { kind: "event"; code: number };

describe("an upstream's error words never reach the client (issue 19, row 6)", () => {
  let upstream: FaultUpstream;
  let gateway: TestServer;
  let behaviour: Behaviour = { kind: "status", status: 400 };
  const configDir = temporaryDirectory("turnpike-upstream-errors-");

  before(async () => {
    upstream = await FaultUpstream.start({
      model: "leaky",
      routes: {
        "POST /v1/chat/completions": (_body: unknown, response: http.ServerResponse) => {
          if (behaviour.kind === "status") return sendJson(response, behaviour.status, { error: { message: LEAKY_MESSAGE, type: "invalid_request_error", code: null } });
          response.writeHead(200, { "content-type": "text/event-stream" });
          const chunk = { id: "chatcmpl-1", object: "chat.completion.chunk", created: 0, model: "leaky", choices: [{ index: 0, delta: { role: "assistant", content: "Hello" }, finish_reason: null }] };
          response.write(`data: ${JSON.stringify(chunk)}\n\n`);
          response.end(`data: ${JSON.stringify({ error: { message: LEAKY_MESSAGE, type: "server_error", code: behaviour.code } })}\n\n`);
        },
      },
    });
    const configFile = path.join(configDir, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        // A model per failing status, so that no member is taken out by the failures of another test.
        models: ["leaky", "leaky-401", "leaky-500"].map((id) => ({
          id,
          context_length: 4096,
          upstream: { kind: "openai", model: "leaky", urls: [{ url: upstream.baseUrl, name: `${id}-a` }], max_attempts: 1, health_interval: 60 },
        })),
      }),
    );
    gateway = await startTestServer({ configFile });
  });

  after(async () => {
    await gateway?.close();
    await upstream?.close();
    fs.rmSync(configDir, { recursive: true, force: true });
  });

  const ask = (stream: boolean, model = "leaky") =>
    fetch(`${gateway.baseURL}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${gateway.key}` },
      body: JSON.stringify({ model, messages: [{ role: "user", content: "Hi" }], max_tokens: 10, stream }),
    });

  const dataEvents = (text: string) =>
    text
      .split("\n")
      .filter((line) => line.startsWith("data: "))
      .map((line) => line.slice(6));

  function assertNoLeak(text: string): void {
    for (const fragment of FRAGMENTS) assert.ok(!text.includes(fragment), `'${fragment}' reached the client: ${text}`);
  }

  /** The log's warn lines naming the member that carry the upstream's words, whole. */
  function assertLogged(status: number, member: string): void {
    const lines = gateway.logs().filter((line) => line.level === 40 && line.member === member && line.status === status && typeof line.upstream_message === "string");
    assert.ok(lines.length > 0, `a warn line with the upstream's words for HTTP ${status}`);
    for (const words of LEAKY_WORDS) assert.ok((lines.at(-1)!.upstream_message as string).includes(words), `${words} is in the log`);
  }

  const statuses: Array<[number, number, string]> = [
    [400, 400, "The upstream engine refused the request as invalid."],
    [413, 400, "The upstream engine refused the request as too large."],
    [422, 400, "The upstream engine refused a parameter of the request as out of range or of the wrong type."],
    [401, 503, "The model's upstream servers are unavailable at the moment. Retry shortly."],
    [500, 502, "The model's upstream servers failed to answer (HTTP 500). Retry shortly."],
  ];
  for (const stream of [false, true]) {
    for (const [upstreamStatus, status, message] of statuses) {
      it(`an upstream ${upstreamStatus} is a ${status} with a fixed message (${stream ? "streamed" : "not streamed"})`, async () => {
        behaviour = { kind: "status", status: upstreamStatus };
        const model = upstreamStatus === 401 || upstreamStatus >= 500 ? `leaky-${upstreamStatus}` : "leaky";
        const response = await ask(stream, model);
        const text = await response.text();
        // A stream opens before the upstream answered: its error is the last event.
        assert.equal(response.status, stream ? 200 : status, text);
        const body = stream ? dataEvents(text).at(-1)! : text;
        assert.equal((JSON.parse(body) as { error: { message: string } }).error.message, message);
        assertNoLeak(text);
        assertLogged(upstreamStatus, `${model}-a`);
      });
    }
  }

  for (const [code, message] of [
    // Once content is out, a refusal is a failure mid-reply like any other.
    [400, "The model's upstream server failed in the middle of the reply."],
    [500, "The model's upstream server failed mid-stream."],
  ] as const) {
    it(`an error event (code ${code}) after content ends the stream with a fixed message`, async () => {
      behaviour = { kind: "event", code };
      const response = await ask(true);
      assert.equal(response.status, 200);
      const text = await response.text();
      const events = dataEvents(text);
      assert.ok(events.some((event) => event.includes("Hello")), `the content came first: ${text}`);
      const last = JSON.parse(events.at(-1)!) as { error: { message: string } };
      assert.equal(last.error.message, message);
      assertNoLeak(text);
      const lines = gateway.logs().filter((line) => line.level === 40 && line.member === "leaky-a" && typeof line.upstream_message === "string");
      for (const words of LEAKY_WORDS) assert.ok((lines.at(-1)!.upstream_message as string).includes(words), `${words} is in the log`);
    });
  }
});
