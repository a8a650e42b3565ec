/**
 * The chat request's lifecycle (`run.ts`, over the shared `http/generation/run.ts`) and the part → chunk assembly (`protocol/chat-completions/from-generation.ts`), driven by
 * the scripted fake engine with the real admission, metering and limits on SQLite: what the
 * client receives, what is billed and with which status, for every way a request can end.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createAccount } from "../../../accounts/accounts.ts";
import { createApiKey, type ApiKeyRecord } from "../../../auth/api-keys.ts";
import { grantCredit } from "../../../billing/ledger.ts";
import { Metering } from "../../../billing/metering.ts";
import { Catalog, type CatalogModel } from "../../../catalog/catalog.ts";
import { FakeEngine, FakeGate, fakePromptTokens, type ChoiceScript } from "../../../engines/fake/fake-engine.ts";
import { MemoryRateLimiter } from "../../../limits/memory.ts";
import { RequestLimits } from "../../../limits/request-limits.ts";
import type { RateLimiter } from "../../../limits/rate-limiter.ts";
import { Metrics } from "../../../metrics/metrics.ts";
import { InternalServerError, ShuttingDownError, UpstreamError } from "../../../protocol/errors.ts";
import type { RoomState } from "../../sse.ts";
import { JsonText } from "../../../protocol/json-text.ts";
import { openTestDatabase, type TestDatabase } from "../../../../test/helpers/databases.ts";
import { refusal } from "../../../../test/helpers/api-error.ts";
import { admitChatCompletion } from "./admit.ts";
import { runCompletion, runStream, type ChunkSink, type RunDependencies, type RunLogger } from "./run.ts";

/** A payload as its client reads it (a chunk written out already is parsed back). */
const asRead = (payload: unknown): unknown => (payload instanceof JsonText ? JSON.parse(payload.json) : payload);

/** A sink that keeps what a client would read; `stallAfter` chunks it stops reading. */
class MemorySink implements ChunkSink {
  readonly events: unknown[] = [];
  ending: "done" | "end" | "destroy" | undefined;
  readonly #stallAfter: number;
  constructor(stallAfter = Number.POSITIVE_INFINITY) {
    this.#stallAfter = stallAfter;
  }
  data(payload: unknown): void {
    this.events.push(asRead(payload));
  }
  event(_name: string, payload: unknown): void {
    this.events.push(asRead(payload));
  }
  many(events: ReadonlyArray<readonly [string | undefined, unknown]>): void {
    for (const [, payload] of events) this.events.push(asRead(payload));
  }
  readonly comments: string[] = [];
  comment(text: string): void {
    this.comments.push(text);
  }
  done(): void {
    this.ending = "done";
  }
  end(): void {
    this.ending = "end";
  }
  destroy(): void {
    this.ending = "destroy";
  }
  get congested(): boolean {
    return this.events.length >= this.#stallAfter;
  }
  get buffered(): number {
    return this.events.length;
  }
  async waitForRoom(): Promise<RoomState> {
    return "stalled";
  }
  keepAlive(): () => void {
    return () => {};
  }
  /** The chunks (objects with `choices`). */
  get chunks(): Array<{ choices: Array<{ index: number; delta: Record<string, unknown>; finish_reason: string | null }>; usage?: unknown }> {
    return this.events.filter((event): event is never => typeof event === "object" && event !== null && "choices" in event);
  }
}

const quietLogger: RunLogger & { errors: unknown[] } = { errors: [], info() {}, warn() {}, error(fields) { quietLogger.errors.push(fields); } };

// 1 credit per prompt token, 2 per completion token.
const PRICING = { prompt: 1_000_000, cachedPrompt: 500_000, completion: 2_000_000 };

function model(id: string, engine: FakeEngine): CatalogModel {
  return {
    id,
    ownedBy: "test",
    created: 0,
    engine,
    configuredContextLength: 2048,
    pricing: PRICING,
    outputModalities: ["text"],
  };
}

