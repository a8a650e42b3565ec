/**
 * The sign-in throttle shared by every node through Redis: one counter per account and per
 * address, each a key that expires with its window (INCR, then PEXPIRE NX on the first
 * failure). Keys hold SHA-256s of the email and address, never the values. While Redis is
 * unreachable the node counts in its own memory, says so once in its logs, and goes back to
 * Redis on the next call that gets through.
 */
import { createHash } from "node:crypto";
import { Redis } from "ioredis";
import { DEFAULT_THROTTLE_LIMITS, MemorySignInThrottle, type SignInThrottle, type ThrottleLimits } from "./sign-in-throttle.ts";

export type RedisSignInThrottleOptions = {
  url: string;
  limits?: ThrottleLimits;
  /** Put before every key (default `turnpike:signin:`). */
  keyPrefix?: string;
  logger?: { warn(details: object, message: string): void; info(details: object, message: string): void };
};

type PipelineReplies = Array<[Error | null, unknown]> | null;

/** A pipeline's replies, or the first error among them. */
function checked(replies: PipelineReplies): Array<[Error | null, unknown]> {
  if (replies === null) throw new Error("Redis gave no reply");
  const failed = replies.find(([error]) => error !== null);
  if (failed) throw failed[0];
  return replies;
}

const digest = (value: string) => createHash("sha256").update(value, "utf8").digest("base64url").slice(0, 32);

export class RedisSignInThrottle implements SignInThrottle {
  readonly #redis: Redis;
  readonly #limits: ThrottleLimits;
  readonly #prefix: string;
  readonly #fallback: MemorySignInThrottle;
  readonly #logger: RedisSignInThrottleOptions["logger"];
  #degraded = false;
  /** Settles once the first connection attempt has succeeded or failed. */
  readonly #connected: Promise<void>;

  constructor(options: RedisSignInThrottleOptions) {
    this.#limits = options.limits ?? DEFAULT_THROTTLE_LIMITS;
    this.#prefix = options.keyPrefix ?? "turnpike:signin:";
    this.#fallback = new MemorySignInThrottle(this.#limits);
    this.#logger = options.logger;
    this.#redis = new Redis(options.url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1, commandTimeout: 500, connectTimeout: 1000 });
    this.#redis.on("error", () => {});
    this.#connected = this.#redis.connect().catch(() => {});
  }

  get degraded(): boolean {
    return this.#degraded;
  }

  async retryAfterSeconds(email: string, address: string): Promise<number> {
    const keys = this.#keys(email, address);
    const replies = await this.#call(
      () => {
        const pipeline = this.#redis.pipeline();
        for (const [key] of keys) pipeline.get(key).pttl(key);
        return pipeline.exec().then(checked);
      },
      () => this.#fallback.retryAfterSeconds(email, address),
    );
    if (typeof replies === "number") return replies;
    let waitMs = 0;
    keys.forEach(([, limit], index) => {
      const failures = Number(replies?.[index * 2]?.[1] ?? 0);
      const ttl = Number(replies?.[index * 2 + 1]?.[1] ?? -2);
      if (failures >= limit) waitMs = Math.max(waitMs, ttl > 0 ? ttl : this.#limits.windowMs);
    });
    return waitMs === 0 ? 0 : Math.max(1, Math.ceil(waitMs / 1000));
  }

  async recordFailure(email: string, address: string): Promise<void> {
    const keys = this.#keys(email, address);
    await this.#call(
      () => {
        const pipeline = this.#redis.multi();
        for (const [key] of keys) pipeline.incr(key).pexpire(key, this.#limits.windowMs, "NX");
        return pipeline.exec().then(checked);
      },
      () => this.#fallback.recordFailure(email, address),
    );
  }

  async recordSuccess(email: string): Promise<void> {
    const [[key]] = this.#keys(email, "");
    await this.#call(
      () => this.#redis.del(key),
      () => this.#fallback.recordSuccess(email),
    );
  }

  async close(): Promise<void> {
    this.#redis.disconnect();
  }

  #keys(email: string, address: string): [[string, number], [string, number]] {
    return [
      [`${this.#prefix}account:${digest(email)}`, this.#limits.perAccount],
      [`${this.#prefix}address:${digest(address)}`, this.#limits.perAddress],
    ];
  }

  /** Runs `command` against Redis; when that fails, runs `fallback` in memory instead. */
  async #call<T, F>(command: () => Promise<T>, fallback: () => F): Promise<T | F> {
    await this.#connected;
    try {
      const result = await command();
      if (this.#degraded) {
        this.#degraded = false;
        this.#logger?.info({}, "Redis reachable again: sign-in throttling is shared across nodes again");
      }
      return result;
    } catch (error) {
      if (!this.#degraded) {
        this.#degraded = true;
        this.#logger?.warn({ err: error }, "Redis unreachable: sign-in attempts are counted by this node alone until it is back");
      }
      return fallback();
    }
  }
}
