/**
 * The in-process rate limiter: exact for one node, and the Redis backend's fallback. A bucket whose level has drained
 * to empty is the same as no bucket, so idle keys are swept once a window and memory stays bounded by the keys used
 * in the last minute.
 *
 * As the Redis backend's fallback it also mirrors what Redis last answered (`observe`), so that when Redis goes away
 * the local buckets start where Redis left them, and hands its buckets back (`snapshot`) when Redis returns.
 */
import type { LimitCheck, LimitDecision, RateLimiter } from "./rate-limiter.ts";
import { WINDOW_MS, decide, drain, validateChecks, validateRefund } from "./token-bucket.ts";

type Bucket = {
  /** Units used, in unit-ms (units × WINDOW_MS); drains by `limit` per ms. */
  level: number;
  /** When `level` was measured, in clock ms. */
  at: number;
  /** The limit last charged against; refunds drain at this rate. */
  limit: number;
};

export type MemoryRateLimiterOptions = {
  /** The clock, in ms (default `Date.now`); tests pass a fake one to move through windows without sleeping. */
  now?: () => number;
};

export class MemoryRateLimiter implements RateLimiter {
  readonly #buckets = new Map<string, Bucket>();
  readonly #now: () => number;
  /** Clock ms of the last sweep of idle buckets. */
  #sweptAt: number;

  readonly degraded = false;

  constructor(options: MemoryRateLimiterOptions = {}) {
    this.#now = options.now ?? Date.now;
    this.#sweptAt = this.#clock();
  }

  /** Buckets held (idle ones included until the next sweep). */
  get size(): number {
    return this.#buckets.size;
  }

  consume(checks: readonly LimitCheck[]): Promise<LimitDecision> {
    try {
      return Promise.resolve(this.consumeNow(checks));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** `consume`, synchronously (the Redis backend's fallback answers through it). */
  consumeNow(checks: readonly LimitCheck[]): LimitDecision {
    validateChecks(checks);
    const now = this.#clock();
    this.#sweepIfDue(now);
    const buckets: (Bucket | undefined)[] = new Array(checks.length);
    const levels: number[] = new Array(checks.length);
    for (let index = 0; index < checks.length; index++) {
      const check = checks[index]!;
      const bucket = this.#buckets.get(check.key);
      buckets[index] = bucket;
      levels[index] = bucket === undefined ? 0 : drain(bucket.level, now - bucket.at, check.limit);
    }
    const decision = decide(checks, levels);
    if (!decision.allowed) return decision;
    for (let index = 0; index < checks.length; index++) {
      const check = checks[index]!;
      if (check.cost === 0) continue;
      const level = levels[index]! + check.cost * WINDOW_MS;
      const bucket = buckets[index];
      // A bucket is this limiter's own (never handed out): charged in place, not replaced.
      if (bucket === undefined) this.#buckets.set(check.key, { level, at: now, limit: check.limit });
      else {
        bucket.level = level;
        bucket.at = now;
        bucket.limit = check.limit;
      }
    }
    return decision;
  }

  refund(key: string, amount: number): Promise<void> {
    try {
      this.refundNow(key, amount);
      return Promise.resolve();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** `refund`, synchronously. */
  refundNow(key: string, amount: number): void {
    validateRefund(key, amount);
    const bucket = this.#buckets.get(key);
    if (bucket === undefined || amount === 0) return;
    const now = this.#clock();
    const level = Math.max(0, drain(bucket.level, now - bucket.at, bucket.limit) - amount * WINDOW_MS);
    if (level === 0) {
      this.#buckets.delete(key);
      return;
    }
    bucket.level = level;
    bucket.at = now;
  }

  /**
   * Sets a bucket to a level measured elsewhere just now (what Redis answered), replacing what this limiter had, or,
   * with `keepFuller`, only where it is fuller than what this limiter has.
   * @param level unit-ms (units × WINDOW_MS); 0 forgets the bucket (unless `keepFuller`)
   */
  observe(key: string, level: number, limit: number, keepFuller = false): void {
    const now = this.#clock();
    this.#sweepIfDue(now);
    const bucket = this.#buckets.get(key);
    if (keepFuller && bucket !== undefined && drain(bucket.level, now - bucket.at, bucket.limit) >= level) return;
    if (!(level > 0) || !(limit > 0)) {
      this.#buckets.delete(key);
      return;
    }
    this.#buckets.set(key, { level, at: now, limit });
  }

  /** Every bucket that is not empty, drained to now: `level` in unit-ms, `limit` the last one charged against. */
  snapshot(): Array<{ key: string; level: number; limit: number }> {
    const now = this.#clock();
    const buckets: Array<{ key: string; level: number; limit: number }> = [];
    for (const [key, bucket] of this.#buckets) {
      const level = drain(bucket.level, now - bucket.at, bucket.limit);
      if (level > 0) buckets.push({ key, level, limit: bucket.limit });
    }
    return buckets;
  }

  close(): Promise<void> {
    this.#buckets.clear();
    return Promise.resolve();
  }

  #clock(): number {
    return Math.floor(this.#now());
  }

  /** Drops the buckets that have drained to empty, at most once a window. */
  #sweepIfDue(now: number): void {
    if (now - this.#sweptAt < WINDOW_MS) return;
    this.#sweptAt = now;
    for (const [key, bucket] of this.#buckets) {
      if (drain(bucket.level, now - bucket.at, bucket.limit) === 0) this.#buckets.delete(key);
    }
  }
}
