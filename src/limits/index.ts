/**
 * Rate limits (requests and tokens per minute, per API key and per account), checked before generation.
 * `createRateLimiter` picks the backend from config; the rest of the service sees only `RateLimiter`.
 */
import { MemoryRateLimiter } from "./memory.ts";
import type { LimiterLogger, RateLimiter } from "./rate-limiter.ts";
import { RedisRateLimiter } from "./redis.ts";

export type { LimitCheck, LimitDecision, LimitState, LimiterLogger, RateLimiter } from "./rate-limiter.ts";
export { WINDOW_MS } from "./token-bucket.ts";
export { formatResetDuration, mostRestrictive, rateLimitHeaders, retryAfterSeconds } from "./headers.ts";
export type { RateLimitHeaderStates } from "./headers.ts";

export type RateLimiterSettings = {
  /** Share limits across nodes through this Redis (`redis://host:6379/0`); without it, limits are per node. */
  redisUrl?: string;
  /** Put before every Redis key (default `turnpike:rl:`). */
  keyPrefix?: string;
  /** Told when the Redis backend falls back to memory and when it recovers (pino's `Logger` fits). */
  logger?: LimiterLogger;
};

/** The rate limiter the settings call for: Redis when a URL is given, otherwise in memory. */
export function createRateLimiter(settings: RateLimiterSettings = {}): RateLimiter {
  if (settings.redisUrl === undefined || settings.redisUrl === "") return new MemoryRateLimiter();
  return new RedisRateLimiter({ url: settings.redisUrl, keyPrefix: settings.keyPrefix, logger: settings.logger });
}
