/** Awaits a promise that must be refused with an `ApiError`, and gives the error for more checks. */
import assert from "node:assert/strict";
import { ApiError } from "../../src/protocol/errors.ts";

export async function refusal(promise: Promise<unknown>): Promise<ApiError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof ApiError, String(error));
    return error;
  }
  assert.fail("expected a refusal, but the promise resolved");
}
