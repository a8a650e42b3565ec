/**
 * The upstream engine's embeddings against tiny HTTP servers playing upstreams' `/v1/embeddings`:
 * float and base64 answers read to the same unit vectors in the inputs' order, the upstream's
 * usage billed (the bound when it reports none), the body sent (model, inputs, float), failover
 * from a failing or malformed member to the next, a 4xx refused at once, an over-long input
 * refused before anything is sent, token ids cut with `truncate`, the vector length learnt from
 * the first answer, and the client's abort reaching the upstream.
 */
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { upstreamSchema } from "./config-schema.ts";
import type { EngineMember } from "../engine.ts";
import { ApiError, ContextLengthExceededError, UpstreamError } from "../../protocol/errors.ts";
import type { AcquireOptions, MemberOutcome, PoolLease, UpstreamPool } from "./pool-types.ts";
import { OpenAiCompatibleEngine } from "./openai-compatible-engine.ts";

type Handler = (request: IncomingMessage, response: ServerResponse, body: string) => void;

const servers: Server[] = [];
after(() => {
  for (const server of servers) server.closeAllConnections();
  for (const server of servers) server.close();
});

/** An upstream on a free port, recording the bodies it got; `closed` resolves when a request's connection closes before its answer. */
async function upstream(handler: Handler): Promise<{ url: string; bodies: Array<Record<string, unknown>>; closed: Promise<void> }> {
  const bodies: Array<Record<string, unknown>> = [];
  let markClosed: () => void = () => {};
  const closed = new Promise<void>((resolve) => (markClosed = resolve));
  const server = createServer((request, response) => {
    let body = "";
    request.on("data", (piece: Buffer) => (body += piece.toString("utf8")));
    request.on("end", () => {
      bodies.push(JSON.parse(body) as Record<string, unknown>);
      response.on("close", () => {
        if (!response.writableFinished) markClosed();
      });
      handler(request, response, body);
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, bodies, closed };
}

/** Lends members in order, skipping those tried; records every release. */
class ListPool implements UpstreamPool {
  readonly kind = "llama-server" as const;
  readonly releases: { member: string; outcome: MemberOutcome }[] = [];
  readonly #urls: string[];
  constructor(urls: string[]) {
    this.#urls = urls;
  }
  async acquire(options: AcquireOptions): Promise<PoolLease> {
    if (options.signal.aborted) throw options.signal.reason;
    const url = this.#urls.find((candidate) => !options.exclude?.has(candidate)) ?? this.#urls[0]!;
    return { member: { id: url, url, baseUrl: url }, release: (outcome) => void this.releases.push({ member: url, outcome }) };
  }
  members(): EngineMember[] {
    return this.#urls.map((id) => ({ id, busy: 0, capacity: 4, waiting: 0, healthy: true }));
  }
  state(): "ready" {
    return "ready";
  }
  close(): void {}
}

async function engineOver(urls: string[], entry: Record<string, unknown> = {}) {
  const pool = new ListPool(urls);
  const engine = new OpenAiCompatibleEngine({
    modelId: "embedder",
    upstream: upstreamSchema.parse({ urls, kind: "llama-server", first_token_timeout: 0.5, connect_timeout: 1, max_attempts: 3, ...entry }),
    contextLength: 32,
    pool,
  });
  await engine.open();
  return { engine, pool };
}

/** Little-endian float32 bytes in base64, as OpenAI's `encoding_format: "base64"`. */
function base64Of(values: number[]): string {
  const bytes = Buffer.alloc(values.length * 4);
  values.forEach((value, index) => bytes.writeFloatLE(value, index * 4));
  return bytes.toString("base64");
}

function answer(response: ServerResponse, body: unknown, status = 200): void {
  response.writeHead(status, { "content-type": "application/json" });
  response.end(JSON.stringify(body));
}

const never = new AbortController().signal;

test("reads float and base64 answers to unit vectors in the inputs' order, with the upstream's usage", async () => {
  const member = await upstream((_request, response, body) => {
    const sent = JSON.parse(body) as { input: string[] };
    // Out of order, one as base64, neither normalised.
    answer(response, {
      object: "list",
      data: [
        { object: "embedding", index: 1, embedding: base64Of([0, 3, 4]) },
        { object: "embedding", index: 0, embedding: [2, 0, 0] },
      ],
      usage: { prompt_tokens: sent.input.length * 5, total_tokens: sent.input.length * 5 },
    });
  });
  const { engine, pool } = await engineOver([member.url]);
  assert.equal(engine.capabilities().embeddingDimensions, undefined, "not known before an answer");
  const prepared = await engine.prepareEmbeddings({ inputs: [{ text: "first" }, { text: "second" }], truncate: false, user: "someone" });
  assert.equal(prepared.promptCount, "upper-bound");
  assert.ok(prepared.promptTokens >= "first".length + "second".length);
  const result = await prepared.run(never);
  assert.deepEqual(result.vectors.map((vector) => Array.from(vector)), [[1, 0, 0], [0, Math.fround(0.6), Math.fround(0.8)]]);
  assert.deepEqual(result.usage, { promptTokens: 10, source: "upstream" });
  assert.deepEqual(member.bodies[0], { model: "embedder", input: ["first", "second"], encoding_format: "float", user: "someone" });
  assert.equal(pool.releases[0]!.outcome.kind, "ok");
  assert.equal(engine.capabilities().embeddingDimensions, 3, "learnt from the first answer");
});

test("bills the bound when the upstream reports no usage", async () => {
  const member = await upstream((_request, response) => answer(response, { data: [{ index: 0, embedding: [1, 0] }] }));
  const { engine } = await engineOver([member.url]);
  const prepared = await engine.prepareEmbeddings({ inputs: [{ text: "hello" }], truncate: false });
  const result = await prepared.run(never);
  assert.deepEqual(result.usage, { promptTokens: prepared.promptTokens, source: "estimated" });
});

test("fails over from a member answering 500, and from one answering malformed vectors, to the next", async () => {
  const failing = await upstream((_request, response) => answer(response, { error: { message: "boom" } }, 500));
  const malformed = await upstream((_request, response) => answer(response, { data: [{ index: 0, embedding: ["x"] }] }));
  const good = await upstream((_request, response) => answer(response, { data: [{ index: 0, embedding: [0, 1] }], usage: { prompt_tokens: 3 } }));
  const { engine, pool } = await engineOver([failing.url, malformed.url, good.url]);
  const result = await (await engine.prepareEmbeddings({ inputs: [{ tokens: [1, 2, 3] }], truncate: false })).run(never);
  assert.deepEqual(Array.from(result.vectors[0]!), [0, 1]);
  assert.deepEqual(pool.releases.map((release) => release.outcome.kind), ["status", "protocol", "ok"]);
  assert.deepEqual(good.bodies[0]!.input, [[1, 2, 3]]);
});

test("gives the last failure when every member failed", async () => {
  const failing = await upstream((_request, response) => answer(response, { error: { message: "boom" } }, 503));
  const { engine } = await engineOver([failing.url], { max_attempts: 2 });
  const prepared = await engine.prepareEmbeddings({ inputs: [{ text: "x" }], truncate: false });
  await assert.rejects(prepared.run(never), (error: unknown) => error instanceof UpstreamError && error.status === 502);
});

test("refuses at once what the upstream refuses as the request's fault, trying no other member", async () => {
  const refusing = await upstream((_request, response) => answer(response, { error: { message: "bad input", type: "invalid_request_error" } }, 400));
  const spare = await upstream((_request, response) => answer(response, { data: [{ index: 0, embedding: [1] }] }));
  const { engine } = await engineOver([refusing.url, spare.url]);
  const prepared = await engine.prepareEmbeddings({ inputs: [{ text: "x" }], truncate: false });
  await assert.rejects(prepared.run(never), (error: unknown) => error instanceof ApiError && error.status === 400);
  assert.equal(spare.bodies.length, 0);
});

test("refuses an input that cannot fit the context before sending anything, and cuts token ids with truncate", async () => {
  const member = await upstream((_request, response, body) => {
    const sent = JSON.parse(body) as { input: number[][] };
    answer(response, { data: sent.input.map((_, index) => ({ index, embedding: [1, 1] })), usage: { prompt_tokens: sent.input.flat().length } });
  });
  const { engine } = await engineOver([member.url]);
  const long = Array.from({ length: 40 }, (_, index) => index);
  await assert.rejects(engine.prepareEmbeddings({ inputs: [{ tokens: [1] }, { tokens: long }], truncate: false }), (error: unknown) => {
    assert.ok(error instanceof ContextLengthExceededError);
    assert.match(error.message, /'input\[1\]' has at least 40 tokens/);
    return true;
  });
  await assert.rejects(engine.prepareEmbeddings({ inputs: [{ text: "x".repeat(128 * 33) }], truncate: false }), ContextLengthExceededError);
  assert.equal(member.bodies.length, 0, "nothing was sent");
  const prepared = await engine.prepareEmbeddings({ inputs: [{ tokens: long }], truncate: true });
  assert.ok(prepared.promptTokens <= 32);
  const result = await prepared.run(never);
  assert.equal((member.bodies[0]!.input as number[][])[0]!.length, 32);
  assert.equal(result.usage.promptTokens, 32);
});

test("aborts the upstream request when the client leaves", async () => {
  const member = await upstream(() => {
    // Never answers.
  });
  const { engine, pool } = await engineOver([member.url], { first_token_timeout: 30 });
  const prepared = await engine.prepareEmbeddings({ inputs: [{ text: "x" }], truncate: false });
  const controller = new AbortController();
  const running = prepared.run(controller.signal);
  while (member.bodies.length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
  controller.abort(new Error("client left"));
  await assert.rejects(running, /client left/);
  await member.closed;
  assert.equal(pool.releases[0]!.outcome.kind, "neutral");
});
