/** `turnpike check`'s Redis line: the URL without its password, and whether it answers PING. */
import { Redis } from "ioredis";
import { messageOf, redactUrl, within, withoutUrlSecrets, type CheckResult } from "./result.ts";

/** PINGs the Redis at `url`, bounded by `timeoutMs`; never retries. */
export async function checkRedis(url: string, timeoutMs: number): Promise<CheckResult> {
  const name = redactUrl(url);
  const redis = new Redis(url, { lazyConnect: true, connectTimeout: timeoutMs, commandTimeout: timeoutMs, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => null });
  // Failures are reported by the awaited calls; the client also emits them.
  redis.on("error", () => {});
  try {
    await within(redis.connect(), timeoutMs, "Redis");
    const answer = await within(redis.ping(), timeoutMs, "Redis");
    return { check: "redis", name, ok: answer === "PONG", detail: `${name}: ${answer === "PONG" ? "answers PING" : `answered PING with ${answer}`}` };
  } catch (error) {
    return { check: "redis", name, ok: false, detail: `${name}: unreachable: ${withoutUrlSecrets(messageOf(error), url)}: check --redis-url (TURNPIKE_REDIS_URL) and that the server is up` };
  } finally {
    redis.disconnect();
  }
}
