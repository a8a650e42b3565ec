/**
 * The upstream engine against tiny HTTP servers playing upstreams (node:http on 127.0.0.1), over
 * a trivial pool that lends members in order: retries and failover before content, timeouts,
 * cancellation, error mapping, and what `open`/`prepare` learn and refuse.
 */
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { upstreamSchema, type UpstreamKind } from "./config-schema.ts";
import type { EngineMember, GenerationRequest, StreamPart } from "../engine.ts";
import { ApiError, ContextLengthExceededError, UnsupportedParameterError, UpstreamError, UpstreamTimeoutError, UpstreamUnavailableError } from "../../protocol/errors.ts";
import type { AcquireOptions, MemberOutcome, PoolLease, UpstreamPool } from "./pool-types.ts";
import { OpenAiCompatibleEngine } from "./openai-compatible-engine.ts";

type Handler = (request: IncomingMessage, response: ServerResponse, body: string) => void;

type Upstream = { url: string; requests: { path: string; headers: IncomingMessage["headers"]; body: string }[]; closed: Promise<void>; server: Server };

const servers: Server[] = [];
after(() => {
  for (const server of servers) server.closeAllConnections();
  for (const server of servers) server.close();
});

/** An upstream on a free port; `closed` resolves when a chat request's connection closes early. */
async function upstream(handler: Handler): Promise<Upstream> {
  let markClosed: () => void = () => {};
  const closed = new Promise<void>((resolve) => (markClosed = resolve));
  const requests: Upstream["requests"] = [];
  const server = createServer((request, response) => {
    let body = "";
    request.on("data", (piece: Buffer) => (body += piece.toString("utf8")));
    request.on("end", () => {
      requests.push({ path: request.url ?? "", headers: request.headers, body });
      response.on("close", () => {
        if (!response.writableFinished) markClosed();
      });
      handler(request, response, body);
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, requests, closed, server };
}

/** A port nothing listens on. */
async function deadUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `http://127.0.0.1:${port}/v1`;
}

const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta, finish_reason: finish }] });

function sse(response: ServerResponse, events: unknown[], end = true): void {
  response.writeHead(200, { "content-type": "text/event-stream" });
  for (const event of events) response.write(`data: ${typeof event === "string" ? event : JSON.stringify(event)}\n\n`);
  if (end) response.end();
}

const helloStream = [
  chunk({ role: "assistant", content: "" }),
  chunk({ content: "Hello" }),
  chunk({ content: " world" }),
  chunk({}, "stop"),
  { id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [], usage: { prompt_tokens: 11, completion_tokens: 3, total_tokens: 14 } },
  "[DONE]",
];

/** Lends members in order, skipping those tried while another is left; records every release. */
class ListPool implements UpstreamPool {
  readonly kind: UpstreamKind | undefined;
  readonly urls: string[];
  readonly releases: { member: string; outcome: MemberOutcome }[] = [];
  acquired = 0;
  constructor(urls: string[], kind?: UpstreamKind) {
    this.urls = urls;
    this.kind = kind;
  }
  async acquire(options: AcquireOptions): Promise<PoolLease> {
    if (options.signal.aborted) throw options.signal.reason;
    const url = this.urls.find((candidate) => !options.exclude?.has(candidate)) ?? this.urls[0]!;
    this.acquired++;
    let released = false;
    return {
      member: { id: url, url, baseUrl: url },
      release: (outcome) => {
        assert.equal(released, false, "a lease is released once");
        released = true;
        this.releases.push({ member: url, outcome });
      },
    };
  }
  members(): EngineMember[] {
    return this.urls.map((id) => ({ id, busy: 0, capacity: 4, waiting: 0, healthy: true }));
  }
  state(): "ready" | "degraded" | "unavailable" {
    return "ready";
  }
  close(): void {}
}

const request = (overrides: Partial<GenerationRequest> = {}): GenerationRequest => ({
  messages: [{ role: "user", content: "Say hello" }],
  sampling: { temperature: 1, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: [] },
  choices: 1,
  ...overrides,
});

