/**
 * OpenAI's rate-limit response headers, built from limiter states:
 * `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` and `retry-after`.
 */
import type { LimitState } from "./rate-limiter.ts";

export type RateLimitHeaderStates = {
  /** The most restrictive requests-per-minute state (see `mostRestrictive`); no request headers without it. */
  requests?: LimitState;
  /** The most restrictive tokens-per-minute state; no token headers without it. */
  tokens?: LimitState;
};

/**
 * The `x-ratelimit-*` headers OpenAI sends, for the states given, e.g.
 * `{ "x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-requests": "1s" }`.
 */
export function rateLimitHeaders(states: RateLimitHeaderStates): Record<string, string> {
  const headers: Record<string, string> = {};
  const { requests, tokens } = states;
  // Names written out, not built: this runs for every limited request.
  if (requests !== undefined) {
    headers["x-ratelimit-limit-requests"] = String(requests.limit);
    headers["x-ratelimit-remaining-requests"] = String(requests.remaining);
    headers["x-ratelimit-reset-requests"] = formatResetDuration(requests.resetMs);
  }
  if (tokens !== undefined) {
    headers["x-ratelimit-limit-tokens"] = String(tokens.limit);
    headers["x-ratelimit-remaining-tokens"] = String(tokens.remaining);
    headers["x-ratelimit-reset-tokens"] = formatResetDuration(tokens.resetMs);
  }
  return headers;
}

/**
 * The state that will refuse first: the fewest units remaining, then the longest until reset.
 * Undefined for an empty list.
 */
export function mostRestrictive(states: readonly LimitState[]): LimitState | undefined {
  let chosen: LimitState | undefined;
  for (const state of states) chosen = moreRestrictive(chosen, state);
  return chosen;
}

/** Of `chosen` (if any) and `state`, the one that will refuse first (`mostRestrictive`'s order; the earlier on a tie). */
export function moreRestrictive(chosen: LimitState | undefined, state: LimitState): LimitState {
  if (chosen === undefined || state.remaining < chosen.remaining || (state.remaining === chosen.remaining && state.resetMs > chosen.resetMs)) return state;
  return chosen;
}

/** The `retry-after` header's value: whole seconds, rounded up, at least 1. */
export function retryAfterSeconds(retryAfterMs: number): number {
  if (!Number.isFinite(retryAfterMs)) return 1;
  return Math.max(1, Math.ceil(retryAfterMs / 1000));
}

/**
 * A duration as OpenAI writes its reset headers (Go's `time.Duration` format): `0s`, `20ms`, `1s`, `1.5s`, `1m30s`,
 * `6m0s`, `1h0m0s`. Fractional milliseconds are rounded up.
 * @param durationMs milliseconds, negative taken as 0
 */
export function formatResetDuration(durationMs: number): string {
  const totalMs = Number.isFinite(durationMs) ? Math.max(0, Math.ceil(durationMs)) : 0;
  if (totalMs === 0) return "0s";
  if (totalMs < 1000) return `${totalMs}ms`;
  const hours = Math.floor(totalMs / 3_600_000);
  const minutes = Math.floor((totalMs % 3_600_000) / 60_000);
  const milliseconds = totalMs % 60_000;
  const wholeSeconds = Math.floor(milliseconds / 1000);
  const fraction = String(milliseconds % 1000).padStart(3, "0").replace(/0+$/, "");
  const seconds = fraction === "" ? `${wholeSeconds}s` : `${wholeSeconds}.${fraction}s`;
  if (hours > 0) return `${hours}h${minutes}m${seconds}`;
  if (minutes > 0) return `${minutes}m${seconds}`;
  return seconds;
}
