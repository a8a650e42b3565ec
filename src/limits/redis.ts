/**
 * The shared rate limiter: buckets live in Redis, so every Turnpike node using the same Redis enforces one limit.
 * Each `consume` is one Lua script over all its keys, timed by Redis's own clock, so checks and charges from many
 * nodes never interleave. When Redis cannot be reached the limiter answers from a local in-memory limiter (limits are
 * then per node), reports `degraded`, and returns to Redis once a probe gets through.
 *
 * Neither switch grants more than the limit. Every answer from Redis is mirrored in the local limiter, so when Redis
 * goes away each local bucket starts where Redis last left it (a key this node never saw starts empty). When Redis is
 * back, this node's buckets are merged into it before any request is charged there again, each key keeping the fuller
 * of the two: Redis may have lost its data (a restart without persistence) or not (a network cut).
 *
 * Notes: a command that timed out may still run on Redis later, so that request is charged twice (in Redis and
 * locally), which errs on the strict side. A consume's keys go to one script, so this needs a single Redis (or a
 * primary), not Redis Cluster, unless every key of a call shares a hash tag.
 */
import { Redis } from "ioredis";
import { MemoryRateLimiter } from "./memory.ts";
import type { LimitCheck, LimitDecision, LimiterLogger, RateLimiter } from "./rate-limiter.ts";
import { WINDOW_MS, decide, validateChecks, validateRefund } from "./token-bucket.ts";

export type RedisRateLimiterOptions = {
  /** `redis://[[user]:password@]host[:port][/db]` (or `rediss://`). */
  url: string;
  /** Put before every key (default `turnpike:rl:`). */
  keyPrefix?: string;
  /** How long a Redis command may take before Redis counts as unreachable, in ms (default 300). */
  commandTimeoutMs?: number;
  /** While degraded, how often to try Redis again, in ms (default 1000); a reconnection also triggers a try. */
  probeIntervalMs?: number;
  /** Told once when the limiter falls back to memory and once when it is back on Redis. */
  logger?: LimiterLogger;
  /** The limiter answering while Redis is unreachable (default: a new `MemoryRateLimiter`). */
  fallback?: MemoryRateLimiter;
};

/**
 * KEYS[i]: the bucket of check i. ARGV[1]: the window in ms; ARGV[2i], ARGV[2i+1]: limit and cost of check i.
 * A bucket is a hash { level (unit-ms), at (server ms), limit }. Same arithmetic as token-bucket.ts: drain each level
 * to now, charge every cost only if all fit, expire a bucket when it would have drained to empty.
 * Replies { allowed (1 or 0), level of bucket 1 before the charge, level of bucket 2, ... }.
 */
const CONSUME_SCRIPT = `
local window = tonumber(ARGV[1])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local levels = {}
local allowed = 1
for i = 1, #KEYS do
  local limit = tonumber(ARGV[2 * i])
  local cost = tonumber(ARGV[2 * i + 1])
  local level = 0
  local stored = redis.call('HMGET', KEYS[i], 'level', 'at')
  if stored[1] and stored[2] then
    level = math.max(0, tonumber(stored[1]) - math.max(0, now - tonumber(stored[2])) * limit)
  end
  levels[i] = level
  if cost > 0 and (cost > limit or level + cost * window > limit * window) then
    allowed = 0
  end
end
if allowed == 1 then
  for i = 1, #KEYS do
    local limit = tonumber(ARGV[2 * i])
    local cost = tonumber(ARGV[2 * i + 1])
    if cost > 0 then
      local level = levels[i] + cost * window
      redis.call('HSET', KEYS[i], 'level', level, 'at', now, 'limit', limit)
      redis.call('PEXPIRE', KEYS[i], math.ceil(level / limit))
    end
  end
end
local reply = { allowed }
for i = 1, #KEYS do
  reply[i + 1] = levels[i]
end
return reply
`;

/** KEYS[1]: the bucket. ARGV[1]: units to give back; ARGV[2]: the window in ms. Replies { new level, limit }. */
const REFUND_SCRIPT = `
local stored = redis.call('HMGET', KEYS[1], 'level', 'at', 'limit')
if not (stored[1] and stored[2] and stored[3]) then
  return { 0, 0 }
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local limit = tonumber(stored[3])
local level = math.max(0, tonumber(stored[1]) - math.max(0, now - tonumber(stored[2])) * limit)
level = math.max(0, level - tonumber(ARGV[1]) * tonumber(ARGV[2]))
if level == 0 or limit <= 0 then
  redis.call('DEL', KEYS[1])
  return { 0, limit }
end
redis.call('HSET', KEYS[1], 'level', level, 'at', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(level / limit))
return { level, limit }
`;