async function engineOver(
  urls: string[],
  options: { kind?: UpstreamKind; contextLength?: number; apiKey?: string; entry?: Record<string, unknown>; events?: string[] } = {},
): Promise<{ engine: OpenAiCompatibleEngine; pool: ListPool }> {
  const pool = new ListPool(urls, options.kind ?? "vllm");
  const engine = new OpenAiCompatibleEngine({
    modelId: "test-model",
    upstream: upstreamSchema.parse({ urls, kind: options.kind ?? "vllm", first_token_timeout: 0.5, idle_timeout: 0.3, connect_timeout: 1, max_attempts: 3, ...options.entry }),
    ...("contextLength" in options ? (options.contextLength !== undefined ? { contextLength: options.contextLength } : {}) : { contextLength: 4096 }),
    ...(options.apiKey !== undefined ? { apiKey: options.apiKey } : {}),
    pool,
    onEvent: (level, message, fields) => options.events?.push(`${level}: ${message} ${JSON.stringify(fields)}`),
  });
  await engine.open();
  return { engine, pool };
}

async function collect(parts: AsyncIterable<StreamPart>): Promise<{ parts: StreamPart[]; error?: unknown }> {
  const seen: StreamPart[] = [];
  try {
    for await (const part of parts) seen.push(part);
    return { parts: seen };
  } catch (error) {
    return { parts: seen, error };
  }
}

const textOf = (parts: StreamPart[]) => parts.map((part) => (part.type === "text-delta" ? part.text : "")).join("");

test("streams an upstream's reply with its usage; the body carries the bound, the key goes as a bearer token", async () => {
  const server = await upstream((_request, response) => sse(response, helloStream));
  const { engine, pool } = await engineOver([server.url], { apiKey: "sk-test-key" });
  const prepared = await engine.prepare(request());
  assert.equal(prepared.promptCount, "upper-bound");
  const generation = prepared.start(new AbortController().signal);
  await generation.admitted;
  const { parts, error } = await collect(generation.parts);
  assert.equal(error, undefined);
  assert.equal(textOf(parts), "Hello world");
  assert.deepEqual(parts.at(-1), { type: "finish", choice: 0, reason: "stop", usage: { promptTokens: 11, cachedPromptTokens: 0, completionTokens: 3 } });
  assert.deepEqual(generation.usage(), { source: "upstream", promptTokens: 11, cachedPromptTokens: 0, completionTokens: 3 });
  // Without max_tokens the prompt was offered to vLLM's /tokenize first (this server cannot count: the bound stands).
  assert.deepEqual(server.requests.map((sent) => sent.path), ["/tokenize", "/v1/chat/completions"]);
  const sent = server.requests[1]!;
  assert.equal(sent.headers.authorization, "Bearer sk-test-key");
  const body = JSON.parse(sent.body) as Record<string, unknown>;
  assert.equal(body.max_tokens, prepared.maxTokens);
  assert.equal(body.model, "test-model");
  assert.deepEqual(body.stream_options, { include_usage: true, continuous_usage_stats: true });
  assert.equal(pool.releases.length, 1);
  assert.equal(pool.releases[0]!.outcome.kind, "ok");
  await engine.close();
});

