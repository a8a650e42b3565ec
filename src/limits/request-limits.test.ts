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

  it("charges a likely count first and gives its rest back once the exact count is known, without waiting for the backend", async () => {
    const limiter = new MemoryRateLimiter({ now: frozen });
    const calls: string[] = [];
    let releaseRefund!: () => void;
    const refundGate = new Promise<void>((resolve) => (releaseRefund = resolve));
    const consume = limiter.consume.bind(limiter);
    const refund = limiter.refund.bind(limiter);
    limiter.consume = (checks) => (calls.push(`consume ${checks.map((check) => check.cost).join(",")}`), consume(checks));
    limiter.refund = async (key, amount) => {
      calls.push(`refund ${amount}`);
      await refundGate;
      return refund(key, amount);
    };
    const limits = new RequestLimits(limiter);
    const key = keyWith({ rpm: 10, tpm: 1_000 });
    const admitted = await limits.admit({ key, plan: null, tokens: 50, likelyTokens: 80 });
    assert.equal(admitted.headers["x-ratelimit-remaining-tokens"], "920", "the guess was charged");
    // Resolves while the give-back is still on its way: it is not on the request's path.
    await admitted.raise(70);
    assert.deepEqual(calls, ["consume 1,80", "refund 10"]);
    assert.equal(admitted.headers["x-ratelimit-remaining-tokens"], "930", "the headers say the exact charge");
    let finished = false;
    const finishing = admitted.finish(20).then(() => (finished = true));
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(finished, false, "finish waits for the give-back");
    releaseRefund();
    await finishing;
    assert.deepEqual(calls, ["consume 1,80", "refund 10", "refund 50"]);
    const next = await limits.admit({ key, plan: null, tokens: 0 });
    assert.equal(next.headers["x-ratelimit-remaining-tokens"], "980", "20 used: every other token came back");
  });

  it("charges the lower bound when a limit cannot take the guess, refusing only as the lower bound would", async () => {
    const limits = new RequestLimits(new MemoryRateLimiter({ now: frozen }));
    const key = keyWith({ rpm: 10, tpm: 100 });
    const first = await limits.admit({ key, plan: null, tokens: 40 });
    // 60 left: the guess of 70 does not fit, the bound of 50 does; the raise to the exact 55 too.
    const second = await limits.admit({ key, plan: null, tokens: 50, likelyTokens: 70 });
    assert.equal(second.headers["x-ratelimit-remaining-tokens"], "10");
    assert.equal(second.headers["x-ratelimit-remaining-requests"], "8", "the refused guess charged nothing, its request included");
    await second.raise(55);
    assert.equal(second.headers["x-ratelimit-remaining-tokens"], "5");
    // Nothing left for a bound of 10: refused with the bound's words, whatever the guess.
    await assert.rejects(limits.admit({ key, plan: null, tokens: 10, likelyTokens: 500 }), (error: unknown) => {
      assert.ok(error instanceof RateLimitExceededError);
      assert.match(error.message, /Try again in/);
      return true;
    });
    await first.finish(40);
    await second.finish(55);
  });

  it("reports a give-back that failed through finish, having given back the rest", async () => {
    const limiter = new MemoryRateLimiter({ now: frozen });
    const refund = limiter.refund.bind(limiter);
    const refunded: number[] = [];
    let failNext = true;
    limiter.refund = async (key, amount) => {
      if (failNext) {
        failNext = false;
        throw new Error("backend down");
      }
      refunded.push(amount);
      return refund(key, amount);
    };
    const limits = new RequestLimits(limiter);
    const admitted = await limits.admit({ key: keyWith({ rpm: null, tpm: 1_000 }), plan: null, tokens: 10, likelyTokens: 40 });
    await admitted.raise(30);
    await assert.rejects(admitted.finish(5), /backend down/);
    assert.deepEqual(refunded, [25], "finish's own give-back was made");
  });
});
