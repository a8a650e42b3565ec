/**
 * The upstream pool's routing (least in flight, round-robin ties, prefix affinity with its slack,
 * exclude), its bounded FIFO queue, and its answers when members are down, without a network:
 * no probes run here (see health.test.ts for those).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ApiError, EngineOverloadedError, ShuttingDownError, UpstreamUnavailableError } from "../../protocol/errors.ts";
import { affinitySlack, createUpstreamPool, poolOptionsFromEntry, type UpstreamPoolOptions } from "./pool.ts";
import type { MemberOutcome, PoolLease } from "./pool-types.ts";

const A = "http://a:8000/v1";
const B = "http://b:8000/v1";
const never = () => new AbortController().signal;

function clock() {
  let now = 1_000_000;
  return { now: () => now, advance: (ms: number) => (now += ms) };
}

function pool(options: Partial<UpstreamPoolOptions> = {}) {
  const time = clock();
  const created = createUpstreamPool({ urls: ["http://a:8000", "http://b:8000"], maxInFlight: 8, ...options, health: { now: time.now, ...options.health } });
  return { pool: created, time };
}

async function acquireOn(target: ReturnType<typeof createUpstreamPool>, id: string, count: number): Promise<PoolLease[]> {
  const others = new Set(target.members().map((member) => member.id).filter((other) => other !== id));
  const leases: PoolLease[] = [];
  for (let index = 0; index < count; index++) leases.push(await target.acquire({ exclude: others, signal: never() }));
  assert.ok(leases.every((lease) => lease.member.id === id));
  return leases;
}

async function isSettled(promise: Promise<unknown>): Promise<boolean> {
  let settled = false;
  promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  await new Promise((resolve) => setImmediate(resolve));
  return settled;
}

describe("upstream pool routing", () => {
  it("sends each request to the member with the fewest in flight, ties in turn", async () => {
    const { pool: upstreams } = pool();
    const first = await upstreams.acquire({ signal: never() });
    const second = await upstreams.acquire({ signal: never() });
    assert.notEqual(first.member.id, second.member.id);
    first.release({ kind: "ok" });
    const third = await upstreams.acquire({ signal: never() });
    assert.equal(third.member.id, first.member.id, "the idle one");
    assert.deepEqual(
      upstreams.members().map((member) => [member.id, member.busy, member.capacity]),
      [[A, 1, 8], [B, 1, 8]],
    );
  });

  it("prefers the member that served the affinity while it is at most the slack busier", async () => {
    assert.equal(affinitySlack(8), 2);
    assert.equal(affinitySlack(64), 16);
    const { pool: upstreams } = pool();
    const first = await upstreams.acquire({ affinity: "system-prompt", signal: never() });
    const home = first.member.id;
    const away = home === A ? B : A;
    await acquireOn(upstreams, home, 1); // home: 2 in flight, away: 0
    const sticky = await upstreams.acquire({ affinity: "system-prompt", signal: never() });
    assert.equal(sticky.member.id, home, "2 more than the least busy: still preferred");
    const moved = await upstreams.acquire({ affinity: "system-prompt", signal: never() });
    assert.equal(moved.member.id, away, "3 more: too busy, the least busy one takes it");
    const follows = await upstreams.acquire({ affinity: "system-prompt", signal: never() });
    assert.equal(follows.member.id, away, "the affinity follows the member that served it last");
  });

  it("takes members already tried only when no other has room", async () => {
    const { pool: upstreams } = pool({ maxInFlight: 1 });
    const lease = await upstreams.acquire({ exclude: new Set([A]), signal: never() });
    assert.equal(lease.member.id, B);
    const fallback = await upstreams.acquire({ exclude: new Set([A]), signal: never() });
    assert.equal(fallback.member.id, A, "B is full: A rather than waiting");
  });

  it("reports each outcome once, however often a lease is released", async () => {
    const seen: Array<[string, MemberOutcome]> = [];
    const { pool: upstreams } = pool({ onOutcome: (member, outcome) => seen.push([member.id, outcome]) });
    const lease = await upstreams.acquire({ signal: never() });
    lease.release({ kind: "ok", timeToFirstTokenMs: 12 });
    lease.release({ kind: "timeout" });
    assert.deepEqual(seen, [[lease.member.id, { kind: "ok", timeToFirstTokenMs: 12 }]]);
    assert.equal(upstreams.members().reduce((sum, member) => sum + member.busy, 0), 0);
    assert.equal(upstreams.stats().find((stats) => stats.id === lease.member.id)?.lastTimeToFirstTokenMs, 12);
  });

  it("takes its options from an upstream model entry", () => {
    const options = poolOptionsFromEntry({ urls: [A], kind: "vllm", max_in_flight: 16, connect_timeout: 5, first_token_timeout: 60, idle_timeout: 60, max_attempts: 3, health_interval: 5, priority_scheduling: false }, "key");
    assert.deepEqual(options, { urls: [A], kind: "vllm", maxInFlight: 16, apiKey: "key", healthIntervalMs: 5000 });
  });
});

describe("upstream pool queue", () => {
  it("queues when every member is full, hands a released slot to the oldest waiter, refuses beyond the queue", async () => {
    const { pool: upstreams } = pool({ urls: [A], maxInFlight: 1, queueSize: 2 });
    const running = await upstreams.acquire({ signal: never() });
    const first = upstreams.acquire({ signal: never() });
    const second = upstreams.acquire({ signal: never() });
    assert.equal(upstreams.members()[0]!.waiting, 2);
    // Thrown at once, not a rejected promise: the engine's start refuses before anything is sent.
    assert.throws(() => upstreams.acquire({ signal: never() }), (error: unknown) => error instanceof EngineOverloadedError && error.headers["retry-after"] === "1");
    assert.equal(await isSettled(first), false);
    running.release({ kind: "ok" });
    const served = await first;
    assert.equal(served.member.id, A);
    assert.equal(await isSettled(second), false);
    served.release({ kind: "neutral" });
    await second;
    assert.equal(upstreams.members()[0]!.waiting, 0);
  });

  it("drops a waiter whose signal aborts, with the signal's reason", async () => {
    const { pool: upstreams } = pool({ urls: [A], maxInFlight: 1 });
    const running = await upstreams.acquire({ signal: never() });
    const controller = new AbortController();
    const waiting = upstreams.acquire({ signal: controller.signal });
    controller.abort(new Error("client left"));
    await assert.rejects(waiting, /client left/);
    assert.equal(upstreams.members()[0]!.waiting, 0);
    running.release({ kind: "ok" });
    await assert.rejects(upstreams.acquire({ signal: AbortSignal.abort(new Error("already gone")) }), /already gone/);
  });

  it("rejects the waiters when the members they wait for go down", async () => {
    const { pool: upstreams } = pool({ urls: [A], maxInFlight: 1, health: { failureThreshold: 1 } });
    const running = await upstreams.acquire({ signal: never() });
    const waiting = upstreams.acquire({ signal: never() });
    running.release({ kind: "connect" });
    await assert.rejects(waiting, UpstreamUnavailableError);
  });

  it("refuses waiters and new requests once closed", async () => {
    const { pool: upstreams } = pool({ urls: [A], maxInFlight: 1 });
    await upstreams.acquire({ signal: never() });
    const waiting = upstreams.acquire({ signal: never() });
    upstreams.close();
    await assert.rejects(waiting, ShuttingDownError);
    await assert.rejects(upstreams.acquire({ signal: never() }), ShuttingDownError);
  });
});

describe("upstream pool health", () => {
  it("routes around a member that went down and says the pool is degraded", async () => {
    const changes: Array<[string, boolean]> = [];
    const { pool: upstreams } = pool({ health: { failureThreshold: 1 }, onHealthChange: (member, healthy) => changes.push([member.id, healthy]) });
    assert.equal(upstreams.state(), "ready");
    const failing = await acquireOn(upstreams, A, 1);
    failing[0]!.release({ kind: "status", status: 502 });
    assert.equal(upstreams.state(), "degraded");
    assert.deepEqual(changes, [[A, false]]);
    for (let index = 0; index < 3; index++) assert.equal((await upstreams.acquire({ signal: never() })).member.id, B);
    assert.deepEqual(upstreams.members().map((member) => member.healthy), [false, true]);
  });

  it("answers 503 upstream_unavailable with the cooldown as retry-after when no member serves", async () => {
    const { pool: upstreams } = pool({ urls: [A], health: { failureThreshold: 5 } });
    const lease = await upstreams.acquire({ signal: never() });
    lease.release({ kind: "status", status: 429, retryAfterMs: 4500 });
    assert.equal(upstreams.state(), "unavailable");
    await assert.rejects(upstreams.acquire({ signal: never() }), (error: unknown) => {
      assert.ok(error instanceof UpstreamUnavailableError);
      assert.equal((error as ApiError).headers["retry-after"], "5");
      return true;
    });
  });

  it("sends one trial request to a member whose cooldown is over, and takes it back when it succeeds", async () => {
    const { pool: upstreams, time } = pool({ urls: [A], maxInFlight: 4, health: { failureThreshold: 1, cooldownMs: 1000 } });
    (await upstreams.acquire({ signal: never() })).release({ kind: "timeout" });
    time.advance(1000);
    const trial = await upstreams.acquire({ signal: never() });
    const waiting = upstreams.acquire({ signal: never() });
    assert.equal(await isSettled(waiting), false, "one trial at a time");
    trial.release({ kind: "ok" });
    assert.equal(upstreams.state(), "ready");
    assert.equal((await waiting).member.id, A);
  });
});
