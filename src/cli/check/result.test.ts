/** How `turnpike check` prints what it found: marks on a terminal, words in a pipe, JSON, no passwords. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { formatResults, redactUrl, resultsJson, type CheckResult } from "./result.ts";

const results: CheckResult[] = [
  { check: "database", name: "SQLite x", ok: true, detail: "SQLite x: readable" },
  { check: "upstream", name: "big#0", ok: false, detail: "http://h/v1: unreachable", facts: { kind: null } },
];

describe("the check report", () => {
  it("redacts a URL's password and query", () => {
    assert.equal(redactUrl("postgres://user:secret@db:5432/turnpike?sslmode=require"), "postgres://user:***@db:5432/turnpike?***");
    assert.equal(redactUrl("redis://cache:6379"), "redis://cache:6379");
    assert.equal(redactUrl("not a url"), "(invalid URL)");
  });

  it("marks each line ✓/✗ on a terminal and ok/FAIL otherwise", () => {
    assert.equal(formatResults(results, true), "✓ database: SQLite x: readable\n✗ upstream big#0: http://h/v1: unreachable\n");
    assert.equal(formatResults(results, false), "ok   database: SQLite x: readable\nFAIL upstream big#0: http://h/v1: unreachable\n");
  });

  it("prints JSON with the verdict and each check's facts", () => {
    assert.deepEqual(JSON.parse(resultsJson(results)), {
      ok: false,
      checks: [
        { check: "database", name: "SQLite x", ok: true, detail: "SQLite x: readable" },
        { check: "upstream", name: "big#0", ok: false, detail: "http://h/v1: unreachable", kind: null },
      ],
    });
  });
});
