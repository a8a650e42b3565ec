import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { formatResetDuration, mostRestrictive, rateLimitHeaders, retryAfterSeconds } from "./headers.ts";

describe("rate-limit headers", () => {
  test("formats reset durations the way OpenAI does", () => {
    assert.equal(formatResetDuration(0), "0s");
    assert.equal(formatResetDuration(20), "20ms");
    assert.equal(formatResetDuration(999), "999ms");
    assert.equal(formatResetDuration(1000), "1s");
    assert.equal(formatResetDuration(1500), "1.5s");
    assert.equal(formatResetDuration(8640), "8.64s");
    assert.equal(formatResetDuration(59_999), "59.999s");
    assert.equal(formatResetDuration(60_000), "1m0s");
    assert.equal(formatResetDuration(90_000), "1m30s");
    assert.equal(formatResetDuration(360_000), "6m0s");
    assert.equal(formatResetDuration(86_400), "1m26.4s");
    assert.equal(formatResetDuration(3_600_000), "1h0m0s");
    assert.equal(formatResetDuration(3_723_004), "1h2m3.004s");
  });

  test("rounds fractional milliseconds up and negative durations to zero", () => {
    assert.equal(formatResetDuration(0.2), "1ms");
    assert.equal(formatResetDuration(-5), "0s");
  });

  test("builds the request and token headers from their states", () => {
    const headers = rateLimitHeaders({
      requests: { key: "key:a:rpm", limit: 60, remaining: 59, resetMs: 1000 },
      tokens: { key: "account:b:tpm", limit: 150_000, remaining: 149_984, resetMs: 6 },
    });
    assert.deepEqual(headers, {
      "x-ratelimit-limit-requests": "60",
      "x-ratelimit-remaining-requests": "59",
      "x-ratelimit-reset-requests": "1s",
      "x-ratelimit-limit-tokens": "150000",
      "x-ratelimit-remaining-tokens": "149984",
      "x-ratelimit-reset-tokens": "6ms",
    });
  });

  test("leaves out the headers of a kind without a state", () => {
    const headers = rateLimitHeaders({ tokens: { key: "tpm", limit: 1000, remaining: 0, resetMs: 360_000 } });
    assert.deepEqual(Object.keys(headers), [
      "x-ratelimit-limit-tokens",
      "x-ratelimit-remaining-tokens",
      "x-ratelimit-reset-tokens",
    ]);
    assert.equal(headers["x-ratelimit-reset-tokens"], "6m0s");
    assert.deepEqual(rateLimitHeaders({}), {});
  });

  test("picks the state with the fewest remaining units, then the longest reset", () => {
    const keyState = { key: "key:a:rpm", limit: 10, remaining: 3, resetMs: 42_000 };
    const accountState = { key: "account:b:rpm", limit: 1000, remaining: 3, resetMs: 180 };
    const roomy = { key: "org:c:rpm", limit: 5000, remaining: 4000, resetMs: 12_000 };
    assert.equal(mostRestrictive([roomy, accountState, keyState]), keyState);
    assert.equal(mostRestrictive([]), undefined);
  });

  test("retry-after is whole seconds, rounded up, at least one", () => {
    assert.equal(retryAfterSeconds(0), 1);
    assert.equal(retryAfterSeconds(1), 1);
    assert.equal(retryAfterSeconds(1000), 1);
    assert.equal(retryAfterSeconds(1001), 2);
    assert.equal(retryAfterSeconds(59_500), 60);
    assert.equal(retryAfterSeconds(-1), 1);
  });
});
