/**
 * The shared sign-in throttle against this machine's real Redis: two instances (two nodes)
 * count together; with Redis unreachable a node counts on its own and says so.
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

  it("counts failures from every node against one limit", async () => {
    await nodeA.recordFailure("a@x.io", "1.1.1.1");
    await nodeB.recordFailure("a@x.io", "2.2.2.2");
    assert.equal(await nodeA.retryAfterSeconds("a@x.io", "3.3.3.3"), 0);
    await nodeA.recordFailure("a@x.io", "3.3.3.3");
    const wait = await nodeB.retryAfterSeconds("a@x.io", "4.4.4.4");
    assert.ok(wait > 55 && wait <= 60, `wait ${wait}`);
    assert.equal(await nodeB.retryAfterSeconds("b@x.io", "4.4.4.4"), 0, "other accounts are not affected");
    assert.equal(nodeA.degraded, false);
  });

  it("counts an address trying many accounts, and clears an account on success", async () => {
    for (let attempt = 0; attempt < 5; attempt++) await (attempt % 2 ? nodeA : nodeB).recordFailure(`user${attempt}@x.io`, "9.9.9.9");
    assert.ok((await nodeA.retryAfterSeconds("fresh@x.io", "9.9.9.9")) > 0);
    await nodeA.recordFailure("c@x.io", "8.8.8.8");
    await nodeA.recordFailure("c@x.io", "8.8.8.8");
    await nodeB.recordSuccess("c@x.io");
    await nodeA.recordFailure("c@x.io", "8.8.8.8");
    await nodeA.recordFailure("c@x.io", "8.8.8.8");
    assert.equal(await nodeA.retryAfterSeconds("c@x.io", "7.7.7.7"), 0);
  });

  it("falls back to counting alone when Redis is unreachable, and logs it once", async () => {
    const warnings: string[] = [];
    const lonely = new RedisSignInThrottle({ url: "redis://127.0.0.1:1", limits, keyPrefix, logger: { warn: (_details, message) => warnings.push(message), info: () => {} } });
    try {
      for (let attempt = 0; attempt < 3; attempt++) await lonely.recordFailure("d@x.io", "1.1.1.1");
      assert.ok((await lonely.retryAfterSeconds("d@x.io", "1.1.1.1")) > 0);
      assert.equal(lonely.degraded, true);
      assert.equal(warnings.length, 1);
      assert.match(warnings[0]!, /Redis unreachable/);
    } finally {
      await lonely.close();
    }
  });
});
