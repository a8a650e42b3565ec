/**
 * Against a real Redis (TURNPIKE_TEST_REDIS_URL, default redis://127.0.0.1:6379), under a key prefix unique to this
 * run and deleted afterwards. The recovery test starts its own redis-server on a free port.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { Redis } from "ioredis";
import { MemoryRateLimiter } from "./memory.ts";
import type { LimitCheck, LimiterLogger } from "./rate-limiter.ts";
import { RedisRateLimiter } from "./redis.ts";
import { TcpProxy } from "../../test/helpers/tcp-proxy.ts";

const redisUrl = process.env.TURNPIKE_TEST_REDIS_URL ?? "redis://127.0.0.1:6379";
const keyPrefix = `turnpike:rl:test:${process.pid}:${randomUUID()}:`;
const redisMissing = await redisUnavailable(redisUrl);
const redisServerMissing = spawnSync("redis-server", ["--version"]).status !== 0;

async function redisUnavailable(url: string): Promise<string | false> {
  const client = new Redis(url, {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  client.on("error", () => {});
  try {
    await client.connect();
    await client.ping();
    return false;
  } catch {
    return `no Redis at ${url}`;
  } finally {
    client.disconnect();
  }
}

/** A logger that remembers what it was told. */
function recordingLogger(): LimiterLogger & { warnings: string[]; infos: string[] } {
  const warnings: string[] = [];
  const infos: string[] = [];
  return {
    warnings,
    infos,
    warn: (_details, message) => warnings.push(message),
    info: (_details, message) => infos.push(message),
  };
}

