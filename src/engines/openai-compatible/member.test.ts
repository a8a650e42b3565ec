/**
 * PoolMember: in-flight counting, passive health (threshold, cooldown, backoff, retry-after,
 * trial requests) and probes, on a clock the test moves.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { PoolMember } from "./member.ts";

function clock() {
  let now = 1_000_000;
  return { now: () => now, advance: (ms: number) => (now += ms) };
}

function member(options: ConstructorParameters<typeof PoolMember>[2] = {}, capacity = 4) {
  const time = clock();
  return { time, member: new PoolMember("http://key:secret@10.0.0.5:8000", capacity, { now: time.now, ...options }) };
}

const timeout = { kind: "timeout" } as const;

describe("PoolMember", () => {
  it("has an id without credentials and a base URL ending in /v1", () => {
    const { member: upstream } = member();
    assert.equal(upstream.id, "http://10.0.0.5:8000/v1");
    assert.equal(upstream.baseUrl, "http://key:secret@10.0.0.5:8000/v1");
  });

  it("counts requests in flight against its capacity", () => {
    const { member: upstream } = member({}, 2);
    upstream.begin();
    assert.equal(upstream.canTake(), true);
    upstream.begin();
    assert.equal(upstream.canTake(), false);
    upstream.finish({ kind: "ok" }, false);
    assert.equal(upstream.canTake(), true);
    assert.equal(upstream.stats().inFlight, 1);
    assert.equal(upstream.stats().requests, 2);
  });

  it("stays healthy below the failure threshold and forgets failures after a success", () => {
    const { member: upstream } = member({ failureThreshold: 3 });
    for (const _ of [1, 2]) upstream.finish((upstream.begin(), timeout), false);
    upstream.finish((upstream.begin(), { kind: "ok", timeToFirstTokenMs: 42 }), false);
    for (const _ of [1, 2]) upstream.finish((upstream.begin(), timeout), false);
    assert.equal(upstream.health, "healthy");
    assert.deepEqual(upstream.stats().errors, { connect: 0, timeout: 4, status: 0, protocol: 0 });
    assert.equal(upstream.stats().lastTimeToFirstTokenMs, 42);
  });

  it("is out at once, refusing our credentials, when a request gets 401 or 403; an accepted probe brings it back", () => {
    for (const status of [401, 403] as const) {
      const { member: upstream } = member({ failureThreshold: 3, cooldownMs: 1000 });
      upstream.finish((upstream.begin(), { kind: "status", status }), false);
      assert.equal(upstream.health, "down", "one refusal, not three failures");
      assert.equal(upstream.refusal, status);
      assert.equal(upstream.canTake(), false);
      assert.deepEqual(upstream.stats().errors, { connect: 0, timeout: 0, status: 1, protocol: 0 });
      upstream.probed(true);
      assert.equal(upstream.refusal, undefined);
    }
    // Any other 4xx/5xx status is a failure like the rest: the threshold applies.
    const { member: other } = member({ failureThreshold: 3 });
    other.finish((other.begin(), { kind: "status", status: 404 }), false);
    assert.equal(other.health, "healthy");
    assert.equal(other.refusal, undefined);
  });

  it("goes down after consecutive failures, then recovers through one trial request", () => {
    const { member: upstream, time } = member({ failureThreshold: 2, cooldownMs: 1000 });
    upstream.finish((upstream.begin(), { kind: "connect" }), false);
    upstream.finish((upstream.begin(), { kind: "status", status: 502 }), false);
    assert.equal(upstream.health, "down");
    assert.equal(upstream.canTake(), false);
    assert.equal(upstream.cooldownLeftMs, 1000);
    time.advance(1000);
    assert.equal(upstream.health, "recovering");
    assert.equal(upstream.canTake(), true);
    const trial = upstream.begin();
    assert.equal(trial, true);
    assert.equal(upstream.canTake(), false, "one trial at a time");
    upstream.finish({ kind: "ok" }, trial);
    assert.equal(upstream.health, "healthy");
  });

  it("doubles the cooldown on each failed trial, up to the maximum", () => {
    const { member: upstream, time } = member({ failureThreshold: 1, cooldownMs: 1000, maxCooldownMs: 3000 });
    upstream.finish((upstream.begin(), timeout), false);
    const cooldowns = [upstream.cooldownLeftMs];
    for (const _ of [1, 2, 3]) {
      time.advance(upstream.cooldownLeftMs);
      const trial = upstream.begin();
      upstream.finish(timeout, trial);
      cooldowns.push(upstream.cooldownLeftMs);
    }
    assert.deepEqual(cooldowns, [1000, 2000, 3000, 3000]);
  });

  it("honours retry-after at once, capped", () => {
    const { member: upstream, time } = member({ failureThreshold: 5, maxRetryAfterMs: 60_000 });
    upstream.finish((upstream.begin(), { kind: "status", status: 429, retryAfterMs: 7000 }), false);
    assert.equal(upstream.health, "down");
    assert.equal(upstream.cooldownLeftMs, 7000);
    time.advance(7000);
    assert.equal(upstream.health, "recovering");
    upstream.finish((upstream.begin(), { kind: "status", status: 503, retryAfterMs: 3_600_000 }), true);
    assert.equal(upstream.cooldownLeftMs, 60_000);
  });

  it("counts neutral outcomes for nothing", () => {
    const { member: upstream } = member({ failureThreshold: 1 });
    upstream.finish((upstream.begin(), { kind: "neutral" }), false);
    assert.equal(upstream.health, "healthy");
    assert.deepEqual(upstream.stats().errors, { connect: 0, timeout: 0, status: 0, protocol: 0 });
    assert.equal(upstream.inFlight, 0);
  });

  it("goes down on a failed probe and comes back on a probe only after the cooldown", () => {
    const { member: upstream, time } = member({ failureThreshold: 3, cooldownMs: 1000 });
    upstream.probed(false);
    assert.equal(upstream.health, "down");
    upstream.probed(true);
    assert.equal(upstream.health, "down", "a success during the cooldown does not end it");
    time.advance(1000);
    upstream.probed(true);
    assert.equal(upstream.health, "healthy");
  });

  it("comes back on a probe after the first cooldown however long the backoff grew, but not during a retry-after pause", () => {
    const { member: upstream, time } = member({ failureThreshold: 1, cooldownMs: 1000, maxCooldownMs: 30_000 });
    // A server that died: requests and probes fail for a while, the backoff grows to its maximum.
    for (let failure = 0; failure < 8; failure++) {
      upstream.probed(false);
      time.advance(500);
    }
    assert.ok(upstream.cooldownLeftMs > 10_000, `the backoff grew (${upstream.cooldownLeftMs} ms left)`);
    upstream.probed(true);
    assert.equal(upstream.health, "healthy", "restarted: the first good probe brings it back");

    const paused = member({ failureThreshold: 3, cooldownMs: 1000 });
    paused.member.finish((paused.member.begin(), { kind: "status", status: 503, retryAfterMs: 5000 }), false);
    paused.time.advance(2000);
    paused.member.probed(true);
    assert.equal(paused.member.health, "down", "the server asked for 5 s");
    paused.time.advance(3000);
    paused.member.probed(true);
    assert.equal(paused.member.health, "healthy");
  });

  it("keeps counting request failures across successful probes while healthy", () => {
    const { member: upstream } = member({ failureThreshold: 2 });
    upstream.finish((upstream.begin(), timeout), false);
    upstream.probed(true);
    upstream.finish((upstream.begin(), timeout), false);
    assert.equal(upstream.health, "down");
  });
});
