/**
 * Who may read `/metrics`: anyone who reaches it, or, with `--metrics-token`, a request carrying
 * `Authorization: Bearer <token>` (compared in constant time; anything else is 401
 * `invalid_metrics_token`).
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { ApiError } from "../../../protocol/errors.ts";

/** The error of a `/metrics` request without the token. */
export function invalidMetricsTokenError(): ApiError {
  return new ApiError("GET /metrics needs the metrics token: pass it as 'Authorization: Bearer <token>'.", "invalid_metrics_token", {
    headers: { "www-authenticate": 'Bearer realm="metrics"' },
  });
}

const digest = (text: string): Buffer => createHash("sha256").update(text, "utf8").digest();

/**
 * Whether an `authorization` header carries the token. The digests are compared, so the time
 * taken says nothing of the token, its length included.
 */
export function carriesMetricsToken(authorization: string | string[] | undefined, token: string): boolean {
  const header = Array.isArray(authorization) ? authorization[0] : authorization;
  const presented = /^Bearer\s+(\S+)\s*$/i.exec(header ?? "")?.[1] ?? "";
  return timingSafeEqual(digest(presented), digest(token)) && presented !== "";
}
