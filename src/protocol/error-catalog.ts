/**
 * Every error `code` a client of Turnpike can see, with its HTTP status, its OpenAI `type` and
 * what it means. `ApiError` takes its status and type from here, so a code missing from this
 * list does not type-check; the README's error table and `GET /openapi.json` are checked against
 * (or generated from) it. Dependency-free: the console and the OpenAPI generator read it too.
 */

/** The `type` field of an OpenAI error body. */
export type ApiErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "permission_error"
  | "not_found_error"
  | "rate_limit_error"
  | "insufficient_quota"
  | "server_error"
  | "service_unavailable";

/** One entry of the catalog. */
export type ErrorCatalogEntry = {
  status: number;
  type: ApiErrorType;
  /** One line for the README and the API reference: when a client gets it. */
  meaning: string;
};

/** The catalog, grouped by status. Order is the README table's order. */
export const ERROR_CATALOG = {
  // 400
  invalid_request_error: { status: 400, type: "invalid_request_error", meaning: "a field is missing or has the wrong type or range (`param` names it, e.g. `messages[0].content`)" },
  invalid_json: { status: 400, type: "invalid_request_error", meaning: "the body is not JSON" },
  stored_response_too_large: { status: 400, type: "invalid_request_error", meaning: "a response to store (its input items and output together) is over 8 MiB: send it with `store: false`, or less input" },
  response_not_cancellable: { status: 400, type: "invalid_request_error", meaning: "`POST /v1/responses/{id}/cancel` of a response that is not a background one: only background responses can be cancelled" },
  json_too_deep: { status: 400, type: "invalid_request_error", meaning: "the body nests arrays and objects more than 128 levels deep (checked before it is parsed)" },
  invalid_url: { status: 400, type: "invalid_request_error", meaning: "the URL holds a malformed percent-encoding or a control character" },
  missing_required_parameter: { status: 400, type: "invalid_request_error", meaning: "a required field is absent (`param` names it)" },
  invalid_type: { status: 400, type: "invalid_request_error", meaning: "a field has the wrong JSON type (`param` names it)" },
  unsupported_parameter: { status: 400, type: "invalid_request_error", meaning: "a field this release does not serve yet, or a JSON Schema keyword the grammar cannot enforce (`param` is its path)" },
  model_does_not_support_endpoint: { status: 400, type: "invalid_request_error", meaning: "the model does not serve this endpoint (an embedding model asked for a completion, a chat model for embeddings): the message names the model and what it serves, as `/v1/models` lists them in `endpoints`" },
  model_does_not_support_images: { status: 400, type: "invalid_request_error", meaning: "an image content part sent to a text-only model (`param` names the part)" },
  invalid_image_url: { status: 400, type: "invalid_request_error", meaning: "an image part that is neither an http(s) URL nor a base64 data URL of a PNG, JPEG, GIF or WebP image" },
  image_url_not_allowed: { status: 400, type: "invalid_request_error", meaning: "an image URL the server's `--image-urls` policy refuses: a private, loopback, link-local or other non-public host (or one that does not resolve), plain http, or any URL where only data URLs are taken (`param` names the part's `url`)" },
  invalid_logit_bias: { status: 400, type: "invalid_request_error", meaning: "a `logit_bias` key that is not a token id of the model, or a bias outside −100..100" },
  context_length_exceeded: { status: 400, type: "invalid_request_error", meaning: "prompt + `max_tokens` do not fit the model's context (for embeddings: an input longer than the context, `param` naming it, without `truncate`)" },
  max_tokens_per_request: { status: 400, type: "invalid_request_error", meaning: "an embeddings request of more than 300,000 tokens, all inputs summed (OpenAI's limit): send fewer inputs per request" },
  account_required: { status: 400, type: "invalid_request_error", meaning: "an operator key called a route that needs an account (buying, redeeming, the account itself)" },
  cannot_disable_self: { status: 400, type: "invalid_request_error", meaning: "an admin tried to disable their own account" },
  plan_out_of_bounds: { status: 400, type: "invalid_request_error", meaning: "a plan saved before the money bounds holds values past them: edit it first" },
  plan_not_purchasable: { status: 400, type: "invalid_request_error", meaning: "the plan is free and cannot be bought through Stripe" },
  invalid_signature: { status: 400, type: "invalid_request_error", meaning: "a Stripe webhook's `Stripe-Signature` is missing, forged or too old" },
  invalid_event: { status: 400, type: "invalid_request_error", meaning: "a Stripe webhook body that is not a Stripe event" },
  range_too_long: { status: 400, type: "invalid_request_error", meaning: "a usage export spans more than 366 days: export a longer period in parts" },
  invalid_cursor: { status: 400, type: "invalid_request_error", meaning: "a paging cursor that names nothing in the list: the billing history's `before` (an entry of this account's history), the key lists' `after` (a key in that list)" },
  malformed_request: { status: 400, type: "invalid_request_error", meaning: "the request is not valid HTTP (answered before any route runs, then the connection closes)" },
  // 401
  invalid_api_key: { status: 401, type: "invalid_request_error", meaning: "no key, an unknown key, a revoked or expired one, or one created by a key that was revoked or has expired (the key is never echoed or logged)" },
  authentication_required: { status: 401, type: "invalid_request_error", meaning: "an `/api` call with neither a session nor a key" },
  invalid_metrics_token: { status: 401, type: "invalid_request_error", meaning: "`GET /metrics` without `Authorization: Bearer <token>` of `--metrics-token`, while one is set" },
  invalid_credentials: { status: 401, type: "invalid_request_error", meaning: "sign-in with a wrong email or password" },
  // 403
  model_not_allowed: { status: 403, type: "permission_error", meaning: "the key's allowed models or the account's plan exclude this model" },
  service_tier_not_allowed: { status: 403, type: "permission_error", meaning: "the account's plan does not offer the `service_tier` asked for (the message lists those it does)" },
  account_disabled: { status: 403, type: "permission_error", meaning: "the key's (or session's) account was disabled by an admin" },
  key_scope_exceeded: { status: 403, type: "permission_error", meaning: "an inference-only key called `/api`" },
  admin_required: { status: 403, type: "permission_error", meaning: "a user (not an admin) called an admin route" },
  admin_scope_required: { status: 403, type: "permission_error", meaning: "an admin's key without scope `admin` called an admin route" },
  key_looser_than_parent: { status: 403, type: "permission_error", meaning: "a key tried to create a key looser than itself (`param` names the field)" },
  key_not_descendant: { status: 403, type: "permission_error", meaning: "a key without scope `admin` tried to revoke a key that is neither itself nor one created from it; manage other keys from the console or with an `admin` key" },
  csrf_failed: { status: 403, type: "permission_error", meaning: "a state-changing session call from another origin or without the session's `x-csrf-token`" },
  signup_closed: { status: 403, type: "permission_error", meaning: "sign-up is closed on this server (`--signup closed`)" },
  invalid_setup_code: { status: 403, type: "permission_error", meaning: "the setup code for the first admin is wrong or spent" },
  // 404
  unknown_url: { status: 404, type: "invalid_request_error", meaning: "no such route (or not with this method)" },
  model_not_found: { status: 404, type: "invalid_request_error", meaning: "the model id is not in the catalog" },
  plan_not_found: { status: 404, type: "invalid_request_error", meaning: "no plan with this id" },
  code_not_found: { status: 404, type: "invalid_request_error", meaning: "the redemption code is not valid" },
  account_not_found: { status: 404, type: "not_found_error", meaning: "no account with this id" },
  key_not_found: { status: 404, type: "not_found_error", meaning: "no key with this id (or it belongs to another account)" },
  response_not_found: { status: 404, type: "invalid_request_error", meaning: "no stored response with this id for this account (never stored, `store: false`, deleted, expired, or another account's); `param` names where the id was given" },
  // 408
  request_timeout: { status: 408, type: "invalid_request_error", meaning: "the request's headers and body did not arrive within `--request-timeout`; the connection closes" },
  // 409
  account_exists: { status: 409, type: "invalid_request_error", meaning: "sign-up with an email that has an account already" },
  plan_exists: { status: 409, type: "invalid_request_error", meaning: "creating a plan whose id is taken" },
  code_already_redeemed: { status: 409, type: "invalid_request_error", meaning: "the redemption code was used already" },
  too_many_keys: { status: 409, type: "invalid_request_error", meaning: "the account holds as many working keys (neither revoked nor expired) as `--max-keys-per-account` allows: revoke some first" },
  balance_limit_exceeded: { status: 409, type: "invalid_request_error", meaning: "a grant would take the account past the most it may hold (10^15 credit units); refused whole" },
  // 413, 415, 421
  request_too_large: { status: 413, type: "invalid_request_error", meaning: "the body is over `--body-limit` (`/api/auth/*`: over 16 KiB; the rest of `/api`: over 256 KiB)" },
  unsupported_media_type: { status: 415, type: "invalid_request_error", meaning: "a body of a media type the server does not read (send `Content-Type: application/json`; a `text/plain` body is read and refused as not JSON, 400)" },
  host_not_allowed: { status: 421, type: "invalid_request_error", meaning: "the `Host` (or `X-Forwarded-Host`) is not one this server answers to" },
  // 429
  insufficient_quota: { status: 429, type: "insufficient_quota", meaning: "the account's credit (or the key's spend cap) does not cover the request's worst case" },
  rate_limit_exceeded: { status: 429, type: "rate_limit_error", meaning: "over the key's or the plan's requests or tokens per minute (`retry-after` says when), or a request larger than the whole token limit" },
  too_many_sign_in_attempts: { status: 429, type: "rate_limit_error", meaning: "too many failed sign-ins for the account or the address (`retry-after` says when)" },
  too_many_sign_ups: { status: 429, type: "rate_limit_error", meaning: "too many sign-ups from the address (`retry-after` says when)" },
  queue_share_exceeded: { status: 429, type: "rate_limit_error", meaning: "the account already has its most requests waiting for this model (`--queue-per-account`): one account cannot fill the queue (`retry-after: 1`)" },
  resource_unavailable: { status: 429, type: "rate_limit_error", meaning: "a `flex` request found no spare capacity within its wait limit (`--flex-max-wait`); retry later, or use the `default` tier (`retry-after` says when)" },
  too_many_checkouts: { status: 429, type: "rate_limit_error", meaning: "the account started too many Stripe checkouts in the last minute (an open one for the same plan is handed out again instead; `retry-after` says when)" },
  // 431, 499
  headers_too_large: { status: 431, type: "invalid_request_error", meaning: "the request's URL and headers are too large; the connection closes" },
  client_closed_request: { status: 499, type: "invalid_request_error", meaning: "not sent: the client left first. Logs and `/metrics` record such requests with this status, and generation stops" },
  // 500, 502, 503, 504
  internal_error: { status: 500, type: "server_error", meaning: "something broke on the server; the message says nothing of internals (the log has it)" },
  upstream_error: { status: 502, type: "server_error", meaning: "every upstream server tried failed (refused, reset, answered 5xx or garbage)" },
  payment_provider_error: { status: 502, type: "server_error", meaning: "Stripe refused or could not be reached while starting a checkout" },
  engine_overloaded: { status: 503, type: "service_unavailable", meaning: "the model's wait queue is full (`retry-after` says when to retry)" },
  model_not_ready: { status: 503, type: "service_unavailable", meaning: "the model is downloading, loading, or could not be loaded (the message says why and what to do)" },
  shutting_down: { status: 503, type: "service_unavailable", meaning: "the server is stopping" },
  metering_behind: { status: 503, type: "service_unavailable", meaning: "the node's usage writer (checkpoints and records in group commits) kept requests waiting past 2 s: it takes no new ones until it catches up (`retry-after: 1`)" },
  database_unavailable: { status: 503, type: "service_unavailable", meaning: "the database cannot be reached right now (`retry-after: 2`)" },
  server_busy: { status: 503, type: "service_unavailable", meaning: "more than 16 large bodies (over 256 KB) are waiting to be parsed (`retry-after: 1`)" },
  image_lookup_busy: { status: 503, type: "service_unavailable", meaning: "other requests' image URL host lookups (slow DNS) kept this request's from starting within 3 s (`retry-after: 1`; a data URL needs no lookup)" },
  upstream_unavailable: { status: 503, type: "service_unavailable", meaning: "the model's upstream servers refuse our credentials or none is healthy (an operator's problem)" },
  payments_not_configured: { status: 503, type: "service_unavailable", meaning: "Stripe keys are not set on this server" },
  upstream_timeout: { status: 504, type: "server_error", meaning: "the upstream servers did not answer (connect, first token, or between chunks) in time" },
} as const satisfies Record<string, ErrorCatalogEntry>;

/** Every code a client can see. */
export type ErrorCode = keyof typeof ERROR_CATALOG;

/** The codes answered with HTTP status `Status`. */
export type ErrorCodeWithStatus<Status extends number> = {
  [Code in ErrorCode]: (typeof ERROR_CATALOG)[Code]["status"] extends Status ? Code : never;
}[ErrorCode];

/** Every code, in the catalog's order. */
export const ERROR_CODES = Object.keys(ERROR_CATALOG) as ErrorCode[];

/** Whether `code` is in the catalog (for codes that arrive as plain strings, e.g. from the JSON worker). */
export function isErrorCode(code: string): code is ErrorCode {
  return Object.hasOwn(ERROR_CATALOG, code);
}
