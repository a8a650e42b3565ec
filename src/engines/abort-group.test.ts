import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { abortWith } from "./abort-group.ts";

describe("abortWith", () => {
  it("aborts the controllers that joined with the source's reason, not those that left", () => {
    const source = new AbortController();
    const stays = new AbortController();
    const leaves = new AbortController();
    abortWith(source.signal, stays);
    const leave = abortWith(source.signal, leaves);
    leave();
    const reason = new Error("closing");
    source.abort(reason);
    assert.equal(stays.signal.aborted, true);
    assert.equal(stays.signal.reason, reason);
    assert.equal(leaves.signal.aborted, false);
  });

  it("aborts at once when the source has aborted already", () => {
    const source = new AbortController();
    source.abort(new Error("gone"));
    const late = new AbortController();
    abortWith(source.signal, late);
    assert.equal(late.signal.aborted, true);
    assert.equal((late.signal.reason as Error).message, "gone");
  });

  it("keeps one listener on the source however many join", () => {
    const source = new AbortController();
    let added = 0;
    const add = source.signal.addEventListener.bind(source.signal);
    source.signal.addEventListener = ((...args: Parameters<AbortSignal["addEventListener"]>) => {
      added++;
      add(...args);
    }) as AbortSignal["addEventListener"];
    for (let index = 0; index < 100; index++) abortWith(source.signal, new AbortController())();
    assert.equal(added, 1);
  });
});
