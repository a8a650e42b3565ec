/**
 * The shared sign-in throttle against this machine's real Redis: two instances (two nodes)
 * count together, simultaneous attempts on both never pass a limit, and with Redis unreachable a
 * node counts on its own and says so.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, describe, it } from "node:test";
import { RedisSignInThrottle } from "./redis-sign-in-throttle.ts";

const redisUrl = process.env.TURNPIKE_TEST_REDIS_URL ?? "redis://127.0.0.1:6379";
const limits = { perAccount: 3, perAddress: 5, windowMs: 60_000 };

describe("sign-in throttle in Redis", () => {
  const keyPrefix = `turnpike-test:${randomBytes(6).toString("hex")}:`;
  const nodeA = new RedisSignInThrottle({ url: redisUrl, limits, keyPrefix });
  const nodeB = new RedisSignInThrottle({ url: redisUrl, limits, keyPrefix });
  after(async () => {
    await nodeA.close();
    await nodeB.close();
  });

  it("counts attempts from every node against one limit", async () => {
    assert.equal((await nodeA.reserve("a@x.io", "1.1.1.1")).allowed, true);
    assert.equal((await nodeB.reserve("a@x.io", "2.2.2.2")).allowed, true);
    assert.equal((await nodeA.reserve("a@x.io", "3.3.3.3")).allowed, true);
    const refused = await nodeB.reserve("a@x.io", "4.4.4.4");
    assert.equal(refused.allowed, false);
    const wait = refused.allowed ? 0 : refused.retryAfterSeconds;
    assert.ok(wait > 55 && wait <= 60, `wait ${wait}`);
    assert.equal((await nodeB.reserve("b@x.io", "4.4.4.4")).allowed, true, "other accounts are not affected");
    assert.equal(nodeA.degraded, false);
  });

  it("lets exactly the limit's worth of 40 simultaneous attempts on two nodes through", async () => {
    const attempts = await Promise.all(Array.from({ length: 40 }, (_unused, index) => (index % 2 ? nodeA : nodeB).reserve("many@x.io", `10.0.0.${index}`)));
    assert.equal(attempts.filter((attempt) => attempt.allowed).length, limits.perAccount);
    const fromOneAddress = await Promise.all(Array.from({ length: 40 }, (_unused, index) => (index % 2 ? nodeA : nodeB).reserve(`user${index}@x.io`, "6.6.6.6")));
    assert.equal(fromOneAddress.filter((attempt) => attempt.allowed).length, limits.perAddress);
  });

  it("counts an address trying many accounts, clears an account on success and gives back an undecided attempt", async () => {
    for (let attempt = 0; attempt < 5; attempt++) await (attempt % 2 ? nodeA : nodeB).reserve(`user${attempt}@x.io`, "9.9.9.9");
    assert.equal((await nodeA.reserve("fresh@x.io", "9.9.9.9")).allowed, false);
    await nodeA.reserve("c@x.io", "8.8.8.8");
    await nodeA.reserve("c@x.io", "8.8.8.8");
    await nodeB.succeeded("c@x.io", "8.8.8.8");
    await nodeA.reserve("c@x.io", "8.8.8.8");
    await nodeA.reserve("c@x.io", "8.8.8.8");
    assert.equal((await nodeA.reserve("c@x.io", "7.7.7.7")).allowed, true, "the success cleared the account's two earlier attempts");
    assert.equal((await nodeA.reserve("c@x.io", "7.7.7.7")).allowed, false);
    await nodeB.release("c@x.io", "7.7.7.7");
    assert.equal((await nodeA.reserve("c@x.io", "7.7.7.7")).allowed, true, "the released attempt was given back");
  });

  it("falls back to counting alone when Redis is unreachable, and logs it once", async () => {
    const warnings: string[] = [];
    const lonely = new RedisSignInThrottle({ url: "redis://127.0.0.1:1", limits, keyPrefix, logger: { warn: (_details, message) => warnings.push(message), info: () => {} } });
    try {
      for (let attempt = 0; attempt < 3; attempt++) assert.equal((await lonely.reserve("d@x.io", "1.1.1.1")).allowed, true);
      assert.equal((await lonely.reserve("d@x.io", "1.1.1.1")).allowed, false);
      assert.equal(lonely.degraded, true);
      assert.equal(warnings.length, 1);
      assert.match(warnings[0]!, /Redis unreachable/);
    } finally {
      await lonely.close();
    }
  });
});
