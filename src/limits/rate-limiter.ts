/**
 * The one interface every rate-limit backend implements (memory for one node, Redis for many), and its types.
 * Limits are per minute (RPM, TPM) and enforced before generation; each backend runs the same token-bucket
 * arithmetic (see `token-bucket.ts`), so they agree on every decision.
 */

/** One limit to check and charge, e.g. `{ key: "key:abc:rpm", limit: 60, cost: 1 }`. */
export type LimitCheck = {
  /** Identifies the bucket: the backend adds its own prefix. Each key at most once per `consume` call. */
  key: string;
  /** Units allowed per minute (requests for RPM, tokens for TPM); a non-negative integer. */
  limit: number;
  /** Units this request takes (1 for RPM; prompt + max_tokens for TPM); a non-negative integer. */
  cost: number;
};

/** A bucket after a decision (after the charge when allowed, untouched when refused). */
export type LimitState = {
  key: string;
  /** Units per minute. */
  limit: number;
  /** Whole units that could be taken right now. */
  remaining: number;
  /** Milliseconds until the bucket has fully refilled to `limit` (0 when it is full). */
  resetMs: number;
};

export type LimitDecision = {
  /** True when every check fitted and all costs were recorded; false when none was. */
  allowed: boolean;
  /** One state per check, in the order of the checks. */
  states: LimitState[];
  /**
   * Milliseconds until the same request could be allowed (if nothing else is charged meanwhile); 0 when allowed;
   * -1 when it never can, because a cost exceeds its limit (see `tooLarge`).
   */
  retryAfterMs: number;
  /** Keys whose cost exceeds the limit itself: waiting cannot help (OpenAI's "Request too large"). Usually empty. */
  tooLarge: string[];
};

/** The logger a backend reports switches on; pino's `Logger` fits. */
export type LimiterLogger = {
  warn(details: object, message: string): void;
  info(details: object, message: string): void;
};

export interface RateLimiter {
  /**
   * Checks every limit and, only if all allow, records every cost, atomically: no partial consumption, and no other
   * caller (on any node sharing the backend) sees a state between the check and the charge.
   * Throws `RangeError` only for malformed checks (negative or fractional numbers, a key twice).
   */
  consume(checks: readonly LimitCheck[]): Promise<LimitDecision>;
  /**
   * Gives back part of a cost recorded earlier (e.g. TPM reserved as prompt + max_tokens, fewer tokens generated).
   * The bucket never goes below empty; a key with nothing recorded is left alone.
   * @param amount units to give back, a non-negative integer
   */
  refund(key: string, amount: number): Promise<void>;
  /** True while a shared backend is unreachable and answers come from a local fallback (for metrics and health). */
  readonly degraded: boolean;
  close(): Promise<void>;
}