test("the events of one upstream read leave as one batch (the same parts as one by one); a failure after content still gives out what came before it", async () => {
  /** The whole stream in one write: one piece for the reader. */
  const oneWrite = (events: unknown[]) => (_request: IncomingMessage, response: ServerResponse) => {
    response.writeHead(200, { "content-type": "text/event-stream" });
    response.end(events.map((event) => `data: ${typeof event === "string" ? event : JSON.stringify(event)}\n\n`).join(""));
  };
  const whole = await upstream(oneWrite(helloStream));
  const { engine } = await engineOver([whole.url]);
  const generation = (await engine.prepare(request())).start(new AbortController().signal);
  const batches: (readonly StreamPart[])[] = [];
  for await (const batch of generation.batches!) batches.push(batch);
  assert.deepEqual(
    batches.map((batch) => batch.map((part) => part.type)),
    [["text-delta", "text-delta"], ["finish"]],
    "the piece's content together, then the finish once the stream ended",
  );
  assert.equal(textOf(batches.flat()), "Hello world");
  const byParts = (await collect((await engine.prepare(request())).start(new AbortController().signal).parts)).parts;
  assert.deepEqual(byParts, batches.flat());

  const failing = await upstream(oneWrite([chunk({ content: "Hel" }), chunk({ content: "lo" }), { error: { message: "EngineCore died", code: 500 } }, "[DONE]"]));
  const { engine: second } = await engineOver([failing.url]);
  const cut = (await second.prepare(request())).start(new AbortController().signal);
  const seen: (readonly StreamPart[])[] = [];
  const error = await (async () => {
    for await (const batch of cut.batches!) seen.push(batch);
  })().then(
    () => undefined,
    (caught: unknown) => caught,
  );
  assert.ok(error instanceof UpstreamError, String(error));
  assert.deepEqual(seen.map((batch) => textOf([...batch])), ["Hello"], "the content before the error event went out, in one batch");
  assert.equal(cut.usage().completionTokens, 2);
  await engine.close();
  await second.close();
});

test("fails over before content: a refused connection, then a 503, then a member that answers", async () => {
  const dead = await deadUrl();
  const busy = await upstream((_request, response) => {
    response.writeHead(503, { "content-type": "application/json", "retry-after": "0" });
    response.end(JSON.stringify({ error: { message: "overloaded" } }));
  });
  const good = await upstream((_request, response) => sse(response, helloStream));
  const { engine, pool } = await engineOver([dead, busy.url, good.url]);
  const { parts, error } = await collect((await engine.prepare(request())).start(new AbortController().signal).parts);
  assert.equal(error, undefined);
  assert.equal(textOf(parts), "Hello world");
  assert.deepEqual(
    pool.releases.map((release) => [release.member, release.outcome.kind]),
    [
      [dead, "connect"],
      [busy.url, "status"],
      [good.url, "ok"],
    ],
  );
  assert.deepEqual(pool.releases[1]!.outcome, { kind: "status", status: 503, retryAfterMs: 0 });
  await engine.close();
});

test("when every attempt fails, the client gets 502 (or 504 for timeouts) after max_attempts", async () => {
  const broken = await upstream((_request, response) => {
    response.writeHead(500);
    response.end("boom");
  });
  const { engine, pool } = await engineOver([broken.url], { entry: { max_attempts: 2 } });
  const { error } = await collect((await engine.prepare(request({ maxTokens: 16 }))).start(new AbortController().signal).parts);
  assert.ok(error instanceof UpstreamError, String(error));
  assert.equal(broken.requests.length, 2);
  assert.equal(pool.releases.length, 2);
  await engine.close();

  const silent = await upstream(() => {}); // never answers
  const slow = await engineOver([silent.url], { entry: { max_attempts: 2, first_token_timeout: 0.1 } });
  const timedOut = await collect((await slow.engine.prepare(request())).start(new AbortController().signal).parts);
  assert.ok(timedOut.error instanceof UpstreamTimeoutError, String(timedOut.error));
  assert.deepEqual(
    slow.pool.releases.map((release) => release.outcome.kind),
    ["timeout", "timeout"],
  );
  await slow.engine.close();
});

test("no first token in time: the next member is tried (role-only chunks are not content)", async () => {
  const stalls = await upstream((_request, response) => sse(response, [chunk({ role: "assistant", content: "" })], false));
  const good = await upstream((_request, response) => sse(response, helloStream));
  const { engine, pool } = await engineOver([stalls.url, good.url], { entry: { first_token_timeout: 0.2 } });
  const { parts, error } = await collect((await engine.prepare(request())).start(new AbortController().signal).parts);
  assert.equal(error, undefined);
  assert.equal(textOf(parts), "Hello world");
  assert.deepEqual(
    pool.releases.map((release) => release.outcome.kind),
    ["timeout", "ok"],
  );
  await stalls.closed;
  await engine.close();
});

