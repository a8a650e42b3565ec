/**
 * One upstream server of a pool: how many requests run on it, whether it is healthy, and what it
 * did (for metrics).
 *
 * Health is a small circuit breaker (Envoy's outlier detection, in small). Requests that fail for
 * the member's own reasons (`connect`, `timeout`, `status`, `protocol`) count; `failureThreshold`
 * of them in a row take the member out for a cooldown, doubled on each further failure up to
 * `maxCooldownMs`. A 429 or 503 that says `retry-after` takes it out at once for that long. When
 * the cooldown is over the member is `recovering`: it takes one trial request at a time and the
 * first success brings it back; a failure sends it back out for a longer cooldown. An active probe
 * is the stronger signal: its success brings a member back once the first cooldown (`cooldownMs`)
 * has passed since it went out, however long the backoff grew, unless the server asked for a
 * longer pause with `retry-after` (so a restarted server is back within a probe or two). `neutral` outcomes (the client left, a 4xx for the request itself) count for
 * nothing; an `ok` resets the count.
 */
import type { MemberOutcome, RefusalStatus, UpstreamMember } from "./pool-types.ts";
import { memberIdOf, normalizeBaseUrl } from "./upstream-url.ts";

export type FailureKind = "connect" | "timeout" | "status" | "protocol";

export type MemberHealthOptions = {
  /** Consecutive failures that take a healthy member out (default 3). */
  failureThreshold?: number;
  /** Milliseconds out after the first trip (default 2000); doubled per further failure. */
  cooldownMs?: number;
  /** The longest cooldown in milliseconds (default 30000). */
  maxCooldownMs?: number;
  /** The longest `retry-after` honoured, in milliseconds (default 300000): a server asking for an hour gets five minutes. */
  maxRetryAfterMs?: number;
  /** The clock (milliseconds); tests pass their own. */
  now?: () => number;
};

/** `healthy`: serves; `down`: cooling down, serves nothing; `recovering`: cooldown over, one trial request at a time. */
export type MemberHealth = "healthy" | "down" | "recovering";

/** What a member did, for metrics. */
export type MemberStats = {
  inFlight: number;
  /** Requests started on it since the pool was created. */
  requests: number;
  /** Failed requests by kind (neutral outcomes are not errors). */
  errors: Record<FailureKind, number>;
  /** Milliseconds from sending the request to the first token, of the latest `ok` that reported it. */
  lastTimeToFirstTokenMs: number | undefined;
  health: MemberHealth;
};

export class PoolMember implements UpstreamMember {
  /** Its name (see `UpstreamMember`); the URL without credentials when none was given. */
  readonly id: string;
  readonly url: string;
  readonly baseUrl: string;
  /** Requests it may run at once (`max_in_flight`). */
  readonly capacity: number;
  #inFlight = 0;
  #requests = 0;
  #errors: Record<FailureKind, number> = { connect: 0, timeout: 0, status: 0, protocol: 0 };
  #lastTimeToFirstTokenMs: number | undefined;
  /** Failures since the last success (requests and probes alike). */
  #consecutiveFailures = 0;
  #tripped = false;
  /** While tripped: when the cooldown ends (ms, on `now`'s clock). */
  #retryAt = 0;
  /** While tripped: when it went out. */
  #downSince = 0;
  /** The end of a pause the server asked for with `retry-after` (ms); 0: none. */
  #pausedUntil = 0;
  /** Trial requests running while recovering (at most one is let through). */
  #trials = 0;
  /** The 401/403 its last probe (or detection) got: it refused our credentials; cleared by a success. */
  #refusal: RefusalStatus | undefined;
  readonly #failureThreshold: number;
  readonly #cooldownMs: number;
  readonly #maxCooldownMs: number;
  readonly #maxRetryAfterMs: number;
  readonly #now: () => number;

