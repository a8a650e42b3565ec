import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { ERROR_CATALOG, ERROR_CODES, isErrorCode } from "./error-catalog.ts";
import { errorTableMarkdown, readErrorTable, withErrorTable } from "./error-table.ts";
import { ApiError, InvalidRequestError } from "./errors.ts";

const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");

test("the README's error table lists every catalog code with its status, and no other", () => {
  const rows = readErrorTable(readme);
  const listed = new Map(rows.map((row) => [row.code, row.status]));
  assert.equal(listed.size, rows.length, "a code is listed twice");
  for (const code of ERROR_CODES) {
    assert.ok(listed.has(code), `the README's error table lacks '${code}' (run node scripts/write-error-table.ts)`);
    assert.equal(listed.get(code), ERROR_CATALOG[code].status, `the README gives '${code}' another status than the catalog`);
  }
  for (const row of rows) assert.ok(isErrorCode(row.code), `the README lists '${row.code}', which is not in the catalog`);
});

test("the README's error table is the one the catalog writes", () => {
  assert.equal(withErrorTable(readme), readme, "README.md's error table is stale: run node scripts/write-error-table.ts");
  assert.ok(errorTableMarkdown().split("\n").length === ERROR_CODES.length + 2);
});

test("an error takes its status and type from the catalog", () => {
  const error = new ApiError("No such plan.", "plan_not_found", { param: "plan" });
  assert.equal(error.status, 404);
  assert.deepEqual(error.toBody(), { error: { message: "No such plan.", type: "invalid_request_error", param: "plan", code: "plan_not_found" } });
  assert.equal(new InvalidRequestError("bad", "n").status, 400);
});

test("every catalog entry is an error status with a one-line meaning", () => {
  for (const code of ERROR_CODES) {
    const entry = ERROR_CATALOG[code];
    assert.ok(entry.status >= 400 && entry.status < 600, code);
    assert.match(code, /^[a-z][a-z_]*$/);
    assert.ok(entry.meaning.length > 0 && !entry.meaning.includes("\n"), code);
  }
});
