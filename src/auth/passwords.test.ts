import assert from "node:assert/strict";
import { randomBytes, scryptSync } from "node:crypto";
import { describe, it } from "node:test";
import { COST, hashPassword, needsRehash, verifyPassword } from "./passwords.ts";

/** A hash as Turnpike stored them before the cost was raised (N = 2^14). */
function oldHash(password: string): string {
  const salt = randomBytes(16);
  const hash = scryptSync(password.normalize("NFKC"), salt, 32, { N: 16384, r: 8, p: 1 });
  return ["scrypt", 16384, 8, 1, salt.toString("base64url"), hash.toString("base64url")].join("$");
}

describe("passwords", () => {
  it("hashes with scrypt N = 2^17 and verifies only the right password", async () => {
    const stored = await hashPassword("correct horse battery");
    assert.equal(COST, 131072);
    assert.match(stored, /^scrypt\$131072\$8\$1\$[A-Za-z0-9_-]{22}\$[A-Za-z0-9_-]{43}$/);
    assert.equal(await verifyPassword("correct horse battery", stored), true);
    assert.equal(await verifyPassword("correct horse batterY", stored), false);
    assert.equal(needsRehash(stored), false);
  });

  it("still verifies a hash with the old cost, and asks for it to be hashed again", async () => {
    const stored = oldHash("correct horse battery");
    assert.equal(await verifyPassword("correct horse battery", stored), true);
    assert.equal(await verifyPassword("wrong", stored), false);
    assert.equal(needsRehash(stored), true);
  });

  it("refuses malformed and oversized parameters, and asks for them to be hashed again", async () => {
    const salt = randomBytes(16).toString("base64url");
    for (const stored of ["", "bcrypt$x", `scrypt$1073741824$8$1$${salt}$AAAA`, `scrypt$1000$8$1$${salt}$AAAA`, `scrypt$16384$99$1$${salt}$AAAA`, `scrypt$16384$8$1$${salt}`]) {
      assert.equal(await verifyPassword("anything", stored), false, stored);
      assert.equal(needsRehash(stored), true, stored);
    }
  });

  it("hashes off the event loop: other callbacks run while a hash is computed", async () => {
    let turns = 0;
    const timer = setInterval(() => turns++, 1);
    const started = performance.now();
    try {
      await hashPassword("correct horse battery");
    } finally {
      clearInterval(timer);
    }
    const elapsedMs = performance.now() - started;
    // A hash blocking the loop would let no timer fire until it returned.
    assert.ok(turns >= 2, `the event loop turned ${turns} times during a ${elapsedMs.toFixed(0)} ms hash`);
  });
});
