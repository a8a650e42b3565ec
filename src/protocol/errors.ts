/**
 * Typed errors of the OpenAI wire format. Anything in Turnpike that must end as an error
 * response throws one of these; `http/errors.ts` turns them into the OpenAI error body in one place.
 */

import { ERROR_CATALOG, type ApiErrorType, type ErrorCode, type ErrorCodeWithStatus } from "./error-catalog.ts";

export type { ApiErrorType, ErrorCode };

export type ApiErrorOptions = {
  param?: string | null;
  /** Extra response headers, e.g. `retry-after`. */
  headers?: Record<string, string>;
  cause?: unknown;
};

/**
 * The base class: an error whose message is safe to show to the API client. Its status and
 * type come from the error catalog entry of its `code`.
 */
export class ApiError extends Error {
  readonly status: number;
  readonly type: ApiErrorType;
  readonly code: ErrorCode;
  readonly param: string | null;
  readonly headers: Record<string, string>;

  constructor(message: string, code: ErrorCode, options: ApiErrorOptions = {}) {
    super(message, { cause: options.cause });
    this.name = "ApiError";
    const entry = ERROR_CATALOG[code];
    this.status = entry.status;
    this.type = entry.type;
    this.code = code;
    this.param = options.param ?? null;
    this.headers = options.headers ?? {};
  }

