import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { MemorySignInThrottle } from "./sign-in-throttle.ts";

describe("sign-in throttle", () => {
  const limits = { perAccount: 3, perAddress: 5, windowMs: 60_000 };

  it("refuses an account after its attempts, until the window ends", () => {
    let now = 1_000_000;
    const throttle = new MemorySignInThrottle(limits, () => now);
    for (let attempt = 0; attempt < 3; attempt++) assert.deepEqual(throttle.reserve("a@x.io", "1.1.1.1"), { allowed: true });
    assert.deepEqual(throttle.reserve("a@x.io", "2.2.2.2"), { allowed: false, retryAfterSeconds: 60 }, "another address does not help");
    assert.deepEqual(throttle.reserve("b@x.io", "1.1.1.1"), { allowed: true }, "another account from the same address may still try");
    now += 30_000;
    assert.deepEqual(throttle.reserve("a@x.io", "1.1.1.1"), { allowed: false, retryAfterSeconds: 30 });
    now += 30_000;
    assert.deepEqual(throttle.reserve("a@x.io", "1.1.1.1"), { allowed: true });
  });

  it("counts nothing for a refused attempt", () => {
    const throttle = new MemorySignInThrottle(limits, () => 0);
    for (let attempt = 0; attempt < 3; attempt++) throttle.reserve("a@x.io", "1.1.1.1");
    // Refused on the account: the address must not be charged for it.
    for (let attempt = 0; attempt < 10; attempt++) assert.equal(throttle.reserve("a@x.io", "1.1.1.1").allowed, false);
    assert.equal(throttle.reserve("b@x.io", "1.1.1.1").allowed, true);
    assert.equal(throttle.reserve("c@x.io", "1.1.1.1").allowed, true);
  });

  it("refuses an address that tries many accounts", () => {
    const throttle = new MemorySignInThrottle(limits, () => 0);
    for (let attempt = 0; attempt < 5; attempt++) throttle.reserve(`user${attempt}@x.io`, "9.9.9.9");
    assert.deepEqual(throttle.reserve("fresh@x.io", "9.9.9.9"), { allowed: false, retryAfterSeconds: 60 });
    assert.equal(throttle.reserve("fresh@x.io", "8.8.8.8").allowed, true);
  });

  it("lets exactly the limit's worth of many attempts through, each reserved in one synchronous step", async () => {
    // In memory, atomicity is `reserve` being synchronous: no other attempt can run between its check and its count.
    // (The Redis throttle's test sends its attempts truly at once.)
    const throttle = new MemorySignInThrottle(limits, () => 0);
    const attempts = Array.from({ length: 40 }, () => throttle.reserve("a@x.io", "1.1.1.1"));
    assert.equal(attempts.filter((attempt) => attempt.allowed).length, 3);
  });

  it("clears an account on success and gives the address its attempt back", () => {
    const throttle = new MemorySignInThrottle(limits, () => 0);
    throttle.reserve("a@x.io", "1.1.1.1");
    throttle.reserve("a@x.io", "1.1.1.1");
    throttle.succeeded("a@x.io", "1.1.1.1");
    for (let attempt = 0; attempt < 3; attempt++) assert.equal(throttle.reserve("a@x.io", "1.1.1.1").allowed, true);
    // The address spent 5 reservations, 1 given back: one more fits.
    assert.equal(throttle.reserve("b@x.io", "1.1.1.1").allowed, true);
    assert.equal(throttle.reserve("c@x.io", "1.1.1.1").allowed, false);
  });

  it("gives an undecided attempt back to both counts", () => {
    const throttle = new MemorySignInThrottle(limits, () => 0);
    for (let attempt = 0; attempt < 3; attempt++) throttle.reserve("a@x.io", "1.1.1.1");
    throttle.release("a@x.io", "1.1.1.1");
    assert.equal(throttle.reserve("a@x.io", "1.1.1.1").allowed, true);
    assert.equal(throttle.reserve("a@x.io", "1.1.1.1").allowed, false);
    throttle.release("z@x.io", "7.7.7.7");
    assert.equal(throttle.reserve("z@x.io", "7.7.7.7").allowed, true, "giving back what was never counted goes no lower than zero");
  });
});
