/**
 * The sign-in throttle shared by every node through Redis: one counter per account and per
 * address, each a key that expires with its window. A reservation is one Lua script (check both
 * counters, then count on both, or on neither), so simultaneous attempts on any number of nodes
 * can never pass a limit between a check and its count. Keys hold SHA-256s of the email and
 * address, never the values. While Redis is unreachable the node counts in its own memory, says
 * so once in its logs, and goes back to Redis when it is reachable again. Reachable or not is
 * decided by the health probe the rate limiter uses too (`RedisLink`, with hysteresis), never by
 * one slow command: a slow command is waited for, and one that fails or takes too long is counted
 * locally for that one attempt, without switching.
 */
import { createHash } from "node:crypto";
import type { RedisHealthSettings } from "../limits/redis-health.ts";
import { RedisLink } from "../limits/redis-link.ts";
import { DEFAULT_THROTTLE_LIMITS, MemorySignInThrottle, waitSeconds, type Attempt, type SignInThrottle, type ThrottleLimits } from "./sign-in-throttle.ts";

export type RedisSignInThrottleOptions = {
  url: string;
  limits?: ThrottleLimits;
  /** Put before every key (default `turnpike:signin:`). */
  keyPrefix?: string;
  /** What is counted, for the log lines about Redis (default `sign-in attempts`). */
  counted?: string;
  logger?: { warn(details: object, message: string): void; info(details: object, message: string): void };
  /** How long an attempt waits for Redis, in ms (default `REDIS_COMMAND_TIMEOUT_MS`). */
  commandTimeoutMs?: number;
  /** The health probe that decides when to switch (defaults in limits/redis-health.ts). */
  health?: Partial<RedisHealthSettings>;
};

/**
 * KEYS: the account's and the address's counters. ARGV: the window (ms), then each key's limit.
 * Returns 0 when the attempt was counted on both, or the milliseconds to wait (nothing counted).
 */
const RESERVE_SCRIPT = `
local window = tonumber(ARGV[1])
local wait = 0
for index, key in ipairs(KEYS) do
  local attempts = tonumber(redis.call('GET', key) or '0')
  if attempts >= tonumber(ARGV[index + 1]) then
    local ttl = redis.call('PTTL', key)
    if ttl < 0 then
      redis.call('PEXPIRE', key, window)
      ttl = window
    end
    if ttl > wait then wait = ttl end
  end
end
if wait > 0 then return wait end
for _, key in ipairs(KEYS) do
  if redis.call('INCR', key) == 1 then redis.call('PEXPIRE', key, window) end
end
return 0
`;

/**
 * KEYS: the account's and the address's counters. ARGV[1]: '1' clears the account's counter
 * (a sign-in that succeeded), '0' gives it one attempt back. The address always gets one back.
 */
const GIVE_BACK_SCRIPT = `
for index, key in ipairs(KEYS) do
  if index == 1 and ARGV[1] == '1' then
    redis.call('DEL', key)
  elseif tonumber(redis.call('GET', key) or '0') > 0 then
    redis.call('DECR', key)
  end
end
return 0
`;

/** The commands `defineCommand` adds to the client (ioredis cannot type them). */
type ScriptCommands = {
  turnpikeThrottleReserve(accountKey: string, addressKey: string, windowMs: number, accountLimit: number, addressLimit: number): Promise<unknown>;
  turnpikeThrottleGiveBack(accountKey: string, addressKey: string, clearAccount: "0" | "1"): Promise<unknown>;
};

const digest = (value: string) => createHash("sha256").update(value, "utf8").digest("base64url").slice(0, 32);

export class RedisSignInThrottle implements SignInThrottle {
  readonly #link: RedisLink;
  readonly #scripts: ScriptCommands;
  readonly #limits: ThrottleLimits;
  readonly #prefix: string;
  readonly #fallback: MemorySignInThrottle;
  readonly #logger: RedisSignInThrottleOptions["logger"];
  readonly #counted: string;
  #degraded = false;

  constructor(options: RedisSignInThrottleOptions) {
    this.#limits = options.limits ?? DEFAULT_THROTTLE_LIMITS;
    this.#prefix = options.keyPrefix ?? "turnpike:signin:";
    this.#fallback = new MemorySignInThrottle(this.#limits);
    this.#logger = options.logger;
    this.#counted = options.counted ?? "sign-in attempts";
    this.#link = new RedisLink({
      url: options.url,
      commandTimeoutMs: options.commandTimeoutMs,
      health: options.health,
      onChange: (reachable, error) => this.#switch(reachable, error),
    });
    this.#link.redis.defineCommand("turnpikeThrottleReserve", { lua: RESERVE_SCRIPT, numberOfKeys: 2 });
    this.#link.redis.defineCommand("turnpikeThrottleGiveBack", { lua: GIVE_BACK_SCRIPT, numberOfKeys: 2 });
    this.#scripts = this.#link.redis as unknown as ScriptCommands;
  }

  get degraded(): boolean {
    return this.#degraded;
  }

  async reserve(email: string, address: string): Promise<Attempt> {
    const [accountKey, addressKey] = this.#keys(email, address);
    return this.#call(
      async (): Promise<Attempt> => {
        const reply = await this.#scripts.turnpikeThrottleReserve(accountKey, addressKey, this.#limits.windowMs, this.#limits.perAccount, this.#limits.perAddress);
        if (typeof reply !== "number" || !Number.isFinite(reply) || reply < 0) throw new Error(`unexpected reply from the throttle script: ${JSON.stringify(reply)}`);
        return reply === 0 ? { allowed: true } : { allowed: false, retryAfterSeconds: waitSeconds(reply) };
      },
      () => this.#fallback.reserve(email, address),
    );
  }

  async succeeded(email: string, address: string): Promise<void> {
    const [accountKey, addressKey] = this.#keys(email, address);
    await this.#call(
      () => this.#scripts.turnpikeThrottleGiveBack(accountKey, addressKey, "1"),
      () => this.#fallback.succeeded(email, address),
    );
  }

  async release(email: string, address: string): Promise<void> {
    const [accountKey, addressKey] = this.#keys(email, address);
    await this.#call(
      () => this.#scripts.turnpikeThrottleGiveBack(accountKey, addressKey, "0"),
      () => this.#fallback.release(email, address),
    );
  }

  async close(): Promise<void> {
    await this.#link.close();
  }

  #keys(email: string, address: string): [string, string] {
    return [`${this.#prefix}account:${digest(email)}`, `${this.#prefix}address:${digest(address)}`];
  }

  /**
   * Runs `command` against Redis, or `fallback` in memory while Redis is unreachable. A command that fails or takes
   * longer than the wait is counted in memory for this one call; it does not switch this node over.
   */
  async #call<T, F>(command: () => Promise<T>, fallback: () => F): Promise<T | F> {
    await this.#link.ready;
    if (this.#degraded) return fallback();
    try {
      return await this.#link.command(command);
    } catch {
      return fallback();
    }
  }

  #switch(reachable: boolean, error: unknown): void {
    if (this.#degraded !== reachable) return;
    this.#degraded = !reachable;
    if (reachable) this.#logger?.info({}, `Redis reachable again: ${this.#counted} are counted across nodes again`);
    else this.#logger?.warn({ err: error }, `Redis unreachable: ${this.#counted} are counted by this node alone until it is back`);
  }
}
