/**
 * Every operation of `/v1` and `/api` (and the service routes beside them) as the OpenAPI
 * document describes it: its request schema (the zod schema its route validates with), an
 * example request, how it is authenticated, the schema of its answer and the error codes it can
 * answer beyond those its authentication and body bring. `openapi.ts` turns this list into the
 * document; tests check that every route the server registers is here, that every example passes
 * its schema, and that real answers pass (and declare every field of) their response schemas.
 */
import type { z } from "zod";
import type { ErrorCode } from "./error-catalog.ts";
import { chatCompletionRequestSchema } from "./chat-completions/request.ts";
import { chatCompletionChunkSchema, chatCompletionSchema } from "./chat-completions/response.ts";
import { modelListSchema, modelObjectSchema } from "./models.ts";
import {
  accountObjectSchema,
  apiKeyObjectSchema,
  authSetupObjectSchema,
  checkoutSessionSchema,
  createdApiKeyObjectSchema,
  grantedAccountSchema,
  planListingSchema,
  recentRequestsResponseSchema,
  redeemResponseSchema,
  sessionObjectSchema,
  signedOutSchema,
  usageResponseSchema,
  webhookReplySchema,
} from "./account-api.ts";
import { historyPageSchema } from "./billing-history.ts";
import { adminAccountListSchema, adminApiKeyListSchema, adminCodeListSchema, adminPlanListSchema, apiKeyListSchema, createdCodeListSchema, planListSchema } from "./api-schemas.ts";
import { healthSchema, openApiDocumentSchema, publicSettingsSchema, readinessSchema } from "./service.ts";
import {
  checkoutRequestSchema,
  createCodesRequestSchema,
  createKeyRequestSchema,
  createPlanRequestSchema,
  editPlanRequestSchema,
  grantPlanRequestSchema,
  recentRequestsQuerySchema,
  redeemRequestSchema,
  signInRequestSchema,
  signUpRequestSchema,
  usageQuerySchema,
  usageExportQuerySchema,
  billingHistoryQuerySchema,
  keyListQuerySchema,
} from "./account-api-requests.ts";

/**
 * Who may call an operation:
 * - `none`: anyone (the service routes, sign-in and sign-up);
 * - `key`: an API key of any scope (`/v1`);
 * - `account`: a console session or a key with scope `account` or `admin`;
 * - `admin`: an admin's session, or an admin's key with scope `admin` (or an operator key).
 */
export type OperationAuth = "none" | "key" | "account" | "admin";

export type ApiOperation = {
  method: "get" | "post" | "patch" | "delete";
  /** OpenAPI's path form: `/api/keys/{id}`. */
  path: string;
  tag: "Chat" | "Models" | "Auth" | "Account" | "Keys" | "Usage" | "Billing" | "Admin" | "Service";
  summary: string;
  auth: OperationAuth;
  /** The JSON body's schema, when the route takes one. */
  body?: z.ZodType;
  /** The query string's schema (every value a string on the wire). */
  query?: z.ZodObject;
  /** An example request body (or query), valid against `body` (or `query`). */
  example?: Record<string, unknown>;
  /**
   * The answer when it works. `alsoAnswered`: other statuses that carry the same body (`/ready`'s
   * 503 while a model is not ready); at those statuses the body is this one, not an error.
   */
  success: { status: number; description: string; contentType?: string; alsoAnswered?: Array<{ status: number; description: string }> };
  /** The JSON body of that answer (its output side); absent for text answers (`contentType`). */
  response?: z.ZodType;
  /** For a route that can stream: the JSON `data` of each `text/event-stream` event before `[DONE]`. */
  streamEvent?: z.ZodType;
  /** Codes this operation answers itself, beyond those of its auth and its body. */
  errors: ErrorCode[];
};

/** Every path parameter in Turnpike's paths is an id. */
export const PATH_PARAMETER_DESCRIPTION = "The object's id.";