/**
 * KEYS[i]: a bucket. ARGV[2i-1], ARGV[2i]: the level (unit-ms, measured just now) and limit a node holds for it.
 * Raises each bucket to that level where Redis's own (drained to now) is lower; a fuller bucket is left as it is.
 * Replies how many buckets were raised.
 */
const MERGE_SCRIPT = `
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local raised = 0
for i = 1, #KEYS do
  local floor = tonumber(ARGV[2 * i - 1])
  local limit = tonumber(ARGV[2 * i])
  local stored = redis.call('HMGET', KEYS[i], 'level', 'at', 'limit')
  local level = 0
  if stored[1] and stored[2] and stored[3] then
    level = math.max(0, tonumber(stored[1]) - math.max(0, now - tonumber(stored[2])) * tonumber(stored[3]))
  end
  if floor > level and limit > 0 then
    redis.call('HSET', KEYS[i], 'level', floor, 'at', now, 'limit', limit)
    redis.call('PEXPIRE', KEYS[i], math.ceil(floor / limit))
    raised = raised + 1
  end
end
return raised
`;

/** Buckets per merge command when going back to Redis. */
const MERGE_BATCH = 500;

/** The commands `defineCommand` adds to the client (ioredis cannot type them). */
type ScriptCommands = {
  turnpikeRateLimitConsume(keyCount: number, ...keysThenArguments: (string | number)[]): Promise<unknown>;
  turnpikeRateLimitRefund(key: string, amount: number, windowMs: number): Promise<unknown>;
  turnpikeRateLimitMerge(keyCount: number, ...keysThenArguments: (string | number)[]): Promise<unknown>;
};

export class RedisRateLimiter implements RateLimiter {
  readonly #redis: Redis;
  readonly #scripts: ScriptCommands;
  readonly #keyPrefix: string;
  readonly #fallback: MemoryRateLimiter;
  readonly #logger: LimiterLogger | undefined;
  readonly #probeIntervalMs: number;
  /** Settles when the first connection attempt has succeeded, failed, or taken longer than the command timeout. */
  readonly #firstConnection: Promise<void>;
  #degraded = false;
  #probeTimer: ReturnType<typeof setInterval> | undefined;
  #probing = false;
  #closed = false;