test("once content is out a failure ends the stream with a typed error, never a second upstream's reply", async () => {
  const cases: [string, Handler, new (...args: never[]) => ApiError][] = [
    ["idle", (_request, response) => sse(response, [chunk({ content: "Hel" })], false), UpstreamTimeoutError],
    ["error event", (_request, response) => sse(response, [chunk({ content: "Hel" }), { error: { message: "EngineCore died at 10.1.2.3:9000", code: 500 } }, "[DONE]"]), UpstreamError],
    ["cut", (_request, response) => {
      sse(response, [chunk({ content: "Hel" })], false);
      setTimeout(() => response.socket?.destroy(), 20);
    }, UpstreamError],
  ];
  for (const [name, handler, errorClass] of cases) {
    const failing = await upstream(handler);
    const good = await upstream((_request, response) => sse(response, helloStream));
    const { engine } = await engineOver([failing.url, good.url]);
    const generation = (await engine.prepare(request())).start(new AbortController().signal);
    const { parts, error } = await collect(generation.parts);
    assert.ok(error instanceof errorClass, `${name}: ${String(error)}`);
    assert.ok(!(error as Error).message.includes("10.1.2.3"), name);
    assert.equal(textOf(parts), "Hel", name);
    assert.equal(parts.filter((part) => part.type === "finish").length, 0, name);
    assert.equal(good.requests.length, 0, `${name}: no second upstream`);
    assert.deepEqual(generation.usage(), { source: "estimated", promptTokens: (await engine.prepare(request())).promptTokens, cachedPromptTokens: 0, completionTokens: 1 }, name);
    await engine.close();
  }
});

test("the idle timeout runs from the latest content, whether it is shorter or longer than the first-token timeout (one timer an attempt)", async () => {
  // Content every 60 ms for ~0.5 s: past a 0.4 s first-token timeout, never 0.3 s idle (five gaps' room on a loaded machine).
  const steady = await upstream((_request, response) => {
    response.writeHead(200, { "content-type": "text/event-stream" });
    let sent = 0;
    const next = () => {
      if (response.destroyed) return;
      if (sent === 8) {
        for (const event of helloStream.slice(3)) response.write(`data: ${typeof event === "string" ? event : JSON.stringify(event)}\n\n`);
        response.end();
        return;
      }
      response.write(`data: ${JSON.stringify(chunk({ content: "x" }))}\n\n`);
      sent++;
      setTimeout(next, 60);
    };
    next();
  });
  const first = await engineOver([steady.url], { entry: { first_token_timeout: 0.4, idle_timeout: 0.3, max_attempts: 1 } });
  const ok = await collect((await first.engine.prepare(request())).start(new AbortController().signal).parts);
  assert.equal(ok.error, undefined, String(ok.error));
  assert.equal(textOf(ok.parts), "xxxxxxxx");
  await first.engine.close();
  // One chunk, then silence: a 0.15 s idle timeout cuts it long before the 5 s first-token timeout would.
  const stalls = await upstream((_request, response) => sse(response, [chunk({ content: "Hel" })], false));
  const second = await engineOver([stalls.url], { entry: { first_token_timeout: 5, idle_timeout: 0.15, max_attempts: 1 } });
  const prepared = await second.engine.prepare(request());
  const startedAt = performance.now();
  const cut = await collect(prepared.start(new AbortController().signal).parts);
  assert.ok(cut.error instanceof UpstreamTimeoutError, String(cut.error));
  assert.ok(performance.now() - startedAt < 2_000, `cut after ${Math.round(performance.now() - startedAt)} ms`);
  await second.engine.close();
});

test("a buffered request (a non-streamed client) is retried even after a member failed mid-answer, showing only the whole reply", async () => {
  const failing = await upstream((_request, response) => {
    sse(response, [chunk({ content: "Hel" })], false);
    setTimeout(() => response.socket?.destroy(), 20);
  });
  const good = await upstream((_request, response) => sse(response, helloStream));
  const { engine, pool } = await engineOver([failing.url, good.url]);
  const generation = (await engine.prepare(request({ buffered: true }))).start(new AbortController().signal);
  const { parts, error } = await collect(generation.parts);
  assert.equal(error, undefined);
  assert.equal(textOf(parts), "Hello world", "the failed attempt's text is never shown");
  assert.equal(good.requests.length, 1);
  assert.deepEqual(
    pool.releases.map((release) => [release.member, release.outcome.kind]),
    [[failing.url, "connect"], [good.url, "ok"]],
  );
  assert.deepEqual(generation.usage(), { source: "upstream", promptTokens: 11, cachedPromptTokens: 0, completionTokens: 3 });
  await engine.close();
});

