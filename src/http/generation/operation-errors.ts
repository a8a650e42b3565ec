/**
 * The error codes every generation route (each wire dialect's create operation) can answer, for
 * their `/openapi.json` declarations: the shared admission's refusals (model, permission, rate
 * limits, quota, images), the engine's (context, parameters, a full queue, a model not ready) and
 * the upstream's. A dialect's declaration adds its own.
 */
import type { ErrorCode } from "../../protocol/errors.ts";

/**
 * What every metered model route (each generation dialect, and embeddings) can answer: the model
 * not found, not served at this endpoint, not allowed, not ready; the shared admission's limits
 * and quota; the engine's context and queue; the upstream's failures; a client that left.
 */
export const ADMISSION_ERROR_CODES: readonly ErrorCode[] = [
  "model_does_not_support_endpoint",
  "context_length_exceeded",
  "model_not_found",
  "model_not_allowed",
  "insufficient_quota",
  "rate_limit_exceeded",
  "engine_overloaded",
  "metering_behind",
  "model_not_ready",
  "upstream_error",
  "upstream_unavailable",
  "upstream_timeout",
  "client_closed_request",
];

export const GENERATION_ERROR_CODES: readonly ErrorCode[] = [
  "unsupported_parameter",
  "model_does_not_support_images",
  "invalid_image_url",
  "image_url_not_allowed",
  "image_lookup_busy",
  ...ADMISSION_ERROR_CODES,
];
