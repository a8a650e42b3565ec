import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { MemorySignInThrottle } from "./sign-in-throttle.ts";

describe("sign-in throttle", () => {
  const limits = { perAccount: 3, perAddress: 5, windowMs: 60_000 };

  it("refuses an account after its failures, until the window ends", () => {
    let now = 1_000_000;
    const throttle = new MemorySignInThrottle(limits, () => now);
    for (let attempt = 0; attempt < 3; attempt++) {
      assert.equal(throttle.retryAfterSeconds("a@x.io", "1.1.1.1"), 0);
      throttle.recordFailure("a@x.io", "1.1.1.1");
    }
    assert.equal(throttle.retryAfterSeconds("a@x.io", "2.2.2.2"), 60, "another address does not help");
    assert.equal(throttle.retryAfterSeconds("b@x.io", "1.1.1.1"), 0, "another account from the same address may still try");
    now += 30_000;
    assert.equal(throttle.retryAfterSeconds("a@x.io", "1.1.1.1"), 30);
    now += 30_000;
    assert.equal(throttle.retryAfterSeconds("a@x.io", "1.1.1.1"), 0);
  });

  it("refuses an address that tries many accounts", () => {
    const throttle = new MemorySignInThrottle(limits, () => 0);
    for (let attempt = 0; attempt < 5; attempt++) throttle.recordFailure(`user${attempt}@x.io`, "9.9.9.9");
    assert.equal(throttle.retryAfterSeconds("fresh@x.io", "9.9.9.9"), 60);
    assert.equal(throttle.retryAfterSeconds("fresh@x.io", "8.8.8.8"), 0);
  });

  it("clears an account's failures on success", () => {
    const throttle = new MemorySignInThrottle(limits, () => 0);
    throttle.recordFailure("a@x.io", "1.1.1.1");
    throttle.recordFailure("a@x.io", "1.1.1.1");
    throttle.recordSuccess("a@x.io");
    throttle.recordFailure("a@x.io", "1.1.1.1");
    throttle.recordFailure("a@x.io", "1.1.1.1");
    assert.equal(throttle.retryAfterSeconds("a@x.io", "1.1.1.1"), 0);
  });
});
