import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { DatabaseTimeoutError, isDatabaseUnavailable } from "./errors.ts";

const withCode = (code: string, message = "x") => Object.assign(new Error(message), { code });

describe("isDatabaseUnavailable", () => {
  it("recognises an unreachable or departing database", () => {
    for (const error of [
      withCode("ECONNREFUSED"),
      withCode("ECONNRESET"),
      withCode("08006"),
      withCode("57P01", "terminating connection due to administrator command"),
      withCode("53300", "sorry, too many clients already"),
      withCode("57014", "canceling statement due to statement timeout"),
      withCode("25P03", "terminating connection due to idle-in-transaction timeout"),
      new DatabaseTimeoutError(2_000),
      new Error("Client has encountered a connection error and is not queryable"),
      new Error("Connection terminated unexpectedly"),
      new Error("timeout exceeded when trying to connect"),
      new AggregateError([withCode("ECONNREFUSED"), withCode("ECONNREFUSED")]),
      new Error("wrapped", { cause: withCode("ETIMEDOUT") }),
      Object.assign(new Error("database is locked"), { code: "ERR_SQLITE_ERROR", errcode: 5 }),
    ]) {
      assert.equal(isDatabaseUnavailable(error), true, String(error));
    }
  });

  it("leaves bugs and bad data as they are", () => {
    for (const error of [
      new Error("boom"),
      new TypeError("x is undefined"),
      withCode("23505", "duplicate key value violates unique constraint"),
      withCode("42P01", "relation does not exist"),
      Object.assign(new Error("UNIQUE constraint failed"), { code: "ERR_SQLITE_ERROR", errcode: 2067 }),
      "a string",
      null,
    ]) {
      assert.equal(isDatabaseUnavailable(error), false, String(error));
    }
  });
});