export const API_OPERATIONS: readonly ApiOperation[] = [
  {
    method: "post",
    path: "/v1/chat/completions",
    tag: "Chat",
    summary: "Create a chat completion, as JSON or as Server-Sent Events (`stream: true`).",
    auth: "key",
    body: chatCompletionRequestSchema,
    example: {
      model: "qwen2.5-0.5b-instruct",
      messages: [
        { role: "system", content: "You are terse." },
        { role: "user", content: "Say hello." },
      ],
      max_tokens: 32,
      temperature: 0.7,
      stream: true,
      stream_options: { include_usage: true },
    },
    success: { status: 200, description: "A `chat.completion` object, or with `stream` a `text/event-stream` of `chat.completion.chunk` events ending in `data: [DONE]`." }, response: chatCompletionSchema, streamEvent: chatCompletionChunkSchema,
    errors: [
      "unsupported_parameter",
      "model_does_not_support_images",
      "invalid_image_url",
      "image_url_not_allowed",
      "invalid_logit_bias",
      "context_length_exceeded",
      "model_not_found",
      "model_not_allowed",
      "insufficient_quota",
      "rate_limit_exceeded",
      "engine_overloaded",
      "metering_behind",
      "model_not_ready",
      "image_lookup_busy",
      "upstream_error",
      "upstream_unavailable",
      "upstream_timeout",
      "client_closed_request",
    ],
  },
  { method: "get", path: "/v1/models", tag: "Models", summary: "List the models on offer: context length, modalities, pricing, supported parameters, status.", auth: "key", success: { status: 200, description: "A list of `model` objects." }, response: modelListSchema, errors: [] },
  { method: "get", path: "/v1/models/{id}", tag: "Models", summary: "One model of the catalog.", auth: "key", success: { status: 200, description: "A `model` object." }, response: modelObjectSchema, errors: ["model_not_found"] },
  { method: "get", path: "/api/models", tag: "Models", summary: "The catalog of `/v1/models`, for a console session.", auth: "account", success: { status: 200, description: "A list of `model` objects." }, response: modelListSchema, errors: [] },

  { method: "post", path: "/api/auth/signup", tag: "Auth", summary: "Create an account and sign in (sets the session cookie). With the setup code, the first admin.", auth: "none", body: signUpRequestSchema, example: { email: "ada@example.com", password: "correct horse battery" }, success: { status: 201, description: "The session: `id`, `email`, `role`, `csrf_token`." }, response: sessionObjectSchema, errors: ["account_exists", "signup_closed", "invalid_setup_code", "too_many_sign_ups"] },
  { method: "post", path: "/api/auth/signin", tag: "Auth", summary: "Sign in with email and password (sets the session cookie).", auth: "none", body: signInRequestSchema, example: { email: "ada@example.com", password: "correct horse battery" }, success: { status: 200, description: "The session: `id`, `email`, `role`, `csrf_token`." }, response: sessionObjectSchema, errors: ["invalid_credentials", "account_disabled", "too_many_sign_in_attempts"] },
  { method: "post", path: "/api/auth/signout", tag: "Auth", summary: "End the session.", auth: "none", success: { status: 200, description: "`{signed_out: true}`." }, response: signedOutSchema, errors: ["csrf_failed"] },
  { method: "get", path: "/api/auth/session", tag: "Auth", summary: "Who is signed in, with the session's CSRF token.", auth: "none", success: { status: 200, description: "The session: `id`, `email`, `role`, `csrf_token`." }, response: sessionObjectSchema, errors: ["authentication_required", "account_disabled"] },
  { method: "get", path: "/api/auth/setup", tag: "Auth", summary: "Whether sign-up is open and whether the first admin is still to come.", auth: "none", success: { status: 200, description: "`{object: \"auth_setup\", signup, setup_required}`." }, response: authSetupObjectSchema, errors: [] },

  { method: "get", path: "/api/account", tag: "Account", summary: "The account: balance, plan, when the credit expires.", auth: "account", success: { status: 200, description: "An account object." }, response: accountObjectSchema, errors: ["account_required"] },

  { method: "get", path: "/api/keys", tag: "Keys", summary: "The account's keys, newest first (never the keys themselves); page with `after=<id>`.", auth: "account", query: keyListQuerySchema, example: { limit: "50" }, success: { status: 200, description: "`{object: \"list\", data, has_more}` of `api_key` objects." }, response: apiKeyListSchema, errors: ["invalid_cursor"] },
  { method: "post", path: "/api/keys", tag: "Keys", summary: "Create a key; the answer shows it this once. Created with a key, it is no looser than that key.", auth: "account", body: createKeyRequestSchema, example: { name: "laptop", scope: "inference", expires_at: 1_900_000_000, models: ["qwen2.5-0.5b-instruct"], spend_cap: 100_000, rpm: 60 }, success: { status: 201, description: "The `api_key` object with `key`." }, response: createdApiKeyObjectSchema, errors: ["admin_required", "key_looser_than_parent", "too_many_keys"] },
  { method: "delete", path: "/api/keys/{id}", tag: "Keys", summary: "Revoke one of the account's keys and the keys it created. A key below scope `admin` may revoke only itself and the keys created from it.", auth: "account", success: { status: 200, description: "The revoked `api_key` object." }, response: apiKeyObjectSchema, errors: ["key_not_found", "key_not_descendant"] },

  { method: "get", path: "/api/usage", tag: "Usage", summary: "Requests, tokens and cost summed per UTC day, model or key over `[from, to)`.", auth: "account", query: usageQuerySchema, example: { from: "2026-11-01", to: "1795000000", group_by: "model" }, success: { status: 200, description: "`{object: \"list\", group_by, from, to, data}`; times in seconds." }, response: usageResponseSchema, errors: ["admin_required", "admin_scope_required"] },
  { method: "get", path: "/api/usage/requests", tag: "Usage", summary: "The newest requests first; page with `after=<id>`.", auth: "account", query: recentRequestsQuerySchema, example: { limit: "20" }, success: { status: 200, description: "`{object: \"list\", data, has_more}`; `created` in seconds, `latency_ms` in milliseconds." }, response: recentRequestsResponseSchema, errors: ["admin_required", "admin_scope_required"] },

  { method: "get", path: "/api/usage/export", tag: "Usage", summary: "The requests in `[from, to)` as a CSV attachment, one row each, oldest first, streamed (at most 366 days).", auth: "account", query: usageExportQuerySchema, example: { from: "2026-11-01", to: "2026-12-01" }, success: { status: 200, description: "`text/csv`: a header row, then time (ISO 8601), request_id, account_id, key_name, key_prefix, model, tokens, cost_credits, latency_ms, status, finish_reason, stream.", contentType: "text/csv" }, errors: ["range_too_long", "admin_required", "admin_scope_required"] },

  { method: "get", path: "/api/billing/history", tag: "Billing", summary: "The account's ledger entries newest first (grants, purchases, codes, usage charges, expiries), with the balance after each; page with `before=<id>`.", auth: "account", query: billingHistoryQuerySchema, example: { limit: "20" }, success: { status: 200, description: "`{object: \"list\", data, has_more}`; `created` in seconds, `amount` and `balance_after` in credits." }, response: historyPageSchema, errors: ["account_required", "invalid_cursor", "account_not_found", "admin_required", "admin_scope_required"] },
  { method: "get", path: "/api/plans", tag: "Billing", summary: "The plans on offer.", auth: "account", success: { status: 200, description: "A list of `plan` objects." }, response: planListSchema, errors: [] },
  { method: "post", path: "/api/billing/redeem", tag: "Billing", summary: "Redeem a code: grants its plan once.", auth: "account", body: redeemRequestSchema, example: { code: "TP-ABCD-EFGH-JKLM" }, success: { status: 200, description: "`{granted, plan, balance, credit_expires}`." }, response: redeemResponseSchema, errors: ["account_required", "code_not_found", "code_already_redeemed", "plan_not_found", "plan_out_of_bounds", "balance_limit_exceeded"] },
  { method: "post", path: "/api/billing/checkout", tag: "Billing", summary: "A Stripe Checkout URL for a plan (the account's open session for the plan, when it has one).", auth: "account", body: checkoutRequestSchema, example: { plan: "starter" }, success: { status: 200, description: "`{id, url}` of the Checkout session." }, response: checkoutSessionSchema, errors: ["missing_required_parameter", "invalid_type", "account_required", "payments_not_configured", "plan_not_found", "plan_not_purchasable", "too_many_checkouts", "payment_provider_error"] },
  { method: "post", path: "/api/billing/stripe/webhook", tag: "Billing", summary: "Stripe's webhook: a paid Checkout session grants its plan; a refund or dispute takes its unspent credit back (signed with `Stripe-Signature`).", auth: "none", success: { status: 200, description: "`{received: true, granted?}`." }, response: webhookReplySchema, errors: ["payments_not_configured", "invalid_signature", "invalid_event", "balance_limit_exceeded"] },

  { method: "get", path: "/api/admin/accounts", tag: "Admin", summary: "Every account, with its balance, plan and active keys.", auth: "admin", success: { status: 200, description: "A list of accounts." }, response: adminAccountListSchema, errors: [] },
  { method: "post", path: "/api/admin/accounts/{id}/grant", tag: "Admin", summary: "Grant a plan to an account (offline sales).", auth: "admin", body: grantPlanRequestSchema, example: { plan: "starter" }, success: { status: 200, description: "The account, with `granted`." }, response: grantedAccountSchema, errors: ["account_not_found", "plan_out_of_bounds", "balance_limit_exceeded"] },
  { method: "post", path: "/api/admin/accounts/{id}/disable", tag: "Admin", summary: "Disable an account: its sessions end and its keys stop working.", auth: "admin", success: { status: 200, description: "The account." }, response: accountObjectSchema, errors: ["account_not_found", "cannot_disable_self"] },
  { method: "post", path: "/api/admin/accounts/{id}/enable", tag: "Admin", summary: "Enable a disabled account.", auth: "admin", success: { status: 200, description: "The account." }, response: accountObjectSchema, errors: ["account_not_found"] },
  { method: "get", path: "/api/admin/keys", tag: "Admin", summary: "Every key, with its owner's email, newest first; page with `after=<id>`.", auth: "admin", query: keyListQuerySchema, example: { limit: "50" }, success: { status: 200, description: "`{object: \"list\", data, has_more}` of `api_key` objects with `account_email`." }, response: adminApiKeyListSchema, errors: ["invalid_cursor"] },
  { method: "delete", path: "/api/admin/keys/{id}", tag: "Admin", summary: "Revoke any key.", auth: "admin", success: { status: 200, description: "The revoked `api_key` object." }, response: apiKeyObjectSchema, errors: ["key_not_found"] },
  { method: "get", path: "/api/admin/plans", tag: "Admin", summary: "Every plan, with where it came from (config or admin).", auth: "admin", success: { status: 200, description: "A list of `plan` objects with `origin`, `created`, `updated` (seconds)." }, response: adminPlanListSchema, errors: [] },
  { method: "post", path: "/api/admin/plans", tag: "Admin", summary: "Create a plan.", auth: "admin", body: createPlanRequestSchema, example: { id: "starter", name: "Starter", price: { amount: 500, currency: "usd" }, credit: 5_000_000, days: 30, rpm: 60, tpm: 100_000, models: null }, success: { status: 201, description: "The `plan` object." }, response: planListingSchema, errors: ["plan_exists"] },
  { method: "patch", path: "/api/admin/plans/{id}", tag: "Admin", summary: "Change some fields of a plan.", auth: "admin", body: editPlanRequestSchema, example: { credit: 6_000_000, rpm: 120 }, success: { status: 200, description: "The `plan` object." }, response: planListingSchema, errors: ["plan_not_found"] },
  { method: "get", path: "/api/admin/codes", tag: "Admin", summary: "Redemption codes by display prefix, with who redeemed them when.", auth: "admin", success: { status: 200, description: "A list of codes; `created` and `redeemed` in seconds." }, response: adminCodeListSchema, errors: [] },
  { method: "post", path: "/api/admin/codes", tag: "Admin", summary: "Make single-use redemption codes for a plan (shown once).", auth: "admin", body: createCodesRequestSchema, example: { plan: "starter", count: 10 }, success: { status: 201, description: "A list of `{code, plan}`." }, response: createdCodeListSchema, errors: ["plan_not_found", "plan_out_of_bounds"] },

  { method: "get", path: "/health", tag: "Service", summary: "The process is up.", auth: "none", success: { status: 200, description: "`{status: \"ok\"}`." }, response: healthSchema, errors: [] },
  { method: "get", path: "/ready", tag: "Service", summary: "Every model is loaded: 200, or 503 with each model's state.", auth: "none", success: { status: 200, description: "`{status: \"ready\", models}`: every model is ready.", alsoAnswered: [{ status: 503, description: "The same body while a model is not ready (`status: \"not_ready\"`) or the server is stopping (`\"shutting_down\"`)." }] }, response: readinessSchema, errors: [] },
  { method: "get", path: "/metrics", tag: "Service", summary: "Prometheus metrics: no API key; with `--metrics-token`, `Authorization: Bearer <token>`; with `--metrics-listen`, served on that address only.", auth: "none", success: { status: 200, description: "Prometheus text format.", contentType: "text/plain" }, errors: ["invalid_metrics_token"] },
  { method: "get", path: "/api/settings", tag: "Service", summary: "What the console needs of the server's settings, public: what a credit is worth (`credit_value`, null for credits only).", auth: "none", success: { status: 200, description: "`{object: \"settings\", credit_value: {currency, per_million_credits} | null}`." }, response: publicSettingsSchema, errors: [] },
  { method: "get", path: "/openapi.json", tag: "Service", summary: "This document.", auth: "none", success: { status: 200, description: "An OpenAPI 3.1 document of `/v1` and `/api`." }, response: openApiDocumentSchema, errors: [] },
];