/** A TCP port nothing listens on right now. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

async function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

describe("RedisRateLimiter", { skip: redisMissing }, () => {
  let admin: Redis;
  const limiters: RedisRateLimiter[] = [];
  /** A limiter on the shared test Redis, closed after the suite; each test uses its own keys. */
  function sharedLimiter(logger?: LimiterLogger): RedisRateLimiter {
    const limiter = new RedisRateLimiter({ url: redisUrl, keyPrefix, logger });
    limiters.push(limiter);
    return limiter;
  }

  before(() => {
    admin = new Redis(redisUrl);
  });

  after(async () => {
    await Promise.all(limiters.map((limiter) => limiter.close()));
    let cursor = "0";
    do {
      const [next, keys] = await admin.scan(cursor, "MATCH", `${keyPrefix}*`, "COUNT", 1000);
      if (keys.length > 0) await admin.del(...keys);
      cursor = next;
    } while (cursor !== "0");
    await admin.quit();
  });

  test("allows up to the limit and refuses the next request with at most one request's refill time", async () => {
    const limiter = sharedLimiter();
    for (let index = 0; index < 60; index += 1) {
      const decision = await limiter.consume([{ key: "limit:rpm", limit: 60, cost: 1 }]);
      assert.equal(decision.allowed, true, `request ${index + 1}`);
    }
    const refused = await limiter.consume([{ key: "limit:rpm", limit: 60, cost: 1 }]);
    assert.equal(refused.allowed, false);
    assert.ok(refused.retryAfterMs > 0 && refused.retryAfterMs <= 1000, `retryAfterMs ${refused.retryAfterMs}`);
    assert.equal(refused.states[0].remaining, 0);
    assert.ok(refused.states[0].resetMs > 55_000 && refused.states[0].resetMs <= 60_000);
    assert.equal(limiter.degraded, false);
  });

  test("refuses every check when one is refused, and charges none of them", async () => {
    const limiter = sharedLimiter();
    const checks = (key: string): LimitCheck[] => [
      { key: `all:key:${key}:rpm`, limit: 2, cost: 1 },
      { key: "all:account:rpm", limit: 10, cost: 1 },
    ];
    assert.equal((await limiter.consume(checks("a"))).allowed, true);
    assert.equal((await limiter.consume(checks("a"))).allowed, true);
    const refused = await limiter.consume(checks("a"));
    assert.equal(refused.allowed, false);
    assert.equal(refused.states[1].remaining, 8, "the account was not charged for the refused request");
    const other = await limiter.consume(checks("b"));
    assert.equal(other.allowed, true);
    assert.equal(other.states[1].remaining, 7);
  });

  test("a refund gives capacity back, never below empty", async () => {
    const limiter = sharedLimiter();
    const started = Date.now();
    await limiter.consume([{ key: "refund:tpm", limit: 1000, cost: 800 }]);
    assert.equal((await limiter.consume([{ key: "refund:tpm", limit: 1000, cost: 600 }])).allowed, false);
    await limiter.refund("refund:tpm", 500);
    const decision = await limiter.consume([{ key: "refund:tpm", limit: 1000, cost: 600 }]);
    assert.equal(decision.allowed, true);
    // 100, plus what refilled meanwhile (one every 60 ms: a loaded machine may take that long).
    const refilled = Math.ceil((Date.now() - started) / 60);
    assert.ok(decision.states[0].remaining >= 100 && decision.states[0].remaining <= 100 + refilled, `remaining ${decision.states[0].remaining}`);
    await limiter.refund("refund:tpm", 1_000_000);
    await limiter.refund("refund:never-seen", 10);
    const full = await limiter.consume([{ key: "refund:tpm", limit: 1000, cost: 0 }]);
    assert.deepEqual(full.states[0], { key: "refund:tpm", limit: 1000, remaining: 1000, resetMs: 0 });
    assert.equal(await admin.exists(`${keyPrefix}refund:tpm`), 0, "an empty bucket is deleted");
  });

  test("capacity comes back as the window slides", async () => {
    const limiter = sharedLimiter();
    // 600 per minute: one unit back every 100 ms.
    assert.equal((await limiter.consume([{ key: "slide:rpm", limit: 600, cost: 600 }])).allowed, true);
    assert.equal((await limiter.consume([{ key: "slide:rpm", limit: 600, cost: 300 }])).allowed, false);
    await sleep(250);
    const decision = await limiter.consume([{ key: "slide:rpm", limit: 600, cost: 2 }]);
    assert.equal(decision.allowed, true);
  });

  test("refuses a cost larger than the limit as too large, and charges nothing", async () => {
    const limiter = sharedLimiter();
    const decision = await limiter.consume([
      { key: "large:rpm", limit: 60, cost: 1 },
      { key: "large:tpm", limit: 1000, cost: 1001 },
    ]);
    assert.equal(decision.allowed, false);
    assert.deepEqual(decision.tooLarge, ["large:tpm"]);
    assert.equal(decision.retryAfterMs, -1);
    assert.equal(await admin.exists(`${keyPrefix}large:rpm`), 0);
  });

  test("stores buckets under the prefix with a TTL of the time to drain", async () => {
    const limiter = sharedLimiter();
    await limiter.consume([{ key: "ttl:rpm", limit: 60, cost: 30 }]);
    const ttl = await admin.pttl(`${keyPrefix}ttl:rpm`);
    assert.ok(ttl > 25_000 && ttl <= 30_000, `PTTL ${ttl}`);
    assert.equal(await admin.hget(`${keyPrefix}ttl:rpm`, "limit"), "60");
  });

  test("two limiters on one Redis share one limit: of 200 concurrent requests against 50, 50 pass", async () => {
    const first = sharedLimiter();
    const second = sharedLimiter();
    const warmUp = [{ key: "warm-up", limit: 1, cost: 0 }];
    await Promise.all([first.consume(warmUp), second.consume(warmUp)]);
    const started = Date.now();
    const decisions = await Promise.all(
      Array.from({ length: 200 }, (_, index) =>
        (index % 2 === 0 ? first : second).consume([{ key: "shared:rpm", limit: 50, cost: 1 }]),
      ),
    );
    const elapsedMs = Date.now() - started;
    const allowed = decisions.filter((decision) => decision.allowed).length;
    // One unit refills every 1200 ms; on a very slow machine the burst may outlast that.
    const refilled = Math.floor(elapsedMs / 1200);
    assert.ok(allowed >= 50 && allowed <= 50 + refilled, `${allowed} allowed in ${elapsedMs} ms`);
    if (refilled === 0) assert.equal(allowed, 50);
    assert.equal(first.degraded || second.degraded, false);
  });

  test("decides like the memory backend on the same sequence", async () => {
    const redisLimiter = sharedLimiter();
    const memoryLimiter = new MemoryRateLimiter();
    // Limits of at most 60 per minute refill one unit per second or slower, so the few ms between calls do not count.
    const steps: Array<LimitCheck[] | { refund: string; amount: number }> = [];
    let seed = 42;
    const random = (below: number): number => {
      seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
      return seed % below;
    };
    for (let index = 0; index < 80; index += 1) {
      if (index % 9 === 8) {
        steps.push({ refund: `same:k${random(3)}`, amount: random(20) });
        continue;
      }
      steps.push([
        { key: `same:k${random(3)}`, limit: 60, cost: random(15) },
        { key: "same:account", limit: 40, cost: random(5) },
      ]);
    }
    for (const step of steps) {
      if (!Array.isArray(step)) {
        await redisLimiter.refund(step.refund, step.amount);
        await memoryLimiter.refund(step.refund, step.amount);
        continue;
      }
      const [fromRedis, fromMemory] = await Promise.all([redisLimiter.consume(step), memoryLimiter.consume(step)]);
      assert.equal(fromRedis.allowed, fromMemory.allowed);
      assert.deepEqual(fromRedis.tooLarge, fromMemory.tooLarge);
      assert.deepEqual(
        fromRedis.states.map((state) => state.remaining),
        fromMemory.states.map((state) => state.remaining),
      );
    }
  });
});

