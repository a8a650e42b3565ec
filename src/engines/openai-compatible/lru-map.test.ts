import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { LruMap } from "./lru-map.ts";

describe("LruMap", () => {
  it("forgets the least recently used entry beyond its capacity", () => {
    const map = new LruMap<string, number>(2);
    map.set("a", 1);
    map.set("b", 2);
    assert.equal(map.get("a"), 1); // "b" is now the oldest
    map.set("c", 3);
    assert.equal(map.get("b"), undefined);
    assert.equal(map.get("a"), 1);
    assert.equal(map.get("c"), 3);
    assert.equal(map.size, 2);
  });

  it("overwrites a key without growing", () => {
    const map = new LruMap<string, number>(2);
    map.set("a", 1);
    map.set("a", 2);
    assert.equal(map.size, 1);
    assert.equal(map.get("a"), 2);
    map.delete("a");
    assert.equal(map.get("a"), undefined);
  });
});