  /** The OpenAI error body: `{"error":{"message","type","param","code"}}`. */
  toBody(): ErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export type ErrorBody = {
  error: { message: string; type: ApiErrorType; param: string | null; code: ErrorCode };
};

/** 400: the request is malformed or a field is out of range. */
export class InvalidRequestError extends ApiError {
  constructor(message: string, param: string | null = null, code: ErrorCodeWithStatus<400> = "invalid_request_error") {
    super(message, code, { param });
  }
}

/** 400: the request uses a field this model or this release does not support. */
export class UnsupportedParameterError extends ApiError {
  constructor(message: string, param: string) {
    super(message, "unsupported_parameter", { param });
  }
}

/** A request to an endpoint its model does not serve (400 `model_does_not_support_endpoint`, `param` `model`). */
export class EndpointNotServedError extends ApiError {
  constructor(message: string) {
    super(message, "model_does_not_support_endpoint", { param: "model" });
  }
}

/** 400: prompt + requested completion do not fit the model's context window (or an embeddings input does not). */
export class ContextLengthExceededError extends ApiError {
  /** `param`: what is too long (`messages`; a text completion's `prompt`; an embeddings input: `input[3]`). */
  constructor(message: string, param = "messages") {
    super(message, "context_length_exceeded", { param });
  }
}

/** 400: an embeddings request over the tokens one request may hold, all inputs summed (OpenAI's `max_tokens_per_request`). */
export class TooManyTokensError extends ApiError {
  constructor(requested: number, limit: number, exact: boolean) {
    super(`Requested ${exact ? "" : "at least "}${requested} tokens, max ${limit} tokens per request. Send fewer inputs per request.`, "max_tokens_per_request", { param: "input" });
  }
}

/** 401: no key, an unknown key, or a revoked one. Never echoes the presented key. */
export class InvalidApiKeyError extends ApiError {
  constructor(message = "Invalid API key. Pass a valid key as 'Authorization: Bearer <key>'.") {
    super(message, "invalid_api_key");
  }
}

/** 429: the account's (or the key's) credit does not cover the request's worst case. */
export class InsufficientQuotaError extends ApiError {
  constructor(message = "You exceeded your current quota: the account's credit does not cover this request. Buy a plan or redeem a code.") {
    super(message, "insufficient_quota");
  }
}

/** 429: over the requests-per-minute or tokens-per-minute limit. */
export class RateLimitExceededError extends ApiError {
  constructor(message: string, retryAfterSeconds: number, headers: Record<string, string> = {}) {
    super(message, "rate_limit_exceeded", { headers: { ...headers, "retry-after": String(retryAfterSeconds) } });
  }
}

/** 403: the key or the account's plan may not use this model. */
export class ModelNotAllowedError extends ApiError {
  constructor(modelId: string, why: string) {
    super(`This API key may not use the model '${modelId}': ${why}.`, "model_not_allowed", { param: "model" });
  }
}

/** 404: the model id is not in the catalog. */
export class ModelNotFoundError extends ApiError {
  constructor(modelId: string) {
    super(`The model '${modelId}' does not exist. GET /v1/models lists the models on offer.`, "model_not_found", { param: "model" });
  }
}

/** 404: no route here. */
export class RouteNotFoundError extends ApiError {
  constructor(method: string, url: string) {
    super(`Unknown request URL: ${method} ${url}.`, "unknown_url");
  }
}

/** 503: the model exists but cannot serve now (still downloading, failed to load). */
export class ModelNotReadyError extends ApiError {
  constructor(message: string, retryAfterSeconds?: number) {
    super(message, "model_not_ready", { headers: retryAfterSeconds === undefined ? {} : { "retry-after": String(retryAfterSeconds) } });
  }
}

/** 403: the plan does not offer the service tier asked for. */
export class ServiceTierNotAllowedError extends ApiError {
  constructor(message: string) {
    super(message, "service_tier_not_allowed", { param: "service_tier" });
  }
}

/** 429: the account already has its most requests waiting for the model (one account cannot fill the queue). */
export class QueueShareExceededError extends ApiError {
  constructor(perAccount: number) {
    super(
      `Too many requests waiting: this account already has ${perAccount} requests waiting for this model, the most one account may. Wait for some to finish.`,
      "queue_share_exceeded",
      { headers: { "retry-after": "1" } },
    );
  }
}

/** 429: a `flex` request found no spare capacity within its wait limit (OpenAI's "Resource Unavailable"). */
export class ResourceUnavailableError extends ApiError {
  constructor(tier: string, waitedMs: number, retryAfterSeconds = 5) {
    super(
      `No capacity for the '${tier}' service tier: the request could not start within ${Math.round(waitedMs / 1000)} s. Retry later, or send it with service_tier 'default'.`,
      "resource_unavailable",
      { param: "service_tier", headers: { "retry-after": String(retryAfterSeconds) } },
    );
  }
}

/** 503: the engine's wait queue is full. */
export class EngineOverloadedError extends ApiError {
  constructor(message: string, retryAfterSeconds = 1) {
    super(message, "engine_overloaded", { headers: { "retry-after": String(retryAfterSeconds) } });
  }
}

/** 503: the database cannot be reached right now (an outage, a restart, too many connections). */
export class DatabaseUnavailableError extends ApiError {
  constructor() {
    super("The service's database is unavailable at the moment. Retry shortly.", "database_unavailable", { headers: { "retry-after": "2" } });
  }
}

/** 503: this node cannot record usage as fast as it serves it (its group commits keep requests waiting): it takes no new ones for a moment. */
export class MeteringBehindError extends ApiError {
  constructor() {
    super("This node cannot record usage as fast as it serves it right now. Retry in a moment or on another node.", "metering_behind", { headers: { "retry-after": "1" } });
  }
}

/** 503: the server is shutting down and takes no new work. */
export class ShuttingDownError extends ApiError {
  constructor() {
    super("The server is shutting down. Retry on another node or in a moment.", "shutting_down", { headers: { "retry-after": "5" } });
  }
}

/**
 * 499 (nginx's "client closed request"): the client went away before the answer. Nobody reads
 * it; it keeps the logs and metrics honest about why the request ended.
 */
export class ClientClosedRequestError extends ApiError {
  constructor() {
    super("The client closed the connection before the response was sent.", "client_closed_request");
  }
}

/** 500: something broke on our side. The message never carries internals. */
export class InternalServerError extends ApiError {
  constructor(message = "The server had an error while processing your request.", cause?: unknown) {
    super(message, "internal_error", { cause });
  }
}

/**
 * 503: the model's upstream servers refuse to serve us (our key is wrong or lacks access) or none
 * is healthy: an operator's problem, logged loudly; the client may retry later.
 */
export class UpstreamUnavailableError extends ApiError {
  constructor(message = "The model's upstream servers are unavailable at the moment. Retry shortly.", retryAfterSeconds = 5) {
    super(message, "upstream_unavailable", { headers: { "retry-after": String(retryAfterSeconds) } });
  }
}

/** 502: every upstream server tried failed (refused, reset, answered 5xx or garbage) before any content was sent. */
export class UpstreamError extends ApiError {
  constructor(message = "The model's upstream servers failed to answer. Retry shortly.") {
    super(message, "upstream_error");
  }
}

/** 504: the upstream servers tried did not answer (connect, first token, or between chunks) in time. */
export class UpstreamTimeoutError extends ApiError {
  constructor(message = "The model's upstream servers did not answer in time. Retry shortly.") {
    super(message, "upstream_timeout");
  }
}