describe("runCompletion and runStream", () => {
  let store: TestDatabase;
  let scripts: ChoiceScript[] = [];
  const engine = new FakeEngine({ script: () => scripts, capacity: 1, queueSize: 0 });
  let admitDependencies: Parameters<typeof admitChatCompletion>[0];
  const dependencies: RunDependencies = { metrics: new Metrics({ rateLimiterDegraded: () => false }), logger: quietLogger, keepAliveIntervalMs: 60_000, stallTimeoutMs: 10 };

  before(async () => {
    store = await openTestDatabase("sqlite");
    admitDependencies = {
      catalog: new Catalog([model("fake", engine)]),
      // Standing leases off: these tests pin what becomes of each request's own hold.
      metering: new Metering({ database: store.database, nodeId: () => "node-test", holdTtlMs: 60_000, leases: { standingIdleMs: 0 } }),
      limits: new RequestLimits(new MemoryRateLimiter()),
    };
  });
  after(async () => {
    await store?.close();
  });

  async function funded(): Promise<ApiKeyRecord> {
    const account = await createAccount(store.database, { email: `run-${Math.random().toString(36).slice(2)}@example.com` });
    await grantCredit(store.database, { accountId: account.id, amount: 1_000_000, source: `test:${account.id}` });
    return createApiKey(store.database, { name: "run", accountId: account.id });
  }

  /** Admits a request and gives what `run*` needs, with a cut the test controls. */
  async function admitted(key: ApiKeyRecord, body: Record<string, unknown>) {
    const requestId = `req_${Math.random().toString(36).slice(2)}`;
    const admission = await admitChatCompletion(admitDependencies, { key, requestId, body: { model: "fake", messages: [{ role: "user", content: "Tell me" }], max_tokens: 50, ...body } });
    return { ...admission, cut: new AbortController(), keyId: key.id, startedAt: performance.now(), requestId };
  }

  // A request's hold is settled, and its usage recorded, in the group commit after its answer: the books are read after it.
  async function recordOf(requestId: string) {
    await admitDependencies.metering.leases.flush();
    return store.database.selectFrom("usage_records").selectAll().where("request_id", "=", requestId).executeTakeFirstOrThrow();
  }
  async function holdsOf(key: ApiKeyRecord) {
    await admitDependencies.metering.leases.flush();
    return store.database.selectFrom("holds").select("amount").where("key_id", "=", key.id).where("status", "=", "active").execute();
  }
  const promptTokens = fakePromptTokens({ messages: [{ role: "user", content: "Tell me" }] } as never);

  it("answers a whole completion, assembling text, reasoning and tool calls per choice, and bills it exactly once", async () => {
    scripts = [
      { steps: [{ reasoning: "Thinking" }, { text: "Hello" }, { text: " world" }] },
      { steps: [{ toolCall: { id: "call_1", name: "lookup", arguments: ['{"q":', '"x"}'] } }], finish: "tool_calls" },
    ];
    const key = await funded();
    const input = await admitted(key, { n: 2 });
    const completion = await runCompletion(dependencies, input);
    assert.equal(completion.choices.length, 2);
    assert.deepEqual(completion.choices[0]!.message, { role: "assistant", content: "Hello world", refusal: null, reasoning_content: "Thinking" });
    assert.equal(completion.choices[0]!.finish_reason, "stop");
    assert.equal(completion.choices[1]!.message.content, null);
    assert.deepEqual(completion.choices[1]!.message.tool_calls, [{ id: "call_1", type: "function", function: { name: "lookup", arguments: '{"q":"x"}' } }]);
    assert.equal(completion.choices[1]!.finish_reason, "tool_calls");
    // Three tokens in choice 0 (one of them reasoning), two in choice 1.
    assert.deepEqual(completion.usage, {
      prompt_tokens: promptTokens,
      completion_tokens: 5,
      total_tokens: promptTokens + 5,
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 1 },
    });
    const record = await recordOf(input.requestId);
    assert.equal(record.status, 200);
    assert.equal(Number(record.cost), promptTokens + 2 * 5);
    assert.equal(record.usage_source, "counted");
    assert.equal(Number(record.reasoning_tokens), 1);
    assert.deepEqual(await holdsOf(key), [], "the hold was settled");
  });

  it("answers without waiting for the rate-limit refund, which still reaches the limiter", async () => {
    // A limiter whose refunds are answered only when the test says (a slow Redis): the answer must not wait for them.
    const memory = new MemoryRateLimiter();
    let answerRefunds!: () => void;
    const refundsAnswered = new Promise<void>((resolve) => (answerRefunds = resolve));
    const refunded: number[] = [];
    const order: string[] = [];
    const limiter: RateLimiter = {
      degraded: false,
      consume: (checks) => memory.consume(checks),
      refund: async (key, amount) => {
        await memory.refund(key, amount);
        refunded.push(amount);
        await refundsAnswered;
      },
      close: () => memory.close(),
    };
    scripts = [{ steps: [{ text: "Hello" }] }];
    const account = await createAccount(store.database, { email: `refund-${Math.random().toString(36).slice(2)}@example.com` });
    await grantCredit(store.database, { accountId: account.id, amount: 1_000_000, source: `test:${account.id}` });
    const key = await createApiKey(store.database, { name: "limited", accountId: account.id, tpm: 100_000 });
    const admission = await admitChatCompletion({ ...admitDependencies, limits: new RequestLimits(limiter) }, { key, requestId: "req_refund", body: { model: "fake", messages: [{ role: "user", content: "Tell me" }], max_tokens: 50 } });
    // Were the answer to wait for the refund, the refund's answer would come first (after 5 s).
    const late = setTimeout(() => {
      order.push("refund answered");
      answerRefunds();
    }, 5_000);
    const completion = await runCompletion(dependencies, { ...admission, cut: new AbortController(), keyId: key.id, startedAt: performance.now() });
    order.push("answered");
    clearTimeout(late);
    answerRefunds();
    assert.equal(completion.choices[0]!.message.content, "Hello");
    assert.deepEqual(order, ["answered"]);
    // The 49 tokens of max_tokens it did not use went back to the key's tokens-per-minute bucket
    // (after the part of a guess at the prompt above its count, when the engine had counted others).
    assert.equal(refunded.at(-1), 49);
    assert.ok(refunded.length <= 2, `at most the guess's rest, then the unused tokens: ${refunded.join(", ")}`);
  });

  it("streams a role chunk per choice first, deltas naming their choice, a finish chunk per choice, usage last and [DONE]", async () => {
    scripts = [
      { steps: [{ text: "A" }, { text: "B" }] },
      { steps: [{ toolCall: { id: "call_2", name: "lookup", arguments: ["{}"] } }], finish: "tool_calls" },
    ];
    const key = await funded();
    const input = await admitted(key, { n: 2, stream: true, stream_options: { include_usage: true } });
    const sink = new MemorySink();
    await runStream(dependencies, input, () => sink);
    assert.equal(sink.ending, "done");
    const chunks = sink.chunks;
    assert.deepEqual(chunks.slice(0, 2).map((chunk) => [chunk.choices[0]!.index, chunk.choices[0]!.delta.role]), [[0, "assistant"], [1, "assistant"]]);
    const text = chunks.filter((chunk) => chunk.choices[0]?.index === 0 && typeof chunk.choices[0].delta.content === "string").map((chunk) => chunk.choices[0]!.delta.content).join("");
    assert.equal(text, "AB");
    const toolDeltas = chunks.flatMap((chunk) => (chunk.choices[0]?.index === 1 ? ((chunk.choices[0].delta.tool_calls as unknown[] | undefined) ?? []) : []));
    assert.deepEqual(toolDeltas, [
      { index: 0, id: "call_2", type: "function", function: { name: "lookup", arguments: "" } },
      { index: 0, function: { arguments: "{}" } },
    ]);
    assert.deepEqual(chunks.filter((chunk) => chunk.choices[0]?.finish_reason != null).map((chunk) => [chunk.choices[0]!.index, chunk.choices[0]!.finish_reason]), [[0, "stop"], [1, "tool_calls"]]);
    const last = chunks.at(-1)!;
    assert.deepEqual(last.choices, []);
    assert.equal((last.usage as { completion_tokens: number }).completion_tokens, 3);
    assert.ok(chunks.slice(0, -1).every((chunk) => chunk.usage === null), "every other chunk carries usage: null");
    assert.equal((await recordOf(input.requestId)).status, 200);
  });

  it("carries log probabilities per token, streamed in each delta's chunk and whole in the completion", async () => {
    const token = (text: string, logprob: number) => ({
      token: text,
      logprob,
      bytes: [...Buffer.from(text)],
      topLogprobs: [{ token: text, logprob, bytes: [...Buffer.from(text)] }, { token: "x", logprob: -9, bytes: [120] }],
    });
    scripts = [{ steps: [{ text: "Hi", logprobs: [token("Hi", -0.5)] }, { text: " you", logprobs: [token(" you", -1.25)] }] }];
    const key = await funded();
    const completion = await runCompletion(dependencies, await admitted(key, { logprobs: true, top_logprobs: 2 }));
    const content = completion.choices[0]!.logprobs!.content!;
    assert.deepEqual(content.map((entry) => [entry.token, entry.logprob, entry.top_logprobs.length]), [["Hi", -0.5, 2], [" you", -1.25, 2]]);
    assert.deepEqual(content[1]!.bytes, [...Buffer.from(" you")]);

    const sink = new MemorySink();
    await runStream(dependencies, await admitted(key, { logprobs: true, top_logprobs: 2, stream: true }), () => sink);
    const streamed = sink.chunks.filter((chunk) => typeof chunk.choices[0]?.delta.content === "string" && chunk.choices[0].delta.content !== "");
    assert.deepEqual(
      streamed.map((chunk) => (chunk.choices[0] as unknown as { logprobs: { content: Array<{ token: string }> } }).logprobs.content.map((entry) => entry.token)),
      [["Hi"], [" you"]],
    );
    const roleChunk = sink.chunks[0]!.choices[0] as unknown as { logprobs: unknown };
    assert.equal(roleChunk.logprobs, null, "the role chunk carries none");
  });

  it("bills a stream its client left mid-way for what was generated, records 499 and stops the engine", async () => {
    const gate = new FakeGate();
    scripts = [{ steps: [{ text: "one" }, { text: "two" }, { gate }, { text: "never" }] }];
    const key = await funded();
    const input = await admitted(key, { stream: true });
    const sink = new MemorySink();
    const running = runStream(dependencies, input, () => sink);
    // Two tokens out, then the client goes.
    while (sink.chunks.length < 3) await new Promise((resolve) => setImmediate(resolve));
    input.cut.abort(new Error("client disconnected"));
    await running;
    assert.ok(engine.signals.at(-1)!.aborted, "the engine saw the cut");
    const record = await recordOf(input.requestId);
    assert.equal(record.status, 499);
    assert.equal(Number(record.completion_tokens), 2);
    assert.equal(Number(record.cost), promptTokens + 2 * 2);
    assert.equal(record.finish_reason, "cancelled");
    assert.deepEqual(await holdsOf(key), []);
  });

  it("ends a stream cut by a shutdown with the shutdown error, records 503 and bills what was generated", async () => {
    const gate = new FakeGate();
    scripts = [{ steps: [{ text: "one" }, { gate }] }];
    const key = await funded();
    const input = await admitted(key, { stream: true });
    const sink = new MemorySink();
    const running = runStream(dependencies, input, () => sink);
    while (sink.chunks.length < 2) await new Promise((resolve) => setImmediate(resolve));
    input.cut.abort(new ShuttingDownError());
    await running;
    assert.equal(sink.ending, "end");
    assert.deepEqual((sink.events.at(-1) as { error: { code: string } }).error.code, "shutting_down");
    const record = await recordOf(input.requestId);
    assert.equal(record.status, 503);
    assert.equal(Number(record.completion_tokens), 1);
  });

  it("ends a stream that fails after content with an error event, never [DONE], and bills what the engine counted", async () => {
    scripts = [{ steps: [{ text: "partial" }, { fail: new UpstreamError() }] }];
    const key = await funded();
    const input = await admitted(key, { stream: true });
    const sink = new MemorySink();
    await runStream(dependencies, input, () => sink);
    assert.equal(sink.ending, "end");
    assert.equal((sink.events.at(-1) as { error: { code: string } }).error.code, "upstream_error");
    const record = await recordOf(input.requestId);
    assert.equal(record.status, 502);
    assert.equal(Number(record.completion_tokens), 1);
    assert.equal(Number(record.cost), promptTokens + 2);
  });

  it("throws a non-streamed failure before any token and charges nothing", async () => {
    scripts = [{ steps: [{ fail: new InternalServerError() }] }];
    const key = await funded();
    const input = await admitted(key, {});
    const error = await refusal(runCompletion(dependencies, input));
    assert.equal(error.status, 500);
    const record = await recordOf(input.requestId);
    assert.equal(record.status, 500);
    assert.equal(Number(record.cost), 0);
    assert.deepEqual(await holdsOf(key), []);
  });

  it("cuts a stream whose client stopped reading after the stall timeout and bills what was generated", async () => {
    scripts = [{ steps: [{ text: "a" }, { text: "b" }, { text: "c" }, { text: "d" }] }];
    const key = await funded();
    const input = await admitted(key, { stream: true });
    // Congested from the second chunk on (the role chunk and one delta were read).
    const sink = new MemorySink(2);
    await runStream(dependencies, input, () => sink);
    assert.equal(sink.ending, "destroy");
    const record = await recordOf(input.requestId);
    assert.equal(record.status, 499);
    assert.ok(Number(record.completion_tokens) >= 1 && Number(record.completion_tokens) < 4, `generation stopped early (${record.completion_tokens})`);
  });

  it("drops a detached stream's client that stopped reading, and generates on to the end, billed whole", async () => {
    scripts = [{ steps: [{ text: "a" }, { text: "b" }, { text: "c" }, { text: "d" }] }];
    const key = await funded();
    const input = await admitted(key, { stream: true });
    const sink = new MemorySink(2);
    await runStream(dependencies, { ...input, detached: true }, () => sink);
    assert.equal(sink.ending, "destroy", "the client was dropped");
    assert.equal(sink.events.length, 2, "nothing was written after it was dropped");
    const record = await recordOf(input.requestId);
    assert.equal(record.status, 200, "the generation was not cut");
    assert.equal(Number(record.completion_tokens), 4, "every token generated and billed");
  });

  it("releases the hold uncharged when the engine's queue refuses the request before it starts", async () => {
    const gate = new FakeGate();
    scripts = [{ steps: [{ text: "x" }, { gate }] }];
    const key = await funded();
    // Capacity 1, no queue: the first holds the slot, the second is refused at start.
    const first = await admitted(key, { stream: true });
    const firstSink = new MemorySink();
    const running = runStream(dependencies, first, () => firstSink);
    while (firstSink.chunks.length < 2) await new Promise((resolve) => setImmediate(resolve));
    const second = await admitted(key, {});
    const error = await refusal(runCompletion(dependencies, second));
    assert.equal(error.status, 503);
    assert.equal(error.code, "engine_overloaded");
    const record = await recordOf(second.requestId);
    assert.equal(record.status, 503);
    assert.equal(Number(record.cost), 0);
    // A stream refused the same way throws before its sink is opened: it can still be answered as a plain 503.
    const third = await admitted(key, { stream: true });
    let opened = false;
    const streamRefusal = await refusal(runStream(dependencies, third, () => ((opened = true), new MemorySink())));
    assert.equal(streamRefusal.code, "engine_overloaded");
    assert.equal(opened, false, "no stream was begun");
    gate.release();
    await running;
    assert.deepEqual(await holdsOf(key), []);
  });
});