describe("RedisRateLimiter without Redis", () => {
  test("answers from memory and reports degraded when Redis is unreachable, warning once", async () => {
    const logger = recordingLogger();
    const port = await freePort();
    const limiter = new RedisRateLimiter({ url: `redis://127.0.0.1:${port}`, logger });
    try {
      const started = Date.now();
      for (let index = 0; index < 3; index += 1) {
        const decision = await limiter.consume([{ key: "down:rpm", limit: 2, cost: 1 }]);
        assert.equal(decision.allowed, index < 2, `request ${index + 1}`);
      }
      await limiter.refund("down:rpm", 1);
      assert.equal((await limiter.consume([{ key: "down:rpm", limit: 2, cost: 1 }])).allowed, true);
      assert.ok(Date.now() - started < 5000, "the fallback answers without waiting for Redis");
      assert.equal(limiter.degraded, true);
      assert.equal(logger.warnings.length, 1);
      assert.deepEqual(logger.infos, []);
    } finally {
      await limiter.close();
    }
  });

  test("answers from memory when the Redis host does not answer in time", async () => {
    // A listening socket that never speaks RESP: the connection opens, commands time out.
    const sockets = new Set<Socket>();
    const silent = createServer((socket) => sockets.add(socket));
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const address = silent.address();
    assert.ok(address !== null && typeof address !== "string");
    const limiter = new RedisRateLimiter({ url: `redis://127.0.0.1:${address.port}`, commandTimeoutMs: 200 });
    try {
      const decision = await limiter.consume([{ key: "silent:rpm", limit: 5, cost: 1 }]);
      assert.equal(decision.allowed, true);
      assert.equal(limiter.degraded, true);
    } finally {
      await limiter.close();
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });
});

describe("RedisRateLimiter recovery", { skip: redisServerMissing && "redis-server is not installed" }, () => {
  /** The redis-servers this suite started that are still running. */
  const servers = new Set<ChildProcess>();

  function startRedisServer(port: number): ChildProcess {
    const child = spawn(
      "redis-server",
      ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmpdir()],
      { stdio: "ignore" },
    );
    servers.add(child);
    child.once("exit", () => servers.delete(child));
    return child;
  }

  async function stopRedisServer(child: ChildProcess): Promise<void> {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
  }

  async function answersPing(port: number): Promise<boolean> {
    return (await redisUnavailable(`redis://127.0.0.1:${port}`)) === false;
  }

  after(() => Promise.all([...servers].map(stopRedisServer)));

  test("leaves degraded mode when Redis comes back, and logs both switches", async () => {
    const port = await freePort();
    let server = startRedisServer(port);
    await waitFor(() => answersPing(port), 10_000, "redis-server to start");
    const logger = recordingLogger();
    const limiter = new RedisRateLimiter({ url: `redis://127.0.0.1:${port}`, logger, health: { intervalMs: 100 } });
    // 6 a minute: one comes back every 10 s, so the probe's seconds change nothing below.
    const check = [{ key: "recovery:rpm", limit: 6, cost: 1 }];
    const started = Date.now();
    try {
      assert.equal((await limiter.consume(check)).allowed, true);
      assert.equal(limiter.degraded, false);

      await stopRedisServer(server);
      assert.equal((await limiter.consume(check)).allowed, true, "answered from memory before the probe has decided");
      await waitFor(() => limiter.degraded, 15_000, "the probe to find Redis unreachable");
      assert.equal(logger.warnings.length, 1);

      server = startRedisServer(port);
      await waitFor(() => !limiter.degraded, 15_000, "the limiter to leave degraded mode");
      assert.equal(logger.infos.length, 1);
      const decision = await limiter.consume(check);
      assert.equal(decision.allowed, true);
      // The restarted Redis lost its data; it took this node's two requests (one through the old Redis, one from
      // memory) when the limiter came back, and charged the third itself.
      const refilled = Math.floor((Date.now() - started) / 10_000);
      assert.ok(decision.states[0].remaining >= 3 && decision.states[0].remaining <= 3 + refilled, `remaining ${decision.states[0].remaining}: charged in the new Redis, which starts from what this node knew`);
      const client = new Redis(`redis://127.0.0.1:${port}`);
      try {
        assert.equal(await client.exists("turnpike:rl:recovery:rpm"), 1);
      } finally {
        client.disconnect();
      }
    } finally {
      await limiter.close();
      await stopRedisServer(server);
    }
  });

  test("waits for a Redis paused for 1 s instead of falling back, while its probe still gets through", async () => {
    const port = await freePort();
    const server = startRedisServer(port);
    await waitFor(() => answersPing(port), 10_000, "redis-server to start");
    const logger = recordingLogger();
    const limiter = new RedisRateLimiter({ url: `redis://127.0.0.1:${port}`, logger });
    const admin = new Redis(`redis://127.0.0.1:${port}`);
    // 6 a minute: one comes back every 10 s, so none during the pause.
    const check = [{ key: "paused:rpm", limit: 6, cost: 1 }];
    try {
      assert.equal((await limiter.consume(check)).allowed, true);
      await admin.call("CLIENT", "PAUSE", "1000", "ALL");
      const started = Date.now();
      const decision = await limiter.consume(check);
      assert.ok(Date.now() - started >= 900, "the request waited for Redis");
      assert.equal(decision.allowed, true);
      assert.equal(decision.states[0].remaining, 4, "decided by Redis, which holds the first request too");
      assert.equal(limiter.degraded, false);
      assert.deepEqual([logger.warnings.length, logger.infos.length], [0, 0], "no switch");
    } finally {
      admin.disconnect();
      await limiter.close();
      await stopRedisServer(server);
    }
  });
});