  /**
   * @param url the server's base URL (`/v1` is added when missing)
   * @param capacity requests it may run at once
   * @param name what metrics and logs call it (default: its URL without credentials)
   */
  constructor(url: string, capacity: number, options: MemberHealthOptions = {}, name?: string) {
    this.baseUrl = normalizeBaseUrl(url);
    this.url = memberIdOf(url);
    this.id = name ?? this.url;
    this.capacity = capacity;
    this.#failureThreshold = options.failureThreshold ?? 3;
    this.#cooldownMs = options.cooldownMs ?? 2000;
    this.#maxCooldownMs = options.maxCooldownMs ?? 30_000;
    this.#maxRetryAfterMs = options.maxRetryAfterMs ?? 300_000;
    this.#now = options.now ?? Date.now;
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  /** The member's state now (a finished cooldown reads as `recovering`). */
  get health(): MemberHealth {
    if (!this.#tripped) return "healthy";
    return this.#now() < this.#retryAt ? "down" : "recovering";
  }

  /**
   * 401 or 403 while the member refuses our credentials (found by a probe or by detection; it is
   * out meanwhile, and probed where the key is needed until it accepts it); undefined otherwise.
   */
  get refusal(): RefusalStatus | undefined {
    return this.#refusal;
  }

  /** Milliseconds until the cooldown ends (0 when not cooling down). */
  get cooldownLeftMs(): number {
    return this.#tripped ? Math.max(0, this.#retryAt - this.#now()) : 0;
  }

  /** Whether the pool may send it a request now: healthy with room, or recovering with no trial running. */
  canTake(): boolean {
    const health = this.health;
    if (health === "healthy") return this.#inFlight < this.capacity;
    return health === "recovering" && this.#trials === 0 && this.#inFlight < this.capacity;
  }

  /** Whether it serves at all now (full or not): healthy, or recovering. */
  serves(): boolean {
    return this.health !== "down";
  }

  /** A request starts on it; returns whether it is a trial (sent while recovering). */
  begin(): boolean {
    const trial = this.health === "recovering";
    if (trial) this.#trials++;
    this.#inFlight++;
    this.#requests++;
    return trial;
  }

  /** A request that `begin` started ended so. */
  finish(outcome: MemberOutcome, trial: boolean): void {
    this.#inFlight = Math.max(0, this.#inFlight - 1);
    if (trial) this.#trials = Math.max(0, this.#trials - 1);
    if (outcome.kind === "neutral") return;
    if (outcome.kind === "ok") {
      if (outcome.timeToFirstTokenMs !== undefined) this.#lastTimeToFirstTokenMs = outcome.timeToFirstTokenMs;
      this.#succeeded();
      return;
    }
    this.#errors[outcome.kind]++;
    if (outcome.kind === "status" && (outcome.status === 401 || outcome.status === 403)) {
      // Our key refused on a request (revoked or changed at the upstream since the pool opened): the
      // member can serve nobody, so it is out at once and said to refuse, as a probe's refusal takes it.
      this.probed(false, outcome.status);
      return;
    }
    this.#failed(outcome.retryAfterMs);
  }

  /**
   * An active probe's answer. A failure takes the member out at once (the server said it cannot
   * serve); a success brings it back once the first cooldown has passed since it went out and no
   * `retry-after` pause is running.
   */
  probed(ok: boolean, refusal?: RefusalStatus): void {
    if (ok) {
      this.#refusal = undefined;
      // A healthy member's count of request failures stands: /health can say ok while requests time out.
      if (!this.#tripped) return;
      const now = this.#now();
      if (this.health === "recovering" || (now >= this.#pausedUntil && now - this.#downSince >= this.#cooldownMs)) this.#succeeded();
      return;
    }
    if (refusal !== undefined) this.#refusal = refusal;
    this.#consecutiveFailures = Math.max(this.#consecutiveFailures + 1, this.#failureThreshold);
    this.#trip(0, true);
  }

  stats(): MemberStats {
    return {
      inFlight: this.#inFlight,
      requests: this.#requests,
      errors: { ...this.#errors },
      lastTimeToFirstTokenMs: this.#lastTimeToFirstTokenMs,
      health: this.health,
    };
  }

  #succeeded(): void {
    this.#refusal = undefined;
    this.#consecutiveFailures = 0;
    this.#tripped = false;
    this.#retryAt = 0;
    this.#pausedUntil = 0;
  }

  #failed(retryAfterMs: number | undefined): void {
    this.#consecutiveFailures++;
    // A recovering member's trial failed, or a healthy one failed too often in a row.
    const backOff = this.#tripped || this.#consecutiveFailures >= this.#failureThreshold;
    // A server that asked for a pause is out at once, for at least that long.
    if (retryAfterMs !== undefined && retryAfterMs > 0) {
      const pause = Math.min(retryAfterMs, this.#maxRetryAfterMs);
      this.#pausedUntil = Math.max(this.#pausedUntil, this.#now() + pause);
      this.#trip(pause, backOff);
    }
    else if (backOff) this.#trip(0, true);
  }

  /** Out for `atLeastMs`, or for the backoff of the current failure count if `backOff` and that is longer. */
  #trip(atLeastMs: number, backOff: boolean): void {
    const doublings = Math.max(0, this.#consecutiveFailures - this.#failureThreshold);
    const backoff = backOff ? Math.min(this.#maxCooldownMs, this.#cooldownMs * 2 ** Math.min(doublings, 30)) : 0;
    if (!this.#tripped) this.#downSince = this.#now();
    this.#tripped = true;
    this.#retryAt = Math.max(this.#retryAt, this.#now() + Math.max(backoff, atLeastMs));
  }
}
