/** Checks of refusals: an `ApiError` thrown in-process, or the OpenAI error body of an HTTP answer. */
import assert from "node:assert/strict";
import { ApiError } from "../../src/protocol/errors.ts";

/** Awaits a promise that must be refused with an `ApiError`, and gives the error for more checks. */
export async function refusal(promise: Promise<unknown>): Promise<ApiError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof ApiError, String(error));
    return error;
  }
  assert.fail("expected a refusal, but the promise resolved");
}

/**
 * Asserts an HTTP answer is the OpenAI error envelope with this status and `code` (and `param`,
 * when given): exactly `message`, `type`, `param` and `code`, the message a non-empty string.
 */
export function assertError(response: { status: number; body: any; text: string }, status: number, code: string, param?: string | null): void {
  const shown = response.text.slice(0, 500);
  assert.equal(response.status, status, shown);
  assert.ok(response.body?.error, `an error envelope: ${shown}`);
  const error = response.body.error;
  assert.deepEqual(Object.keys(error).sort(), ["code", "message", "param", "type"]);
  assert.equal(typeof error.message, "string");
  assert.ok(error.message.length > 0);
  assert.equal(typeof error.code, "string");
  assert.equal(error.code, code, shown);
  if (param !== undefined) assert.equal(error.param, param, shown);
}
