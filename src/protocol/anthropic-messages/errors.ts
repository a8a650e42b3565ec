/**
 * Turnpike's errors in Anthropic's shape (`{"type":"error","error":{"type","message"},"request_id"}`),
 * mapped in one table from the catalog's codes, so that the Anthropic SDKs raise the class they
 * would raise against Anthropic (400 `BadRequestError`, 401 `AuthenticationError`, 403
 * `PermissionDeniedError`, 404 `NotFoundError`, 413, 429 `RateLimitError`, 529
 * `OverloadedError`, other 5xx `InternalServerError`). The same body is the stream's `error` event.
 */
import type { ApiError } from "../errors.ts";
import type { ErrorCode } from "../error-catalog.ts";
import type { AnthropicErrorBody, AnthropicErrorType } from "./message.ts";

/** An error as Anthropic answers it: the status, the error's type, the message, extra headers. */
export type AnthropicError = { status: number; type: AnthropicErrorType; message: string; headers: Record<string, string> };

/**
 * The codes whose Anthropic answer differs from what their status gives (see `typeOfStatus`):
 * - `insufficient_quota`: Anthropic answers a low credit balance with 400 `invalid_request_error`
 *   ("Your credit balance is too low…"), never retried, where OpenAI's shape says 429;
 * - a full queue, and the other "busy, retry in a moment" refusals: 529 `overloaded_error`
 *   (the SDKs retry it), with `retry-after`.
 */
const BY_CODE: Partial<Record<ErrorCode, { status: number; type: AnthropicErrorType; prefix?: string }>> = {
  insufficient_quota: { status: 400, type: "invalid_request_error", prefix: "Your credit balance is too low to access this model: " },
  engine_overloaded: { status: 529, type: "overloaded_error" },
  metering_behind: { status: 529, type: "overloaded_error" },
  server_busy: { status: 529, type: "overloaded_error" },
  image_lookup_busy: { status: 529, type: "overloaded_error" },
  request_too_large: { status: 413, type: "request_too_large" },
};

/** Anthropic's error type for a status (its reference: other 4xx are `invalid_request_error`). */
function typeOfStatus(status: number): AnthropicErrorType {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 504:
      return "timeout_error";
    case 529:
      return "overloaded_error";
  }
  return status >= 500 ? "api_error" : "invalid_request_error";
}

/**
 * An `ApiError` as Anthropic answers it (headers such as `retry-after` kept). Anthropic's body has
 * no `param`: the field is named at the head of the message (`messages[0].content[1]: …`), as
 * Anthropic's own messages do, unless the message quotes it already.
 */
export function anthropicErrorOf(error: ApiError): AnthropicError {
  const special = BY_CODE[error.code];
  const status = special?.status ?? error.status;
  const named = error.param !== null && !error.message.includes(error.param) ? `${error.param}: ${error.message}` : error.message;
  return { status, type: special?.type ?? typeOfStatus(status), message: `${special?.prefix ?? ""}${named}`, headers: error.headers };
}

/** The error body (and a stream's `error` event). */
export function anthropicErrorBody(error: AnthropicError, requestId: string | null): AnthropicErrorBody {
  return { type: "error", error: { type: error.type, message: error.message }, request_id: requestId };
}
