/**
 * Issue 20 row 4: the switch to local rate limits happens when Redis is unreachable, not when its replies are slow.
 * A proxy in the test sits between the limiters and this machine's real Redis (TURNPIKE_TEST_REDIS_URL, default
 * redis://127.0.0.1:6379) and delays every reply, cuts the route, or black-holes it. Two limiters in one process
 * stand for two nodes sharing that Redis.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import net from "node:net";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { Redis } from "ioredis";
import { RedisSignInThrottle } from "../src/auth/redis-sign-in-throttle.ts";
import type { LimitCheck, LimiterLogger } from "../src/limits/rate-limiter.ts";
import type { ProbeOutcome } from "../src/limits/redis-health.ts";
import { RedisRateLimiter } from "../src/limits/redis.ts";
import { TcpProxy } from "./helpers/tcp-proxy.ts";

const redisUrl = process.env.TURNPIKE_TEST_REDIS_URL ?? "redis://127.0.0.1:6379";
const prefix = `turnpike:test:load:${process.pid}:${randomUUID()}:`;

/**
 * A TCP proxy whose replies (server → client) arrive `replyDelayMs` late, in order; requests go straight through.
 * Each connection has one queue, so a change of delay never reorders bytes.
 */
class DelayingProxy {
  readonly #target: URL;
  readonly #sockets = new Set<net.Socket>();
  #server: net.Server | undefined;
  replyDelayMs = 0;
  port = 0;

  constructor(target: string) {
    this.#target = new URL(target);
  }