describe("RedisRateLimiter switching between Redis and memory", { skip: redisMissing }, () => {
  const prefix = `turnpike:rl:test:switch:${process.pid}:${randomUUID()}:`;
  const proxy = new TcpProxy(redisUrl);
  let admin: Redis;
  before(async () => {
    admin = new Redis(redisUrl);
    await proxy.open();
  });
  after(async () => {
    await proxy.close();
    const keys = await admin.keys(`${prefix}*`);
    if (keys.length > 0) await admin.del(...keys);
    await admin.quit();
  });

  test("never grants more than the limit across both switches, even when Redis comes back without its data", async () => {
    const logger = recordingLogger();
    const limiter = new RedisRateLimiter({ url: proxy.url(redisUrl), keyPrefix: prefix, logger, health: { intervalMs: 100 } });
    // 30 a minute: the bucket holds 30 and one more comes back every 2 s.
    const check = [{ key: "switch:rpm", limit: 30, cost: 1 }];
    const burst = async (count: number) => {
      let allowed = 0;
      for (let index = 0; index < count; index++) if ((await limiter.consume(check)).allowed) allowed++;
      return allowed;
    };
    try {
      const started = Date.now();
      assert.equal(await burst(40), 30, "30 through Redis, then refused");
      assert.equal(limiter.degraded, false);

      // Redis goes away: the local bucket starts where Redis left it, not full.
      await proxy.close();
      await waitFor(() => limiter.degraded, 15_000, "the probe to find Redis unreachable");
      const whileAway = await burst(40);

      // Redis comes back with its data lost: it starts from what this node knew, not full.
      const lost = await admin.keys(`${prefix}*`);
      if (lost.length > 0) await admin.del(...lost);
      await proxy.open();
      await waitFor(() => !limiter.degraded, 15_000, "the limiter to go back to Redis");
      const afterReturn = await burst(40);
      assert.equal(limiter.degraded, false);

      // A token bucket of 30 per minute grants at most 30 plus one per 2 s elapsed.
      const bound = 30 + Math.floor((Date.now() - started) / 2000);
      const total = 30 + whileAway + afterReturn;
      assert.ok(total <= bound, `granted ${total} (30 + ${whileAway} while Redis was away + ${afterReturn} after it came back); at most ${bound} allowed`);
      assert.deepEqual([logger.warnings.length, logger.infos.length], [1, 1], "both switches logged");
    } finally {
      await limiter.close();
    }
  });
});
