import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ApiKeyRecord } from "../auth/api-keys.ts";
import type { Plan } from "../protocol/plans.ts";
import { RateLimitExceededError } from "../protocol/errors.ts";
import { MemoryRateLimiter } from "./memory.ts";
import { RequestLimits } from "./request-limits.ts";

/** A fixed clock: buckets do not drain between the steps of a test. */
const frozen = () => 1_000_000;

function keyWith(limits: { rpm: number | null; tpm: number | null }): ApiKeyRecord {
  return { id: "key_1", accountId: "acct_1", rpm: limits.rpm, tpm: limits.tpm, ancestorLimits: [] } as unknown as ApiKeyRecord;
}
const plan = { id: "plan_1", rpm: 100, tpm: 10_000 } as unknown as Plan;

describe("RequestLimits", () => {
  it("reports the state after the exact charge once raised, the most restrictive of key and plan", async () => {
    const limits = new RequestLimits(new MemoryRateLimiter({ now: frozen }));
    const admitted = await limits.admit({ key: keyWith({ rpm: 10, tpm: 1_000 }), plan, tokens: 50 });
    assert.equal(admitted.headers["x-ratelimit-remaining-requests"], "9");
    assert.equal(admitted.headers["x-ratelimit-limit-tokens"], "1000");
    assert.equal(admitted.headers["x-ratelimit-remaining-tokens"], "950");
    await admitted.raise(300);
    assert.equal(admitted.headers["x-ratelimit-remaining-tokens"], "700", "the headers follow the raise");
    assert.equal(admitted.headers["x-ratelimit-remaining-requests"], "9");
    await admitted.finish(120);
    const next = await limits.admit({ key: keyWith({ rpm: 10, tpm: 1_000 }), plan, tokens: 0 });
    assert.equal(next.headers["x-ratelimit-remaining-tokens"], "880", "finish gave back what was not used");
  });

  it("refuses a raise past the limit with 429 and the headers of the state it leaves", async () => {
    const limits = new RequestLimits(new MemoryRateLimiter({ now: frozen }));
    const first = await limits.admit({ key: keyWith({ rpm: null, tpm: 1_000 }), plan: null, tokens: 600 });
    const second = await limits.admit({ key: keyWith({ rpm: null, tpm: 1_000 }), plan: null, tokens: 100 });
    await assert.rejects(second.raise(500), (error: unknown) => {
      assert.ok(error instanceof RateLimitExceededError);
      assert.equal(error.headers["x-ratelimit-remaining-tokens"], "300");
      return true;
    });
    assert.equal(second.headers["x-ratelimit-remaining-tokens"], "300", "a refused raise charged nothing more");
    await second.finish(0);
    await first.finish(600);
  });

  it("charges the same key record and plan the same limits every time, and a new record or plan by its own (limits kept per record are never stale)", async () => {
    const limits = new RequestLimits(new MemoryRateLimiter({ now: frozen }));
    const key = keyWith({ rpm: 10, tpm: 1_000 });
    for (const remaining of ["9", "8"]) {
      const admitted = await limits.admit({ key, plan, tokens: 10 });
      assert.equal(admitted.headers["x-ratelimit-remaining-requests"], remaining);
      await admitted.finish(10);
    }
    // The key updated (a new record: records are never changed in place) to a higher limit.
    const raised = await limits.admit({ key: keyWith({ rpm: 50, tpm: 1_000 }), plan, tokens: 10 });
    assert.equal(raised.headers["x-ratelimit-limit-requests"], "50");
    assert.equal(raised.headers["x-ratelimit-remaining-requests"], "47");
    await raised.finish(10);
    // The same key record under a stricter plan: the plan's tokens limit is the most restrictive now.
    const strict = await limits.admit({ key, plan: { ...plan, tpm: 100 } as Plan, tokens: 10 });
    assert.equal(strict.headers["x-ratelimit-limit-tokens"], "100");
    assert.equal(strict.headers["x-ratelimit-remaining-tokens"], "60");
    await strict.finish(10);
    // And without a plan, the key's own limits alone.
    const alone = await limits.admit({ key, plan: null, tokens: 10 });
    assert.equal(alone.headers["x-ratelimit-limit-tokens"], "1000");
    await alone.finish(10);
  });

  it("refuses as too large a request that no wait would let through", async () => {
    const limits = new RequestLimits(new MemoryRateLimiter({ now: frozen }));
    const admitted = await limits.admit({ key: keyWith({ rpm: null, tpm: 1_000 }), plan: null, tokens: 10 });
    await assert.rejects(admitted.raise(5_000), /Request too large: it needs 5000 tokens/);
  });

  it("gives a key without limits empty headers and nothing to charge", async () => {
    const limits = new RequestLimits(new MemoryRateLimiter({ now: frozen }));
    const admitted = await limits.admit({ key: { ...keyWith({ rpm: null, tpm: null }), accountId: null }, plan: null, tokens: 10 });
    assert.deepEqual(admitted.headers, {});
    await admitted.raise(1_000_000);
    await admitted.finish(0);
  });

  it("counts a request on its headers once: the admission after charges its tokens only, and a key over its limit is refused there", async () => {
    const limits = new RequestLimits(new MemoryRateLimiter({ now: frozen }));
    const key = keyWith({ rpm: 2, tpm: 1_000 });
    await limits.countRequest({ key, plan });
    const admitted = await limits.admit({ key, plan, tokens: 50, requestCounted: true });
    assert.equal(admitted.headers["x-ratelimit-remaining-requests"], "1", "counted once");
    assert.equal(admitted.headers["x-ratelimit-remaining-tokens"], "950");
    await limits.countRequest({ key, plan });
    await assert.rejects(limits.countRequest({ key, plan }), (error: unknown) => {
      assert.ok(error instanceof RateLimitExceededError);
      assert.equal(error.headers["x-ratelimit-remaining-requests"], "0");
      return true;
    });
  });
});
