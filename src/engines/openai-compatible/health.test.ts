/**
 * Active health probes against a real HTTP upstream (the fault-injecting one): the endpoint per
 * kind, the bearer key on every probe, a failed probe taking a member out, a probe after the
 * cooldown bringing it back, and a pool that opens with probes and recovers by itself.
 */
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, describe, it } from "node:test";
import { FaultUpstream } from "../../../test/helpers/fault-upstream.ts";
import { HealthChecker, healthUrl, probeMember } from "./health.ts";
import { PoolMember } from "./member.ts";
import { createUpstreamPool } from "./pool.ts";

async function eventually(check: () => boolean, timeoutMs = 2000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe("health probe URLs", () => {
  it("probes each kind where it answers", () => {
    const base = "http://10.0.0.5:8000/v1";
    assert.equal(healthUrl("vllm", base), "http://10.0.0.5:8000/health");
    assert.equal(healthUrl("sglang", base), "http://10.0.0.5:8000/health");
    assert.equal(healthUrl("llama-server", base), "http://10.0.0.5:8000/health");
    assert.equal(healthUrl("ollama", base), "http://10.0.0.5:8000/api/version");
    assert.equal(healthUrl("openai", "https://api.example.com/v1"), "https://api.example.com/v1/models");
    assert.equal(healthUrl(undefined, base), "http://10.0.0.5:8000/v1/models");
  });
});

describe("health probes", () => {
  let upstream: FaultUpstream;
  before(async () => (upstream = await FaultUpstream.start()));
  after(() => upstream.close());

  it("carries the bearer key and reports a 503 while loading", async () => {
    upstream.healthy = false;
    const answer = await probeMember("llama-server", upstream.baseUrl, { apiKey: "sk-probe-secret", timeoutMs: 1000 });
    upstream.healthy = true;
    assert.deepEqual(answer, { ok: false, failure: "status", status: 503, retryAfterMs: undefined });
    assert.equal(upstream.probeAuthorizations.at(-1), "Bearer sk-probe-secret");
    assert.equal((await probeMember("openai", upstream.baseUrl, { timeoutMs: 1000 })).ok, true);
  });

  it("takes a member out on a failed probe and back on a probe after its cooldown", async () => {
    let now = 0;
    const member = new PoolMember(upstream.baseUrl, 4, { cooldownMs: 1000, now: () => now });
    const checker = new HealthChecker({ kind: "vllm", members: [member], intervalMs: 60_000 });
    upstream.healthy = false;
    await checker.probeAll();
    assert.equal(member.health, "down");
    upstream.healthy = true;
    await checker.probeAll();
    assert.equal(member.health, "down", "still cooling down");
    now += 1000;
    await checker.probeAll();
    assert.equal(member.health, "healthy");
    checker.stop();
  });

  it("opens a pool that probes on an interval and recovers by itself", async () => {
    const changes: boolean[] = [];
    const pool = createUpstreamPool({
      urls: [upstream.origin],
      kind: "llama-server",
      maxInFlight: 2,
      apiKey: "sk-pool-secret",
      healthIntervalMs: 20,
      health: { cooldownMs: 50 },
      onHealthChange: (_member, healthy) => changes.push(healthy),
    });
    upstream.healthy = false;
    await pool.open();
    assert.equal(pool.state(), "unavailable");
    upstream.healthy = true;
    await eventually(() => pool.state() === "ready");
    assert.deepEqual(changes, [false, true]);
    assert.equal((await pool.acquire({ signal: new AbortController().signal })).member.id, upstream.baseUrl);
    pool.close();
    const probes = upstream.probeAuthorizations.length;
    await new Promise((resolve) => setTimeout(resolve, 80));
    assert.equal(upstream.probeAuthorizations.length, probes, "no probe after close");
  });

  it("detects the kind on open when none is given, from the first member that answers", async () => {
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const deadUrl = `http://127.0.0.1:${(closed.address() as net.AddressInfo).port}`;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const pool = createUpstreamPool({ urls: [deadUrl, upstream.baseUrl], maxInFlight: 1 });
    const opening = pool.open();
    assert.equal(pool.open(), opening, "opened once");
    await opening;
    assert.equal(pool.kind, "openai", "the fault upstream offers /v1/models alone");
    pool.close();
  });
});
