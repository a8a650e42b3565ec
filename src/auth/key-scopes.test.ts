/**
 * The rule that a key never creates a key looser than itself, field by field, and the order of
 * scopes. Pure functions: the database side (moving spend caps, parents revoked) is in api-keys.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { checkChildWithinParent, KeyLooserThanParentError, scopeCovers, toKeyScope, type KeyLimits, type RequestedLimits } from "./key-scopes.ts";

/** The key of issue 9's audit: one model, spend cap 10, 5 rpm, one hour left. */
const restricted: KeyLimits = { scope: "account", models: ["story"], expires: 3_600_000, spendCap: 10, spent: 0, rpm: 5, tpm: null };
const within: RequestedLimits = { scope: "account", models: ["story"], expires: 3_600_000, spendCap: 10, rpm: 5 };

function refusedOn(parent: KeyLimits, child: RequestedLimits): string {
  try {
    checkChildWithinParent(parent, child);
  } catch (error) {
    assert.ok(error instanceof KeyLooserThanParentError, String(error));
    assert.equal(error.status, 403);
    assert.equal(error.code, "key_looser_than_parent");
    return error.param!;
  }
  assert.fail("the child was accepted");
}

describe("key scopes", () => {
  it("orders scopes inference < account < admin", () => {
    assert.ok(scopeCovers("admin", "account") && scopeCovers("admin", "inference") && scopeCovers("account", "inference"));
    assert.ok(scopeCovers("account", "account"));
    assert.ok(!scopeCovers("account", "admin") && !scopeCovers("inference", "account"));
  });

  it("reads an unknown stored scope as the narrowest", () => {
    assert.equal(toKeyScope("root"), "inference");
    assert.equal(toKeyScope("admin"), "admin");
  });
});

describe("a key creating a key", () => {
  it("accepts a child within every limit of its parent, and anything from a parent without limits", () => {
    checkChildWithinParent(restricted, within);
    checkChildWithinParent(restricted, { scope: "inference", models: [], expires: 1_000, spendCap: 1, rpm: 1, tpm: 7 });
    checkChildWithinParent({ scope: "admin", models: null, expires: null, spendCap: null, spent: 0, rpm: null, tpm: null }, { scope: "admin" });
  });

  it("refuses the audit's child with no restrictions at all", () => {
    assert.equal(refusedOn(restricted, { scope: "account" }), "models");
  });

  it("refuses a wider scope", () => {
    assert.equal(refusedOn(restricted, { ...within, scope: "admin" }), "scope");
    assert.equal(refusedOn({ ...restricted, scope: "inference" }, within), "scope");
  });

  it("refuses models outside the parent's list, or no list where the parent has one", () => {
    assert.equal(refusedOn(restricted, { ...within, models: null }), "models");
    assert.equal(refusedOn(restricted, { ...within, models: undefined }), "models");
    assert.equal(refusedOn(restricted, { ...within, models: ["story", "other"] }), "models[1]");
  });

  it("refuses no expiry or a later one than the parent's", () => {
    assert.equal(refusedOn(restricted, { ...within, expires: null }), "expires_at");
    assert.equal(refusedOn(restricted, { ...within, expires: 3_600_001 }), "expires_at");
  });

  it("refuses rpm or tpm missing or above the parent's", () => {
    assert.equal(refusedOn(restricted, { ...within, rpm: undefined }), "rpm");
    assert.equal(refusedOn(restricted, { ...within, rpm: 6 }), "rpm");
    assert.equal(refusedOn({ ...restricted, tpm: 100 }, { ...within, tpm: 101 }), "tpm");
    assert.equal(refusedOn({ ...restricted, tpm: 100 }, within), "tpm");
  });

  it("refuses a spend cap missing or above what the parent has left", () => {
    assert.equal(refusedOn(restricted, { ...within, spendCap: null }), "spend_cap");
    assert.equal(refusedOn(restricted, { ...within, spendCap: 11 }), "spend_cap");
    assert.equal(refusedOn({ ...restricted, spent: 4 }, { ...within, spendCap: 7 }), "spend_cap");
    checkChildWithinParent({ ...restricted, spent: 4 }, { ...within, spendCap: 6 });
  });

  it("says in its message what the limit is", () => {
    assert.throws(() => checkChildWithinParent(restricted, { ...within, rpm: 50 }), /'rpm' may be at most 5/);
  });
});
