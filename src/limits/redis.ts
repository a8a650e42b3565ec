/**
 * The shared rate limiter: buckets live in Redis, so every Turnpike node using the same Redis enforces one limit.
 * Each `consume` is one Lua script over all its keys, timed by Redis's own clock, so checks and charges from many
 * nodes never interleave. When Redis is unreachable the limiter answers from a local in-memory limiter (limits are
 * then per node), reports `degraded`, and returns to Redis once it is reachable again.
 *
 * Reachable or not is decided by a health probe with hysteresis (see `redis-health.ts`: a PING a second, 3 failures
 * in a row to switch to local limits, 3 successes in a row to switch back), not by the commands of the moment: under
 * CPU pressure a command may take a second while Redis is healthy, and switching then would let every node grant the
 * whole limit. A slow command is waited for (up to 2 s); one that fails or takes longer is answered from the local
 * buckets for that one request, without switching.
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
import { MemoryRateLimiter } from "./memory.ts";
import type { LimitCheck, LimitDecision, LimiterLogger, RateLimiter } from "./rate-limiter.ts";
import type { RedisHealthSettings } from "./redis-health.ts";
import { RedisLink } from "./redis-link.ts";
import { WINDOW_MS, decide, validateChecks, validateRefund } from "./token-bucket.ts";

export type RedisRateLimiterOptions = {
  /** `redis://[[user]:password@]host[:port][/db]` (or `rediss://`). */
  url: string;
  /** Put before every key (default `turnpike:rl:`). */
  keyPrefix?: string;
  /**
   * How long a request waits for its Redis command, in ms (default `REDIS_COMMAND_TIMEOUT_MS`, 2000); a slower or
   * failed command is answered locally for that request alone, it does not switch the limiter to local limits.
   */
  commandTimeoutMs?: number;
  /** The health probe that decides when to switch (defaults in redis-health.ts). */
  health?: Partial<RedisHealthSettings>;
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
  readonly #link: RedisLink;
  readonly #scripts: ScriptCommands;
  readonly #keyPrefix: string;
  readonly #fallback: MemoryRateLimiter;
  readonly #logger: LimiterLogger | undefined;
  #degraded = false;
  #closed = false;

  constructor(options: RedisRateLimiterOptions) {
    this.#keyPrefix = options.keyPrefix ?? "turnpike:rl:";
    this.#fallback = options.fallback ?? new MemoryRateLimiter();
    this.#logger = options.logger;
    this.#link = new RedisLink({
      url: options.url,
      commandTimeoutMs: options.commandTimeoutMs,
      health: options.health,
      onChange: (reachable, error) => (reachable ? this.#returnToRedis() : this.#enterDegraded(error)),
    });
    this.#link.redis.defineCommand("turnpikeRateLimitConsume", { lua: CONSUME_SCRIPT });
    this.#link.redis.defineCommand("turnpikeRateLimitRefund", { lua: REFUND_SCRIPT, numberOfKeys: 1 });
    this.#link.redis.defineCommand("turnpikeRateLimitMerge", { lua: MERGE_SCRIPT });
    this.#scripts = this.#link.redis as unknown as ScriptCommands;
  }

  /** True while Redis is unreachable and limits are enforced by this node alone. */
  get degraded(): boolean {
    return this.#degraded;
  }

  async consume(checks: readonly LimitCheck[]): Promise<LimitDecision> {
    validateChecks(checks);
    if (checks.length === 0) return decide([], []);
    await this.#link.ready;
    if (this.#degraded || this.#closed) return this.#fallback.consumeNow(checks);
    const keys = checks.map((check) => this.#keyPrefix + check.key);
    const numbers = checks.flatMap((check) => [check.limit, check.cost]);
    let reply: unknown;
    try {
      reply = await this.#link.command(() => this.#scripts.turnpikeRateLimitConsume(checks.length, ...keys, WINDOW_MS, ...numbers));
    } catch {
      // Slow past the wait, or failed: this request alone is decided here. Whether Redis is unreachable is the
      // health probe's call.
      return this.#fallback.consumeNow(checks);
    }
    const { allowed, levels } = parseConsumeReply(reply, checks.length);
    const decision = decide(checks, levels);
    if (decision.allowed !== allowed) throw new Error("the rate-limit script and decide() disagree");
    // Mirrored, for the moment Redis goes away. An answer that comes back after the switch to memory (sent before
    // it) must not undo the charges made locally since: then only a fuller bucket is taken.
    const degraded = this.#degraded;
    checks.forEach((check, index) => this.#fallback.observe(check.key, levels[index]! + (allowed ? check.cost * WINDOW_MS : 0), check.limit, degraded));
    return decision;
  }

  async refund(key: string, amount: number): Promise<void> {
    validateRefund(key, amount);
    if (amount === 0) return;
    await this.#link.ready;
    if (this.#degraded || this.#closed) return this.#fallback.refundNow(key, amount);
    try {
      const reply = await this.#link.command(() => this.#scripts.turnpikeRateLimitRefund(this.#keyPrefix + key, amount, WINDOW_MS));
      if (Array.isArray(reply) && typeof reply[0] === "number" && typeof reply[1] === "number") this.#fallback.observe(key, reply[0], reply[1], this.#degraded);
    } catch {
      this.#fallback.refundNow(key, amount);
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#link.close();
    await this.#fallback.close();
  }

  #enterDegraded(error: unknown): void {
    if (this.#degraded || this.#closed) return;
    this.#degraded = true;
    this.#logger?.warn({ err: error }, "Redis unreachable: rate limits are enforced by this node alone until it is back");
  }

  /** The probe says Redis is reachable again: go back to it, merging this node's buckets into it first. */
  #returnToRedis(): void {
    if (!this.#degraded || this.#closed) return;
    // In one step with leaving degraded mode: the snapshot holds every local charge, and the merge commands are sent
    // before any consume that follows, on the same connection, so Redis runs them first.
    const buckets = this.#fallback.snapshot();
    this.#degraded = false;
    this.#logger?.info({ merged_buckets: buckets.length }, "Redis reachable again: rate limits are shared across nodes again");
    const merges: Promise<unknown>[] = [];
    for (let start = 0; start < buckets.length; start += MERGE_BATCH) {
      const batch = buckets.slice(start, start + MERGE_BATCH);
      merges.push(this.#scripts.turnpikeRateLimitMerge(batch.length, ...batch.map((bucket) => this.#keyPrefix + bucket.key), ...batch.flatMap((bucket) => [bucket.level, bucket.limit])));
    }
    // Gone again before the merge went through: back to the local buckets, which still hold it all, until the probe
    // has seen Redis answer enough times in a row again.
    void this.#link.command(() => Promise.all(merges)).catch((error: unknown) => this.#link.markUnreachable(error));
  }
}

/** The consume script's reply `{ allowed, level1, level2, ... }`, checked. */
function parseConsumeReply(reply: unknown, count: number): { allowed: boolean; levels: number[] } {
  if (!Array.isArray(reply) || reply.length !== count + 1 || !reply.every((item) => typeof item === "number")) {
    throw new Error(`unexpected reply from the rate-limit script: ${JSON.stringify(reply)}`);
  }
  const [allowed, ...levels] = reply as number[];
  return { allowed: allowed === 1, levels };
}
