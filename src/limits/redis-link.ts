/**
 * One connection to a Redis shared by several nodes, for a feature that falls back to counting in the node's own
 * memory while Redis is unreachable (the rate limiter, the sign-in, sign-up and checkout throttles). Whether Redis is
 * reachable is decided by a `RedisHealth` probe on this connection, with hysteresis, never by one slow or failed
 * command: a command waits up to `commandTimeoutMs`, and one that fails or takes longer is answered locally for that
 * one call, with no switch.
 */
import { Redis } from "ioredis";
import { REDIS_COMMAND_TIMEOUT_MS, REDIS_PROBE_TIMEOUT_MS, RedisHealth, withTimeout, type RedisHealthSettings } from "./redis-health.ts";

export type RedisLinkOptions = {
  /** `redis://[[user]:password@]host[:port][/db]` (or `rediss://`). */
  url: string;
  /** How long one command may take before its caller answers locally, in ms (default `REDIS_COMMAND_TIMEOUT_MS`). */
  commandTimeoutMs?: number;
  /** The health probe's numbers (defaults in redis-health.ts). */
  health?: Partial<RedisHealthSettings>;
  /** Called on each switch (and once at start when the first connection fails), synchronously. */
  onChange: (reachable: boolean, error: unknown) => void;
};

export class RedisLink {
  /** The client: define scripts on it, and send commands through `command`. */
  readonly redis: Redis;
  /** Settles once the first connection has succeeded, failed or taken longer than the probe timeout. */
  readonly ready: Promise<void>;
  readonly #health: RedisHealth;
  readonly #commandTimeoutMs: number;
  #closed = false;

  constructor(options: RedisLinkOptions) {
    const probeTimeoutMs = options.health?.timeoutMs ?? REDIS_PROBE_TIMEOUT_MS;
    this.#commandTimeoutMs = options.commandTimeoutMs ?? REDIS_COMMAND_TIMEOUT_MS;
    this.redis = new Redis(options.url, {
      lazyConnect: true,
      // A command sent while disconnected fails at once (and is answered locally) instead of queueing.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      connectTimeout: Math.max(1000, probeTimeoutMs),
      retryStrategy: (attempt) => Math.min(attempt * 200, 2000),
    });
    // Connection errors are seen through the probe; without a listener ioredis prints each one.
    this.redis.on("error", () => {});
    this.#health = new RedisHealth({ ...options.health, probe: () => this.redis.ping(), onChange: options.onChange });
    this.ready = withTimeout(this.redis.connect(), probeTimeoutMs, "the first connection to Redis").then(
      () => {
        if (!this.#closed) this.#health.start(true);
      },
      (error: unknown) => {
        if (!this.#closed) this.#health.start(false, error);
      },
    );
  }

  /** What the health probe decided (true until the first connection has been tried). */
  get reachable(): boolean {
    return this.#health.reachable;
  }

  /** Runs one command, waiting for it at most the command timeout; rejects when it failed or took longer. */
  command<T>(send: () => Promise<T>): Promise<T> {
    return withTimeout(send(), this.#commandTimeoutMs, "a Redis command");
  }

  /** Makes Redis unreachable at once (something that had to go through failed); the probe must earn its way back. */
  markUnreachable(error: unknown): void {
    this.#health.markUnreachable(error);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#health.stop();
    if (this.redis.status === "ready") {
      await this.redis.quit().catch(() => this.redis.disconnect());
    } else {
      this.redis.disconnect();
    }
  }
}
