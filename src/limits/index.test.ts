import assert from "node:assert/strict";
import { test } from "node:test";
import { pino } from "pino";
import { createRateLimiter } from "./index.ts";
import { MemoryRateLimiter } from "./memory.ts";
import { RedisRateLimiter } from "./redis.ts";

test("createRateLimiter keeps limits in memory without a Redis URL", async () => {
  const limiter = createRateLimiter();
  assert.ok(limiter instanceof MemoryRateLimiter);
  assert.equal(limiter.degraded, false);
  await limiter.close();
});

test("createRateLimiter shares limits through Redis when given a URL, and accepts a pino logger", async () => {
  const limiter = createRateLimiter({ redisUrl: "redis://127.0.0.1:6379", logger: pino({ level: "silent" }) });
  assert.ok(limiter instanceof RedisRateLimiter);
  await limiter.close();
});