test("cancelling closes the upstream request at once and ends the choice cancelled with what was counted", async () => {
  const server = await upstream((_request, response) => sse(response, [chunk({ role: "assistant", content: "" }), chunk({ content: "One" }), chunk({ content: " two" })], false));
  const { engine, pool } = await engineOver([server.url]);
  const controller = new AbortController();
  const generation = (await engine.prepare(request())).start(controller.signal);
  const seen: StreamPart[] = [];
  for await (const part of generation.parts) {
    seen.push(part);
    if (part.type === "text-delta" && part.text === " two") controller.abort(new Error("client left"));
  }
  await server.closed;
  assert.equal(textOf(seen), "One two");
  const finish = seen.at(-1);
  assert.equal(finish?.type === "finish" && finish.reason, "cancelled");
  assert.equal(generation.usage().completionTokens, 2);
  assert.equal(generation.usage().source, "estimated");
  assert.deepEqual(pool.releases.map((release) => release.outcome.kind), ["neutral"]);
  await engine.close();
});

test("a consumer that stops reading early closes the upstream request and releases the member", async () => {
  const server = await upstream((_request, response) => sse(response, [chunk({ content: "a" }), chunk({ content: "b" })], false));
  const { engine, pool } = await engineOver([server.url]);
  for await (const part of (await engine.prepare(request())).start(new AbortController().signal).parts) {
    if (part.type === "text-delta") break;
  }
  await server.closed;
  assert.deepEqual(pool.releases.map((release) => release.outcome.kind), ["neutral"]);
  await engine.close();
});

