/**
 * Slows password guessing: failed sign-ins are counted per account (email) and per client
 * address in fixed windows; over the limit, sign-in answers 429 with `retry-after` until the
 * window ends, whatever the password. `MemorySignInThrottle` counts in this node's memory;
 * `RedisSignInThrottle` (redis-sign-in-throttle.ts) shares the counts between nodes.
 */

/** What the sign-in route needs; memory answers at once, Redis asynchronously. */
export interface SignInThrottle {
  /** Seconds to wait before trying again, or 0 when an attempt may go ahead. */
  retryAfterSeconds(email: string, address: string): number | Promise<number>;
  recordFailure(email: string, address: string): void | Promise<void>;
  /** A successful sign-in clears the account's count (the address keeps its own). */
  recordSuccess(email: string): void | Promise<void>;
  close?(): Promise<void>;
}

export type ThrottleLimits = {
  /** Failed attempts allowed per email in one window. */
  perAccount: number;
  /** Failed attempts allowed per client address in one window. */
  perAddress: number;
  windowMs: number;
};

export const DEFAULT_THROTTLE_LIMITS: ThrottleLimits = { perAccount: 5, perAddress: 20, windowMs: 15 * 60_000 };

/**
 * Sign-ups: every sign-up counts (successful or not), per client address only, so one address
 * cannot mass-create accounts. Used with the same throttle classes, with the email ignored.
 */
export const SIGN_UP_LIMITS: ThrottleLimits = { perAccount: Number.MAX_SAFE_INTEGER, perAddress: 20, windowMs: 60 * 60_000 };
/** The "account" every sign-up is counted under: the per-account limit is off for sign-ups. */
export const SIGN_UP_SUBJECT = "sign-up";

type Window = { failures: number; resetAt: number };

/** Most windows remembered; the oldest are forgotten first. */
const MAX_ENTRIES = 100_000;

export class MemorySignInThrottle implements SignInThrottle {
  readonly #limits: ThrottleLimits;
  readonly #clock: () => number;
  readonly #windows = new Map<string, Window>();

  constructor(limits: ThrottleLimits = DEFAULT_THROTTLE_LIMITS, clock: () => number = Date.now) {
    this.#limits = limits;
    this.#clock = clock;
  }

  /** Seconds to wait before trying again, or 0 when an attempt may go ahead. */
  retryAfterSeconds(email: string, address: string): number {
    const now = this.#clock();
    let waitMs = 0;
    for (const [key, limit] of this.#keys(email, address)) {
      const window = this.#live(key, now);
      if (window !== undefined && window.failures >= limit) waitMs = Math.max(waitMs, window.resetAt - now);
    }
    return waitMs === 0 ? 0 : Math.max(1, Math.ceil(waitMs / 1000));
  }

  recordFailure(email: string, address: string): void {
    const now = this.#clock();
    for (const [key] of this.#keys(email, address)) {
      const window = this.#live(key, now) ?? { failures: 0, resetAt: now + this.#limits.windowMs };
      window.failures += 1;
      this.#windows.delete(key);
      this.#windows.set(key, window);
    }
    while (this.#windows.size > MAX_ENTRIES) this.#windows.delete(this.#windows.keys().next().value!);
  }

  /** A successful sign-in clears the account's count (the address keeps its own). */
  recordSuccess(email: string): void {
    this.#windows.delete(`account:${email}`);
  }

  #keys(email: string, address: string): Array<[string, number]> {
    return [
      [`account:${email}`, this.#limits.perAccount],
      [`address:${address}`, this.#limits.perAddress],
    ];
  }

  #live(key: string, now: number): Window | undefined {
    const window = this.#windows.get(key);
    if (window === undefined) return undefined;
    if (window.resetAt <= now) {
      this.#windows.delete(key);
      return undefined;
    }
    return window;
  }
}
