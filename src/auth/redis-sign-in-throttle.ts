/**
 * The sign-in throttle shared by every node through Redis: one counter per account and per
 * address, each a key that expires with its window. A reservation is one Lua script (check both
 * counters, then count on both, or on neither), so simultaneous attempts on any number of nodes
 * can never pass a limit between a check and its count. Keys hold SHA-256s of the email and
 * address, never the values. While Redis is unreachable the node counts in its own memory, says
 * so once in its logs, and goes back to Redis on the next call that gets through.
 */
import { createHash } from "node:crypto";
import { Redis } from "ioredis";
import { DEFAULT_THROTTLE_LIMITS, MemorySignInThrottle, waitSeconds, type Attempt, type SignInThrottle, type ThrottleLimits } from "./sign-in-throttle.ts";

export type RedisSignInThrottleOptions = {
  url: string;
  limits?: ThrottleLimits;
  /** Put before every key (default `turnpike:signin:`). */
  keyPrefix?: string;
  /** What is counted, for the log lines about Redis (default `sign-in attempts`). */
  counted?: string;
  logger?: { warn(details: object, message: string): void; info(details: object, message: string): void };
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
  readonly #redis: Redis;
  readonly #scripts: ScriptCommands;
  readonly #limits: ThrottleLimits;
  readonly #prefix: string;
  readonly #fallback: MemorySignInThrottle;
  readonly #logger: RedisSignInThrottleOptions["logger"];
  readonly #counted: string;
  #degraded = false;
  /** Settles once the first connection attempt has succeeded or failed. */
  readonly #connected: Promise<void>;

  constructor(options: RedisSignInThrottleOptions) {
    this.#limits = options.limits ?? DEFAULT_THROTTLE_LIMITS;
    this.#prefix = options.keyPrefix ?? "turnpike:signin:";
    this.#fallback = new MemorySignInThrottle(this.#limits);
    this.#logger = options.logger;
    this.#counted = options.counted ?? "sign-in attempts";
    this.#redis = new Redis(options.url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1, commandTimeout: 500, connectTimeout: 1000 });
    this.#redis.defineCommand("turnpikeThrottleReserve", { lua: RESERVE_SCRIPT, numberOfKeys: 2 });
    this.#redis.defineCommand("turnpikeThrottleGiveBack", { lua: GIVE_BACK_SCRIPT, numberOfKeys: 2 });
    this.#scripts = this.#redis as unknown as ScriptCommands;
    this.#redis.on("error", () => {});
    this.#connected = this.#redis.connect().catch(() => {});
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
    this.#redis.disconnect();
  }

  #keys(email: string, address: string): [string, string] {
    return [`${this.#prefix}account:${digest(email)}`, `${this.#prefix}address:${digest(address)}`];
  }

  /** Runs `command` against Redis; when that fails, runs `fallback` in memory instead. */
  async #call<T, F>(command: () => Promise<T>, fallback: () => F): Promise<T | F> {
    await this.#connected;
    try {
      const result = await command();
      if (this.#degraded) {
        this.#degraded = false;
        this.#logger?.info({}, `Redis reachable again: ${this.#counted} are counted across nodes again`);
      }
      return result;
    } catch (error) {
      if (!this.#degraded) {
        this.#degraded = true;
        this.#logger?.warn({ err: error }, `Redis unreachable: ${this.#counted} are counted by this node alone until it is back`);
      }
      return fallback();
    }
  }
}
