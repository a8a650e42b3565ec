/**
 * The arithmetic both backends share: a token bucket per key (GCRA's equivalent) that holds `limit` units and refills
 * continuously at `limit` per minute. Exact: the bucket's level is kept as an integer in unit-milliseconds (units used
 * times `WINDOW_MS`), so it drains by exactly `limit` per millisecond and no rounding creeps in.
 *
 * The Redis backend runs the same steps in Lua (`redis.ts`); change both together.
 */
import type { LimitCheck, LimitDecision, LimitState } from "./rate-limiter.ts";

/** The window a limit is counted over: limits are per minute. */
export const WINDOW_MS = 60_000;

/** Largest limit whose level (limit × WINDOW_MS unit-ms) is still an exact integer in a double. */
export const MAX_LIMIT = Math.floor(Number.MAX_SAFE_INTEGER / WINDOW_MS);

/** Throws `RangeError` unless every check has a key (used once), and limit and cost are integers in range. */
export function validateChecks(checks: readonly LimitCheck[]): void {
  // A request has a few checks (its key's, its creators', its plan's): compared pairwise, no set
  // is built for them (this runs for every request).
  const seen = checks.length > 16 ? new Set<string>() : undefined;
  for (let index = 0; index < checks.length; index++) {
    const check = checks[index]!;
    if (typeof check.key !== "string" || check.key === "") throw new RangeError("rate limit check without a key");
    if (seen !== undefined ? seen.has(check.key) : checkedBefore(checks, index)) throw new RangeError(`rate limit key "${check.key}" is checked twice in one call`);
    seen?.add(check.key);
    assertUnits(check.limit, `limit of "${check.key}"`, MAX_LIMIT);
    assertUnits(check.cost, `cost of "${check.key}"`, MAX_LIMIT);
  }
}

/** Whether the check at `index` has the key of one before it. */
function checkedBefore(checks: readonly LimitCheck[], index: number): boolean {
  const key = checks[index]!.key;
  for (let before = 0; before < index; before++) if (checks[before]!.key === key) return true;
  return false;
}

/** Throws `RangeError` unless `amount` is a non-negative integer that fits the bucket arithmetic. */
export function validateRefund(key: string, amount: number): void {
  if (typeof key !== "string" || key === "") throw new RangeError("rate limit refund without a key");
  assertUnits(amount, `refund of "${key}"`, MAX_LIMIT);
}

function assertUnits(value: number, what: string, max: number): void {
  if (!Number.isInteger(value) || value < 0 || value > max) {
    throw new RangeError(`${what} must be an integer from 0 to ${max}, got ${value}`);
  }
}

/**
 * The level of a bucket `elapsedMs` after it was `level`, draining `limit` unit-ms per ms, never below empty.
 * @param level unit-ms (units × WINDOW_MS)
 */
export function drain(level: number, elapsedMs: number, limit: number): number {
  return Math.max(0, level - Math.max(0, elapsedMs) * limit);
}

/** Whether `check` fits a bucket at `level` (unit-ms). A cost of 0 always fits; a cost above the limit never does. */
export function fits(check: LimitCheck, level: number): boolean {
  if (check.cost === 0) return true;
  return check.cost <= check.limit && level + check.cost * WINDOW_MS <= check.limit * WINDOW_MS;
}

/**
 * The decision for `checks` given each bucket's current level (unit-ms, already drained to now), in check order.
 * Allowed only when every check fits; the states then show the levels after the charge.
 */
export function decide(checks: readonly LimitCheck[], levels: readonly number[]): LimitDecision {
  let allowed = true;
  const tooLarge: string[] = [];
  for (let index = 0; index < checks.length; index++) {
    const check = checks[index]!;
    if (!fits(check, levels[index]!)) allowed = false;
    if (check.cost > check.limit) tooLarge.push(check.key);
  }
  const states: LimitState[] = new Array(checks.length);
  for (let index = 0; index < checks.length; index++) {
    const check = checks[index]!;
    states[index] = describe(check.key, check.limit, allowed ? levels[index]! + check.cost * WINDOW_MS : levels[index]!);
  }
  if (allowed) return { allowed, states, retryAfterMs: 0, tooLarge };
  if (tooLarge.length > 0) return { allowed, states, retryAfterMs: -1, tooLarge };
  let retryAfterMs = 0;
  checks.forEach((check, index) => {
    if (fits(check, levels[index])) return;
    const excess = levels[index] + check.cost * WINDOW_MS - check.limit * WINDOW_MS;
    retryAfterMs = Math.max(retryAfterMs, Math.ceil(excess / check.limit));
  });
  return { allowed, states, retryAfterMs, tooLarge };
}

/** The public view of a bucket at `level` (unit-ms). */
export function describe(key: string, limit: number, level: number): LimitState {
  return {
    key,
    limit,
    remaining: Math.max(0, Math.floor((limit * WINDOW_MS - level) / WINDOW_MS)),
    resetMs: limit > 0 ? Math.ceil(level / limit) : 0,
  };
}
