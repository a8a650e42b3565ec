/** The messages between the JSON body parser and its worker. */
import type { ApiErrorType, ErrorCode } from "../../protocol/error-catalog.ts";

/** What the worker checks besides JSON syntax: nothing, or the request schema of this route (a key of `BODY_SCHEMAS`). */
export type BodyValidation = "none" | { route: string };

export type BodyJob = { id: number; bytes: Uint8Array; validate: BodyValidation };

/** An `ApiError`'s fields, as they cross the thread boundary. */
export type BodyError = { status: number; type: ApiErrorType; code: ErrorCode; param: string | null; message: string; /** What went wrong, for the log only (an internal error). */ detail?: string };

/** `validated`: the value is the route's request schema's output. */
export type BodyAnswer = { id: number; value: unknown; validated: boolean; error?: undefined } | { id: number; error: BodyError; value?: undefined };

/** The answer to a body that is not JSON, the same on either thread. */
export const INVALID_JSON_MESSAGE = "We could not parse the JSON body of your request. Send valid JSON with 'Content-Type: application/json'.";
