/**
 * Slows password guessing: sign-in attempts are counted per account (email) and per client
 * address in fixed windows; over the limit, sign-in answers 429 with `retry-after` until the
 * window ends, whatever the password.
 *
 * An attempt is *reserved* before its password is checked: the check against both limits and
 * the count that follows are one atomic step (one synchronous call in memory, one Lua script in
 * Redis). So N simultaneous attempts are never all let through because none had failed yet; at
 * most the limit's worth reach the password check. The outcome then decides: a failed attempt
 * stays counted; a successful one clears the account's count and gives the address its attempt
 * back; an attempt the server could not finish (a database error) is given back whole.
 *
 * `MemorySignInThrottle` counts in this node's memory; `RedisSignInThrottle`
 * (redis-sign-in-throttle.ts) shares the counts between nodes.
 */

/** The answer to a reservation: go ahead (the attempt is counted), or wait this long (nothing was counted). */
export type Attempt = { allowed: true } | { allowed: false; retryAfterSeconds: number };

/** What the sign-in and sign-up routes need; memory answers at once, Redis asynchronously. */
export interface SignInThrottle {
  /**
   * Counts one attempt against the account and the address in one atomic step, unless either is
   * at its limit already: then nothing is counted and the answer says how long to wait.
   */
  reserve(email: string, address: string): Attempt | Promise<Attempt>;
  /** The reserved attempt signed in: the account's count is cleared, the address's attempt given back. */
  succeeded(email: string, address: string): void | Promise<void>;
  /** The reserved attempt could not be decided (a server error): it is given back to both counts. */
  release(email: string, address: string): void | Promise<void>;
  close?(): Promise<void>;
}

export type ThrottleLimits = {
  /** Attempts allowed per email in one window (successful ones given back). */
  perAccount: number;
  /** Attempts allowed per client address in one window (successful ones given back). */
  perAddress: number;
  windowMs: number;
};

export const DEFAULT_THROTTLE_LIMITS: ThrottleLimits = { perAccount: 5, perAddress: 20, windowMs: 15 * 60_000 };

/**
 * Sign-ups: every sign-up counts (successful or not), per client address only, so one address
 * cannot mass-create accounts. Used with the same throttle classes, with the email ignored:
 * sign-ups reserve and never give back.
 */
export const SIGN_UP_LIMITS: ThrottleLimits = { perAccount: Number.MAX_SAFE_INTEGER, perAddress: 20, windowMs: 60 * 60_000 };
/** The "account" every sign-up is counted under: the per-account limit is off for sign-ups. */
export const SIGN_UP_SUBJECT = "sign-up";

/** Seconds to announce in `retry-after` for a wait in milliseconds (at least 1). */
export function waitSeconds(waitMs: number): number {
  return Math.max(1, Math.ceil(waitMs / 1000));
}

type Window = { attempts: number; resetAt: number };

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

  /** Synchronous, hence atomic: no other attempt can be counted between the check and the count. */
  reserve(email: string, address: string): Attempt {
    const now = this.#clock();
    const keys = this.#keys(email, address);
    let waitMs = 0;
    for (const [key, limit] of keys) {
      const window = this.#live(key, now);
      if (window !== undefined && window.attempts >= limit) waitMs = Math.max(waitMs, window.resetAt - now);
    }
    if (waitMs > 0) return { allowed: false, retryAfterSeconds: waitSeconds(waitMs) };
    for (const [key] of keys) {
      const window = this.#live(key, now) ?? { attempts: 0, resetAt: now + this.#limits.windowMs };
      window.attempts += 1;
      this.#windows.delete(key);
      this.#windows.set(key, window);
    }
    while (this.#windows.size > MAX_ENTRIES) this.#windows.delete(this.#windows.keys().next().value!);
    return { allowed: true };
  }

  succeeded(email: string, address: string): void {
    const [[accountKey], [addressKey]] = this.#keys(email, address);
    this.#windows.delete(accountKey);
    this.#giveBack(addressKey);
  }

  release(email: string, address: string): void {
    for (const [key] of this.#keys(email, address)) this.#giveBack(key);
  }

  #giveBack(key: string): void {
    const window = this.#live(key, this.#clock());
    if (window !== undefined && window.attempts > 0) window.attempts -= 1;
  }

  #keys(email: string, address: string): [[string, number], [string, number]] {
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