  get url(): string {
    const through = new URL(this.#target);
    through.host = `127.0.0.1:${this.port}`;
    return through.toString();
  }

  async open(): Promise<void> {
    this.#server = net.createServer((client) => {
      const upstream = net.connect(Number(this.#target.port) || 6379, this.#target.hostname);
      for (const socket of [client, upstream]) {
        this.#sockets.add(socket);
        socket.on("close", () => this.#sockets.delete(socket));
        socket.on("error", () => {});
      }
      client.on("data", (chunk: Buffer) => void upstream.write(chunk));
      const queue: Array<{ chunk: Buffer; due: number }> = [];
      let timer: ReturnType<typeof setTimeout> | undefined;
      const pump = () => {
        timer = undefined;
        while (queue.length > 0 && queue[0]!.due <= Date.now()) client.write(queue.shift()!.chunk);
        if (queue.length > 0) timer = setTimeout(pump, queue[0]!.due - Date.now());
      };
      upstream.on("data", (chunk: Buffer) => {
        const due = Math.max(Date.now() + this.replyDelayMs, queue.at(-1)?.due ?? 0);
        queue.push({ chunk, due });
        if (timer === undefined) timer = setTimeout(pump, Math.max(0, due - Date.now()));
      });
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => {
        clearTimeout(timer);
        client.destroy();
      });
    });
    await new Promise<void>((resolve) => this.#server!.listen(this.port, "127.0.0.1", resolve));
    this.port = (this.#server.address() as net.AddressInfo).port;
  }

  async close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    await new Promise<void>((resolve) => (this.#server ? this.#server.close(() => resolve()) : resolve()));
    this.#server = undefined;
  }
}

async function waitFor(condition: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

/**
 * Where the probe switched in `outcomes` from `from` on: the index of the first outcome whose state differs from the
 * one before it. Asserts that the switch came on the `inARow`-th probe in a row with the same result, the earlier
 * ones of that run having left the state alone (the hysteresis).
 */
function assertSwitchedAfterRun(outcomes: ProbeOutcome[], from: number, toReachable: boolean, inARow: number): number {
  const at = outcomes.findIndex((outcome, index) => index >= from && outcome.reachable === toReachable);
  assert.ok(at >= inARow - 1, `a switch to ${toReachable ? "reachable" : "unreachable"} was seen`);
  const run = outcomes.slice(at - inARow + 1, at + 1);
  assert.deepEqual(run.map((outcome) => outcome.ok), Array(inARow).fill(toReachable), `the last ${inARow} probes before the switch all ${toReachable ? "succeeded" : "failed"}`);
  assert.deepEqual(run.slice(0, -1).map((outcome) => outcome.reachable), Array(inARow - 1).fill(!toReachable), "the earlier probes of the run did not switch");
  assert.ok(outcomes.slice(from, at).every((outcome) => outcome.reachable !== toReachable), "no earlier switch");
  return at;
}

function recordingLogger(): LimiterLogger & { warnings: string[]; infos: string[] } {
  const warnings: string[] = [];
  const infos: string[] = [];
  return { warnings, infos, warn: (_details, message) => warnings.push(message), info: (_details, message) => infos.push(message) };
}

describe("rate limits with Redis slow but reachable", () => {
  const proxy = new DelayingProxy(redisUrl);
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

  test("replies 400 ms late: both nodes wait for Redis instead of falling back, and one key's RPM holds across them", async () => {
    const logger = recordingLogger();
    const nodes = [0, 1].map(() => new RedisRateLimiter({ url: proxy.url, keyPrefix: `${prefix}rl:`, logger }));
    try {
      // Both connected and answering through Redis before the slowness starts.
      for (const node of nodes) assert.equal((await node.consume([{ key: "warm:rpm", limit: 100, cost: 1 }])).allowed, true);
      assert.deepEqual(nodes.map((node) => node.degraded), [false, false]);

      proxy.replyDelayMs = 400;
      // 30 a minute: the bucket holds 30 and one more comes back every 2 s.
      const limit = 30;
      const check: LimitCheck[] = [{ key: "shared:rpm", limit, cost: 1 }];
      const started = Date.now();
      let granted = 0;
      const waveDurations: number[] = [];
      const degradedAfterWave: boolean[] = [];
      for (let wave = 0; wave < 3; wave++) {
        const waveStarted = Date.now();
        const decisions = await Promise.all(nodes.flatMap((node) => Array.from({ length: 20 }, () => node.consume(check))));
        granted += decisions.filter((decision) => decision.allowed).length;
        waveDurations.push(Date.now() - waveStarted);
        degradedAfterWave.push(nodes.some((node) => node.degraded));
      }
      // The documented tolerance while Redis is reachable: one token bucket for the key across every node.
      const bound = limit + Math.ceil(((Date.now() - started) * limit) / 60_000);
      assert.ok(granted >= limit, `granted ${granted}: Redis let the limit through`);
      assert.ok(granted <= bound, `granted ${granted} across two nodes, at most ${bound} allowed`);
      assert.ok(waveDurations.every((duration) => duration >= 390), `each wave waited for the slow replies: ${waveDurations.join(", ")} ms`);
      assert.deepEqual(degradedAfterWave, [false, false, false], "both nodes stayed on Redis after every wave");
      assert.deepEqual(logger.warnings, [], "no switch to local limits was logged");
      assert.equal(await admin.exists(`${prefix}rl:shared:rpm`), 1, "charged in Redis");
    } finally {
      proxy.replyDelayMs = 0;
      await Promise.all(nodes.map((node) => node.close()));
    }
  });

  test("replies 700 ms late: the sign-in throttle on two nodes keeps counting in Redis, and lets exactly the limit through", async () => {
    const warnings: string[] = [];
    const logger = { warn: (_details: object, message: string) => warnings.push(message), info: () => {} };
    const limits = { perAccount: 3, perAddress: 100, windowMs: 60_000 };
    const nodes = [0, 1].map(() => new RedisSignInThrottle({ url: proxy.url, limits, keyPrefix: `${prefix}signin:`, logger }));
    try {
      for (const node of nodes) assert.equal((await node.reserve("warm@x.io", "1.1.1.1")).allowed, true);
      proxy.replyDelayMs = 700;
      const attempts = await Promise.all(Array.from({ length: 12 }, (_unused, index) => nodes[index % 2]!.reserve("slow@x.io", `10.0.0.${index}`)));
      assert.equal(attempts.filter((attempt) => attempt.allowed).length, limits.perAccount, "one count across both nodes");
      assert.deepEqual(nodes.map((node) => node.degraded), [false, false]);
      assert.deepEqual(warnings, []);
    } finally {
      proxy.replyDelayMs = 0;
      await Promise.all(nodes.map((node) => node.close()));
    }
  });
});

describe("rate limits with Redis unreachable", () => {
  const proxy = new TcpProxy(redisUrl);
  let admin: Redis;
  before(async () => {
    admin = new Redis(redisUrl);
    await proxy.open();
  });
  after(async () => {
    await proxy.close();
    const keys = await admin.keys(`${prefix}away:*`);
    if (keys.length > 0) await admin.del(...keys);
    await admin.quit();
  });

  test("refused, then black-holed: local limits after three failed probes, back to Redis only after three good ones", async () => {
    const keyPrefix = `${prefix}away:`;
    const nodes = [0, 1].map(() => {
      const outcomes: ProbeOutcome[] = [];
      const logger = recordingLogger();
      // Fast numbers so the test is short; the defaults (1 s, 2 s) only stretch the same sequence.
      const limiter = new RedisRateLimiter({ url: proxy.url(redisUrl), keyPrefix, logger, commandTimeoutMs: 500, health: { intervalMs: 100, timeoutMs: 500, onProbe: (outcome) => outcomes.push(outcome) } });
      return { limiter, outcomes, logger };
    });
    const consumeAll = (key: string, limit: number) => Promise.all(nodes.map(({ limiter }) => limiter.consume([{ key, limit, cost: 1 }])));
    try {
      assert.deepEqual((await consumeAll("before:rpm", 60)).map((decision) => decision.allowed), [true, true]);
      assert.equal(await admin.exists(`${keyPrefix}before:rpm`), 1);

      // 1. The route is refused.
      let from = nodes.map(({ outcomes }) => outcomes.length);
      await proxy.close();
      await waitFor(() => nodes.every(({ limiter }) => limiter.degraded), 20_000, "both nodes to switch to local limits");
      nodes.forEach(({ outcomes }, index) => assertSwitchedAfterRun(outcomes, from[index]!, false, 3));
      // Local limits: each node grants the limit of 2 on its own, and nothing reaches Redis.
      for (let round = 0; round < 3; round++) {
        const decisions = await consumeAll("refused:rpm", 2);
        assert.deepEqual(decisions.map((decision) => decision.allowed), [round < 2, round < 2], `round ${round + 1}`);
      }

      from = nodes.map(({ outcomes }) => outcomes.length);
      await proxy.open();
      await waitFor(() => nodes.every(({ limiter }) => !limiter.degraded), 20_000, "both nodes to go back to Redis");
      nodes.forEach(({ outcomes }, index) => assertSwitchedAfterRun(outcomes, from[index]!, true, 3));
      // Back on Redis, which took what the nodes charged while away (merged, each key keeping the fuller bucket; the
      // merge goes before any later command on the node's connection).
      assert.deepEqual((await consumeAll("refused:rpm", 2)).map((decision) => decision.allowed), [false, false]);
      assert.equal(await admin.exists(`${keyPrefix}refused:rpm`), 1, "the local charges were merged into Redis");
      assert.deepEqual((await consumeAll("after:rpm", 60)).map((decision) => decision.allowed), [true, true]);
      assert.equal(await admin.exists(`${keyPrefix}after:rpm`), 1, "charged in Redis again");

      // 2. The route black-holes: probes time out instead of failing at once.
      from = nodes.map(({ outcomes }) => outcomes.length);
      proxy.startBlackHole();
      const started = Date.now();
      const waited = await consumeAll("hole:rpm", 60);
      assert.deepEqual(waited.map((decision) => decision.allowed), [true, true], "answered locally after the command's wait");
      assert.ok(Date.now() - started >= 450, "the request waited for Redis first");
      await waitFor(() => nodes.every(({ limiter }) => limiter.degraded), 20_000, "both nodes to switch to local limits");
      nodes.forEach(({ outcomes }, index) => assertSwitchedAfterRun(outcomes, from[index]!, false, 3));

      from = nodes.map(({ outcomes }) => outcomes.length);
      proxy.endBlackHole();
      await waitFor(() => nodes.every(({ limiter }) => !limiter.degraded), 20_000, "both nodes to go back to Redis");
      nodes.forEach(({ outcomes }, index) => assertSwitchedAfterRun(outcomes, from[index]!, true, 3));
      assert.deepEqual((await consumeAll("end:rpm", 60)).map((decision) => decision.allowed), [true, true]);
      assert.equal(await admin.exists(`${keyPrefix}end:rpm`), 1);

      for (const { logger } of nodes) assert.deepEqual([logger.warnings.length, logger.infos.length], [2, 2], "each switch logged once");
    } finally {
      await Promise.all(nodes.map(({ limiter }) => limiter.close()));
    }
  });
});
