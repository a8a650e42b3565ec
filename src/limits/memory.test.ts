import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MemoryRateLimiter } from "./memory.ts";

/** A clock the test moves by hand, starting at an arbitrary epoch ms. */
function fakeClock(start = 1_700_000_000_000): { now: () => number; advance: (ms: number) => void } {
  let current = start;
  return { now: () => current, advance: (ms) => (current += ms) };
}

function limiterWithClock(): { limiter: MemoryRateLimiter; advance: (ms: number) => void } {
  const clock = fakeClock();
  return { limiter: new MemoryRateLimiter({ now: clock.now }), advance: clock.advance };
}

describe("MemoryRateLimiter", () => {
  test("allows up to the limit and refuses the next request with the time one request takes to refill", async () => {
    const { limiter } = limiterWithClock();
    for (let index = 0; index < 60; index += 1) {
      const decision = await limiter.consume([{ key: "key:a:rpm", limit: 60, cost: 1 }]);
      assert.equal(decision.allowed, true, `request ${index + 1}`);
      assert.equal(decision.retryAfterMs, 0);
      assert.equal(decision.states[0].remaining, 59 - index);
    }
    const refused = await limiter.consume([{ key: "key:a:rpm", limit: 60, cost: 1 }]);
    assert.equal(refused.allowed, false);
    assert.equal(refused.retryAfterMs, 1000);
    assert.deepEqual(refused.tooLarge, []);
    assert.deepEqual(refused.states, [{ key: "key:a:rpm", limit: 60, remaining: 0, resetMs: 60_000 }]);
  });

  test("reports remaining units and the time until the bucket is full again", async () => {
    const { limiter } = limiterWithClock();
    const decision = await limiter.consume([{ key: "key:a:tpm", limit: 1000, cost: 250 }]);
    assert.deepEqual(decision.states, [{ key: "key:a:tpm", limit: 1000, remaining: 750, resetMs: 15_000 }]);
  });

  test("refuses every check when one is refused, and charges none of them", async () => {
    const { limiter } = limiterWithClock();
    const checks = (key: string) => [
      { key: `key:${key}:rpm`, limit: 2, cost: 1 },
      { key: "account:x:rpm", limit: 10, cost: 1 },
    ];
    assert.equal((await limiter.consume(checks("a"))).allowed, true);
    assert.equal((await limiter.consume(checks("a"))).allowed, true);
    const refused = await limiter.consume(checks("a"));
    assert.equal(refused.allowed, false);
    assert.equal(refused.states[0].remaining, 0);
    assert.equal(refused.states[1].remaining, 8, "the account was not charged for the refused request");
    for (let index = 0; index < 4; index += 1) {
      assert.equal((await limiter.consume(checks(`b${index}`))).allowed, true);
      assert.equal((await limiter.consume(checks(`b${index}`))).allowed, true);
    }
    const accountFull = await limiter.consume(checks("c"));
    assert.equal(accountFull.allowed, false);
    assert.equal(accountFull.states[0].remaining, 2, "the key was not charged when the account refused");
  });

  test("retry-after is the longest wait among the refused checks", async () => {
    const { limiter } = limiterWithClock();
    await limiter.consume([
      { key: "rpm", limit: 60, cost: 60 },
      { key: "tpm", limit: 600, cost: 600 },
    ]);
    const refused = await limiter.consume([
      { key: "rpm", limit: 60, cost: 1 },
      { key: "tpm", limit: 600, cost: 300 },
    ]);
    assert.equal(refused.allowed, false);
    assert.equal(refused.retryAfterMs, 30_000);
  });

  test("a refund gives capacity back", async () => {
    const { limiter } = limiterWithClock();
    await limiter.consume([{ key: "tpm", limit: 1000, cost: 800 }]);
    assert.equal((await limiter.consume([{ key: "tpm", limit: 1000, cost: 600 }])).allowed, false);
    await limiter.refund("tpm", 500);
    const decision = await limiter.consume([{ key: "tpm", limit: 1000, cost: 600 }]);
    assert.equal(decision.allowed, true);
    assert.equal(decision.states[0].remaining, 100);
  });

  test("a refund never takes a bucket below empty, and ignores unknown keys", async () => {
    const { limiter } = limiterWithClock();
    await limiter.consume([{ key: "tpm", limit: 1000, cost: 100 }]);
    await limiter.refund("tpm", 5000);
    await limiter.refund("never-seen", 10);
    const decision = await limiter.consume([{ key: "tpm", limit: 1000, cost: 1000 }]);
    assert.equal(decision.allowed, true);
    assert.equal(decision.states[0].remaining, 0);
    assert.equal((await limiter.consume([{ key: "tpm", limit: 1000, cost: 1 }])).allowed, false);
  });

  test("capacity comes back as the window slides", async () => {
    const { limiter, advance } = limiterWithClock();
    assert.equal((await limiter.consume([{ key: "rpm", limit: 60, cost: 60 }])).allowed, true);
    advance(999);
    assert.equal((await limiter.consume([{ key: "rpm", limit: 60, cost: 1 }])).allowed, false);
    advance(1);
    assert.equal((await limiter.consume([{ key: "rpm", limit: 60, cost: 1 }])).allowed, true);
    advance(30_000);
    const half = await limiter.consume([{ key: "rpm", limit: 60, cost: 0 }]);
    assert.equal(half.states[0].remaining, 30);
    advance(60_000);
    const full = await limiter.consume([{ key: "rpm", limit: 60, cost: 0 }]);
    assert.deepEqual(full.states[0], { key: "rpm", limit: 60, remaining: 60, resetMs: 0 });
  });

  test("refuses a cost larger than the limit as too large, without retry time, and charges nothing", async () => {
    const { limiter } = limiterWithClock();
    const decision = await limiter.consume([
      { key: "key:a:rpm", limit: 60, cost: 1 },
      { key: "key:a:tpm", limit: 1000, cost: 1001 },
    ]);
    assert.equal(decision.allowed, false);
    assert.deepEqual(decision.tooLarge, ["key:a:tpm"]);
    assert.equal(decision.retryAfterMs, -1);
    assert.equal(decision.states[0].remaining, 60);
  });

  test("a limit of zero refuses any cost but lets a zero cost through", async () => {
    const { limiter } = limiterWithClock();
    const refused = await limiter.consume([{ key: "blocked", limit: 0, cost: 1 }]);
    assert.equal(refused.allowed, false);
    assert.deepEqual(refused.tooLarge, ["blocked"]);
    const free = await limiter.consume([{ key: "blocked", limit: 0, cost: 0 }]);
    assert.equal(free.allowed, true);
    assert.deepEqual(free.states[0], { key: "blocked", limit: 0, remaining: 0, resetMs: 0 });
  });

  test("rejects malformed checks with a RangeError", async () => {
    const { limiter } = limiterWithClock();
    await assert.rejects(limiter.consume([{ key: "a", limit: 10, cost: -1 }]), RangeError);
    await assert.rejects(limiter.consume([{ key: "a", limit: 1.5, cost: 1 }]), RangeError);
    await assert.rejects(limiter.consume([{ key: "", limit: 1, cost: 1 }]), RangeError);
    await assert.rejects(
      limiter.consume([
        { key: "a", limit: 10, cost: 1 },
        { key: "a", limit: 10, cost: 1 },
      ]),
      RangeError,
    );
    await assert.rejects(limiter.refund("a", Number.NaN), RangeError);
  });

  test("forgets buckets that have been idle for a window", async () => {
    const { limiter, advance } = limiterWithClock();
    for (let index = 0; index < 100; index += 1) {
      await limiter.consume([{ key: `key:${index}:rpm`, limit: 60, cost: 1 }]);
    }
    assert.equal(limiter.size, 100);
    advance(30_000);
    await limiter.consume([{ key: "key:busy:rpm", limit: 60, cost: 60 }]);
    advance(30_001);
    await limiter.consume([{ key: "key:other:rpm", limit: 60, cost: 1 }]);
    assert.equal(limiter.size, 2, "only the buckets that have not drained yet remain");
    assert.equal(limiter.degraded, false);
  });

  test("a bucket observed from elsewhere goes on from that level and drains from the moment it was observed", async () => {
    const { limiter, advance } = limiterWithClock();
    limiter.observe("seen:rpm", 30 * 60_000, 30);
    assert.equal((await limiter.consume([{ key: "seen:rpm", limit: 30, cost: 1 }])).allowed, false, "full, as observed");
    advance(2_000);
    const decision = await limiter.consume([{ key: "seen:rpm", limit: 30, cost: 1 }]);
    assert.equal(decision.allowed, true, "one unit came back in 2 s");
    assert.equal(decision.states[0]!.remaining, 0);
    limiter.observe("seen:rpm", 0, 30);
    assert.equal(limiter.size, 0, "an empty level forgets the bucket");
  });

  test("observing with keepFuller never lowers a bucket", async () => {
    const { limiter } = limiterWithClock();
    await limiter.consume([{ key: "local:rpm", limit: 30, cost: 5 }]);
    limiter.observe("local:rpm", 2 * 60_000, 30, true);
    assert.deepEqual(limiter.snapshot(), [{ key: "local:rpm", level: 5 * 60_000, limit: 30 }], "the fuller local bucket stays");
    limiter.observe("local:rpm", 8 * 60_000, 30, true);
    assert.deepEqual(limiter.snapshot(), [{ key: "local:rpm", level: 8 * 60_000, limit: 30 }]);
    limiter.observe("local:rpm", 0, 30, true);
    assert.equal(limiter.size, 1);
  });

  test("a snapshot lists the buckets that are not empty, drained to now", async () => {
    const { limiter, advance } = limiterWithClock();
    await limiter.consume([{ key: "a:rpm", limit: 60, cost: 10 }]);
    await limiter.consume([{ key: "b:rpm", limit: 60, cost: 1 }]);
    advance(5_000);
    assert.deepEqual(limiter.snapshot(), [{ key: "a:rpm", level: 5 * 60_000, limit: 60 }]);
  });

  test("observing keeps memory bounded: buckets idle for a window are swept", async () => {
    const { limiter, advance } = limiterWithClock();
    for (let index = 0; index < 100; index += 1) limiter.observe(`seen:${index}`, 60_000, 60);
    advance(60_001);
    limiter.observe("seen:last", 60_000, 60);
    assert.equal(limiter.size, 1);
  });
});