  constructor(options: RedisRateLimiterOptions) {
    const commandTimeoutMs = options.commandTimeoutMs ?? 300;
    this.#keyPrefix = options.keyPrefix ?? "turnpike:rl:";
    this.#fallback = options.fallback ?? new MemoryRateLimiter();
    this.#logger = options.logger;
    this.#probeIntervalMs = options.probeIntervalMs ?? 1000;
    this.#redis = new Redis(options.url, {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      commandTimeout: commandTimeoutMs,
      connectTimeout: Math.max(1000, commandTimeoutMs),
      retryStrategy: (attempt) => Math.min(attempt * 200, 2000),
    });
    this.#redis.defineCommand("turnpikeRateLimitConsume", { lua: CONSUME_SCRIPT });
    this.#redis.defineCommand("turnpikeRateLimitRefund", { lua: REFUND_SCRIPT, numberOfKeys: 1 });
    this.#redis.defineCommand("turnpikeRateLimitMerge", { lua: MERGE_SCRIPT });
    this.#scripts = this.#redis as unknown as ScriptCommands;
    // Connection errors are seen through failed commands; without a listener ioredis prints each one.
    this.#redis.on("error", () => {});
    this.#redis.on("ready", () => void this.#probe());
    this.#firstConnection = firstConnection(this.#redis, commandTimeoutMs);
  }

  /** True while Redis is unreachable and limits are enforced by this node alone. */
  get degraded(): boolean {
    return this.#degraded;
  }

  async consume(checks: LimitCheck[]): Promise<LimitDecision> {
    validateChecks(checks);
    if (checks.length === 0) return decide([], []);
    await this.#firstConnection;
    if (this.#degraded || this.#closed) return this.#fallback.consumeNow(checks);
    const keys = checks.map((check) => this.#keyPrefix + check.key);
    const numbers = checks.flatMap((check) => [check.limit, check.cost]);
    try {
      const reply = await this.#scripts.turnpikeRateLimitConsume(checks.length, ...keys, WINDOW_MS, ...numbers);
      const { allowed, levels } = parseConsumeReply(reply, checks.length);
      const decision = decide(checks, levels);
      if (decision.allowed !== allowed) throw new Error("the rate-limit script and decide() disagree");
      // Mirrored, for the moment Redis goes away. An answer that comes back after the switch to memory (sent before
      // it) must not undo the charges made locally since: then only a fuller bucket is taken.
      const degraded = this.#degraded;
      checks.forEach((check, index) => this.#fallback.observe(check.key, levels[index]! + (allowed ? check.cost * WINDOW_MS : 0), check.limit, degraded));
      return decision;
    } catch (error) {
      this.#enterDegraded(error);
      return this.#fallback.consumeNow(checks);
    }
  }

  async refund(key: string, amount: number): Promise<void> {
    validateRefund(key, amount);
    if (amount === 0) return;
    await this.#firstConnection;
    if (this.#degraded || this.#closed) return this.#fallback.refundNow(key, amount);
    try {
      const reply = await this.#scripts.turnpikeRateLimitRefund(this.#keyPrefix + key, amount, WINDOW_MS);
      if (Array.isArray(reply) && typeof reply[0] === "number" && typeof reply[1] === "number") this.#fallback.observe(key, reply[0], reply[1], this.#degraded);
    } catch (error) {
      this.#enterDegraded(error);
      this.#fallback.refundNow(key, amount);
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#stopProbing();
    this.#redis.removeAllListeners("ready");
    if (this.#redis.status === "ready") {
      await this.#redis.quit().catch(() => this.#redis.disconnect());
    } else {
      this.#redis.disconnect();
    }
    await this.#fallback.close();
  }

  #enterDegraded(error: unknown): void {
    if (this.#degraded || this.#closed) return;
    this.#degraded = true;
    const message = "Redis unreachable: rate limits are enforced by this node alone until it is back";
    this.#logger?.warn({ err: error }, message);
    this.#probeTimer = setInterval(() => void this.#probe(), this.#probeIntervalMs);
    this.#probeTimer.unref();
  }

  /**
   * While degraded, runs the consume and merge scripts with no keys (which also loads them into Redis); when that
   * succeeds, goes back to Redis, merging this node's buckets into it first.
   */
  async #probe(): Promise<void> {
    if (!this.#degraded || this.#closed || this.#probing || this.#redis.status !== "ready") return;
    this.#probing = true;
    try {
      await this.#scripts.turnpikeRateLimitConsume(0, WINDOW_MS);
      await this.#scripts.turnpikeRateLimitMerge(0);
    } catch {
      // Still unreachable: the next interval or reconnection tries again.
      return;
    } finally {
      this.#probing = false;
    }
    if (!this.#degraded || this.#closed) return;
    // In one step with leaving degraded mode: the snapshot holds every local charge, and the merge commands are sent
    // before any consume that follows, on the same connection, so Redis runs them first.
    const buckets = this.#fallback.snapshot();
    this.#degraded = false;
    this.#stopProbing();
    this.#logger?.info({ merged_buckets: buckets.length }, "Redis reachable again: rate limits are shared across nodes again");
    const merges: Promise<unknown>[] = [];
    for (let start = 0; start < buckets.length; start += MERGE_BATCH) {
      const batch = buckets.slice(start, start + MERGE_BATCH);
      merges.push(this.#scripts.turnpikeRateLimitMerge(batch.length, ...batch.map((bucket) => this.#keyPrefix + bucket.key), ...batch.flatMap((bucket) => [bucket.level, bucket.limit])));
    }
    try {
      await Promise.all(merges);
    } catch (error) {
      // Gone again before the merge went through: the local buckets still hold it all.
      this.#enterDegraded(error);
    }
  }

  #stopProbing(): void {
    if (this.#probeTimer === undefined) return;
    clearInterval(this.#probeTimer);
    this.#probeTimer = undefined;
  }
}

/** Starts connecting; the promise settles (never rejects) on success, failure, or after `timeoutMs`. */
function firstConnection(redis: Redis, timeoutMs: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, timeoutMs);
    timer.unref();
    redis.connect().then(
      () => resolve(),
      () => resolve(),
    ).finally(() => clearTimeout(timer));
  });
}

/** The consume script's reply `{ allowed, level1, level2, ... }`, checked. */
function parseConsumeReply(reply: unknown, count: number): { allowed: boolean; levels: number[] } {
  if (!Array.isArray(reply) || reply.length !== count + 1 || !reply.every((item) => typeof item === "number")) {
    throw new Error(`unexpected reply from the rate-limit script: ${JSON.stringify(reply)}`);
  }
  const [allowed, ...levels] = reply as number[];
  return { allowed: allowed === 1, levels };
}