test("an upstream's context overflow is a 400 context_length_exceeded, not retried", async () => {
  const server = await upstream((_request, response) => {
    response.writeHead(400, { "content-type": "application/json" });
    response.end(JSON.stringify({ object: "error", message: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.", type: "BadRequestError", param: null, code: 400 }));
  });
  const other = await upstream((_request, response) => sse(response, helloStream));
  const { engine, pool } = await engineOver([server.url, other.url]);
  const { error } = await collect((await engine.prepare(request())).start(new AbortController().signal).parts);
  assert.ok(error instanceof ContextLengthExceededError);
  assert.equal(other.requests.length, 0);
  assert.deepEqual(pool.releases.map((release) => release.outcome.kind), ["neutral"]);
  await engine.close();
});

test("an upstream refusing our key is a 503 for the client and a loud event for the operator, the key nowhere", async () => {
  const key = "sk-very-secret-upstream-key-123456";
  const server = await upstream((_request, response) => {
    response.writeHead(401, { "content-type": "application/json" });
    response.end(JSON.stringify({ error: { message: `Incorrect API key provided: ${key}` } }));
  });
  const events: string[] = [];
  const { engine } = await engineOver([server.url], { apiKey: key, events });
  const { error } = await collect((await engine.prepare(request())).start(new AbortController().signal).parts);
  assert.ok(error instanceof UpstreamUnavailableError);
  assert.ok(!(error as Error).message.includes(key));
  assert.ok(events.some((event) => event.startsWith("error: ") && event.includes("HTTP 401")), events.join("\n"));
  assert.ok(events.every((event) => !event.includes(key) && !event.includes("very-secret")), events.join("\n"));
  await engine.close();
});

test("admitted resolves once a member is lent; aborting before reading releases it", async () => {
  const server = await upstream((_request, response) => sse(response, helloStream));
  const { engine, pool } = await engineOver([server.url]);
  const controller = new AbortController();
  const generation = (await engine.prepare(request({ maxTokens: 16 }))).start(controller.signal);
  await generation.admitted;
  assert.equal(pool.acquired, 1);
  controller.abort(new Error("client left"));
  assert.deepEqual(pool.releases.map((release) => release.outcome.kind), ["neutral"]);
  assert.equal(server.requests.length, 0);
  assert.equal(generation.usage().promptTokens, 0, "nothing was sent: nothing to bill");
  // Read anyway (as a route may): the choice ends cancelled, the lease is not released twice.
  const { parts, error } = await collect(generation.parts);
  assert.equal(error, undefined);
  assert.deepEqual(parts.map((part) => part.type === "finish" && part.reason), ["cancelled"]);
  assert.equal(pool.releases.length, 1);
  await engine.close();
});

test("prepare bounds the prompt from above, leaves the rest of the context to the completion, and refuses what cannot fit", async () => {
  const server = await upstream((_request, response) => sse(response, helloStream));
  const { engine } = await engineOver([server.url], { contextLength: 8192 });
  const prepared = await engine.prepare(request());
  assert.ok(prepared.promptTokens >= "Say hello".length);
  assert.equal(prepared.promptTokens + prepared.maxTokens, 8192);
  assert.equal((await engine.prepare(request({ maxTokens: 50 }))).maxTokens, 50);
  await assert.rejects(engine.prepare(request({ messages: [{ role: "user", content: "word ".repeat(300_000) }] })), ContextLengthExceededError);
  await assert.rejects(engine.prepare(request({ maxTokens: 9000 })), ContextLengthExceededError);
  await engine.close();
});

test("without max_tokens the prompt is counted exactly by the upstream where it can (vLLM's /tokenize), leaving the rest of the context", async () => {
  const server = await upstream((request, response) => {
    response.writeHead(200, { "content-type": "application/json" });
    response.end(JSON.stringify(request.url === "/tokenize" ? { count: 7, max_model_len: 4096, tokens: [1, 2, 3, 4, 5, 6, 7] } : {}));
  });
  const { engine } = await engineOver([server.url]);
  const prepared = await engine.prepare(request());
  assert.equal(prepared.promptCount, "exact");
  assert.equal(prepared.promptTokens, 7);
  assert.equal(prepared.maxTokens, 4096 - 7);
  const counted = JSON.parse(server.requests[0]!.body) as { model: string; messages: unknown[] };
  assert.equal(counted.model, "test-model");
  assert.deepEqual(counted.messages, [{ role: "user", content: "Say hello" }]);
  // With max_tokens the bound is enough for the hold: no extra round trip.
  const bounded = await engine.prepare(request({ maxTokens: 16 }));
  assert.equal(bounded.promptCount, "upper-bound");
  assert.equal(server.requests.length, 1);
  await engine.close();
});

test("chargedPrompt is what prepare counts when the bound decides it (max_tokens given), and nothing where prepare may count exactly", async () => {
  const server = await upstream((request, response) => {
    response.writeHead(200, { "content-type": "application/json" });
    response.end(JSON.stringify(request.url === "/tokenize" ? { count: 7, max_model_len: 4096, tokens: [1, 2, 3, 4, 5, 6, 7] } : {}));
  });
  const { engine } = await engineOver([server.url], { contextLength: 4096 });
  for (const content of ["Say hello", "word ".repeat(400), "é".repeat(2000)]) {
    const asked = request({ maxTokens: 16, messages: [{ role: "user", content }] });
    const bound = engine.boundPrompt(asked);
    assert.equal(engine.chargedPrompt(asked, bound), (await engine.prepare(asked, bound)).promptTokens, content.slice(0, 12));
  }
  // Near the context, the upstream refuses longer prompts: what the bound says is cut to it.
  const long = request({ maxTokens: 16, messages: [{ role: "user", content: "é".repeat(3000) }] });
  const longBound = engine.boundPrompt(long);
  assert.ok(longBound.atMost > 4095);
  assert.equal(engine.chargedPrompt(long, longBound), 4095);
  assert.equal(engine.chargedPrompt(request(), engine.boundPrompt(request())), undefined, "without max_tokens prepare may count exactly");
  const ceiling = request({ maxTokens: 16, fitMaxTokens: true });
  assert.equal(engine.chargedPrompt(ceiling, engine.boundPrompt(ceiling)), undefined, "a ceiling may be counted exactly");
  await engine.close();
});

test("a max_tokens ceiling (fitMaxTokens) is lowered to what the exact count leaves, and kept where the bound leaves room for it", async () => {
  const server = await upstream((request, response) => {
    response.writeHead(200, { "content-type": "application/json" });
    response.end(JSON.stringify(request.url === "/tokenize" ? { count: 7, max_model_len: 4096, tokens: [1, 2, 3, 4, 5, 6, 7] } : {}));
  });
  const { engine } = await engineOver([server.url]);
  const lowered = await engine.prepare(request({ maxTokens: 32_000, fitMaxTokens: true }));
  assert.equal(lowered.promptCount, "exact", "counted: the bound may not leave room for the ceiling");
  assert.equal(lowered.maxTokens, 4096 - 7);
  const kept = await engine.prepare(request({ maxTokens: 16, fitMaxTokens: true }));
  assert.equal(kept.maxTokens, 16);
  assert.equal(server.requests.length, 1, "a ceiling the bound leaves room for needs no count");
  await assert.rejects(engine.prepare(request({ maxTokens: 32_000 })), ContextLengthExceededError, "a demand past the context is still refused");
  await engine.close();
});

test("prepare refuses what the kind would ignore, naming the parameter", async () => {
  const server = await upstream((_request, response) => sse(response, helloStream));
  const { engine } = await engineOver([server.url], { kind: "ollama" });
  await assert.rejects(engine.prepare(request({ choices: 2 })), (error: unknown) => error instanceof UnsupportedParameterError && error.param === "n");
  await assert.rejects(engine.prepare(request({ vendor: { top_k: 5 } })), (error: unknown) => error instanceof UnsupportedParameterError && error.param === "top_k");
  assert.deepEqual(engine.capabilities().vendorFields, ["reasoning_effort"]);
  await engine.close();
});

test("open learns the context length: vLLM's /v1/models, llama-server's /props; OpenAI needs it configured", async () => {
  const vllm = await upstream((request, response) => {
    response.writeHead(200, { "content-type": "application/json" });
    response.end(JSON.stringify(request.url === "/v1/models" ? { object: "list", data: [{ id: "test-model", max_model_len: 32768 }] } : {}));
  });
  const fromModels = await engineOver([vllm.url], { kind: "vllm", contextLength: undefined });
  assert.deepEqual(fromModels.engine.info(), { contextLength: 32768 });
  assert.equal(fromModels.engine.status().state, "ready");
  await fromModels.engine.close();

  const llama = await upstream((request, response) => {
    if (request.url !== "/props") {
      response.writeHead(404);
      response.end();
      return;
    }
    response.writeHead(200, { "content-type": "application/json" });
    response.end(JSON.stringify({ default_generation_settings: { n_ctx: 2048 }, total_slots: 2 }));
  });
  const fromProps = await engineOver([llama.url], { kind: "llama-server", contextLength: undefined });
  assert.deepEqual(fromProps.engine.info(), { contextLength: 2048 });
  await fromProps.engine.close();

  // A server whose /v1/models says no length (OpenAI's own): the entry must.
  const openai = await engineOver([llama.url], { kind: "openai", contextLength: undefined });
  assert.equal(openai.engine.status().state, "unavailable");
  assert.match((openai.engine.status() as { detail: string }).detail, /context_length/);
  await assert.rejects(openai.engine.prepare(request()), (error: unknown) => error instanceof ApiError && error.status === 503);
  await openai.engine.close();
});

test("capabilities follow the kind the pool detects after they were first read", async () => {
  const pool = new ListPool(["http://127.0.0.1:9/v1"], undefined);
  const engine = new OpenAiCompatibleEngine({ modelId: "m", upstream: upstreamSchema.parse({ urls: ["http://127.0.0.1:9/v1"] }), contextLength: 4096, pool });
  const unknown = engine.capabilities();
  assert.ok(!unknown.supportedParameters.includes("n"));
  assert.equal(engine.capabilities(), unknown, "kept while nothing it is made of changed");
  (pool as { kind: UpstreamKind | undefined }).kind = "vllm";
  const detected = engine.capabilities().supportedParameters;
  assert.ok(detected.includes("n") && detected.includes("custom_tool_grammar"), "the detected kind's parameters");
});

test("status follows the pool; an unknown kind offers only what every kind honours", async () => {
  const server = await upstream((_request, response) => sse(response, helloStream));
  const pool = new ListPool([server.url, "http://127.0.0.1:9/v1"], undefined);
  let state: "ready" | "degraded" | "unavailable" = "degraded";
  pool.state = () => state;
  pool.members = () => [
    { id: server.url, busy: 0, capacity: 4, waiting: 0, healthy: true },
    { id: "http://127.0.0.1:9/v1", busy: 0, capacity: 4, waiting: 0, healthy: false },
  ];
  const engine = new OpenAiCompatibleEngine({ modelId: "m", upstream: upstreamSchema.parse({ urls: [server.url] }), contextLength: 4096, pool, inputModalities: ["text", "image"] });
  assert.equal(engine.status().state, "loading");
  await engine.open();
  assert.deepEqual(engine.status(), { state: "degraded", detail: "1 of 2 upstream servers are healthy" });
  const capabilities = engine.capabilities();
  assert.ok(!capabilities.supportedParameters.includes("n"));
  assert.deepEqual(capabilities.vendorFields, []);
  assert.deepEqual(capabilities.inputModalities, ["text", "image"]);
  assert.equal(engine.members().length, 2);
  // Images are bounded generously: a prompt with one image may take 16384 tokens more.
  const withImage = request({ messages: [{ role: "user", content: "What is this?", images: [{ url: "data:image/png;base64,AAAA" }] }] });
  assert.equal(engine.boundPrompt(withImage).atMost - engine.boundPrompt(request({ messages: [{ role: "user", content: "What is this?" }] })).atMost, 16_384);
  state = "unavailable";
  assert.equal(engine.status().state, "unavailable");
  // The pool, not the status, refuses (a member past its cooldown takes a trial request): prepare goes on.
  assert.equal((await engine.prepare(request({ maxTokens: 4 }))).maxTokens, 4);
  await engine.close();
});

test("members started with priority scheduling get the ticket's tier as their priority field (vLLM: lower first; SGLang: higher first); others get none", async () => {
  const sentPriorities = async (kind: UpstreamKind, entry: Record<string, unknown>, tiers: Array<"priority" | "default" | "flex" | undefined>) => {
    const server = await upstream((request, response) => {
      if (request.url?.endsWith("/tokenize")) {
        response.writeHead(404).end();
        return;
      }
      sse(response, helloStream);
    });
    const { engine } = await engineOver([server.url], { kind, entry });
    for (const tier of tiers) {
      const prepared = await engine.prepare(request({ maxTokens: 4 }));
      const generation = prepared.start(new AbortController().signal, tier === undefined ? undefined : { account: "acct", weight: 1, tier });
      await collect(generation.parts);
    }
    await engine.close();
    return server.requests.filter((sent) => sent.path.endsWith("/chat/completions")).map((sent) => (JSON.parse(sent.body) as { priority?: number }).priority);
  };
  assert.deepEqual(await sentPriorities("vllm", { priority_scheduling: true }, ["priority", "default", "flex", undefined]), [-1, 0, 1, undefined]);
  assert.deepEqual(await sentPriorities("sglang", { priority_scheduling: true }, ["priority", "default", "flex"]), [1, 0, -1]);
  assert.deepEqual(await sentPriorities("vllm", {}, ["priority", "flex"]), [undefined, undefined], "not started with priority scheduling: vLLM would refuse the field");
  assert.deepEqual(await sentPriorities("llama-server", { priority_scheduling: true }, ["priority"]), [undefined], "llama-server has no priority field");
});
