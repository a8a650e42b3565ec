import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { pooledRandomBytes } from "./random.ts";

describe("pooledRandomBytes", () => {
  it("gives the asked number of bytes, never the same draw twice, across refills", () => {
    const seen = new Set<string>();
    // 3,000 draws of 12 bytes: several refills of the 4 KiB pool.
    for (let draw = 0; draw < 3_000; draw++) {
      const bytes = pooledRandomBytes(12);
      assert.equal(bytes.length, 12);
      const hex = bytes.toString("hex");
      assert.ok(!seen.has(hex), "a repeated draw");
      seen.add(hex);
    }
    assert.equal(pooledRandomBytes(10_000).length, 10_000, "larger than the pool");
  });

  it("returns copies that later draws do not change", () => {
    const first = pooledRandomBytes(16);
    const kept = Buffer.from(first);
    for (let draw = 0; draw < 1_000; draw++) pooledRandomBytes(16);
    assert.deepEqual(first, kept);
  });
});
