/**
 * The pool in front of real HTTP upstreams (fault-injecting ones), driven as the upstream engine
 * drives it: acquire a member, send the request, release with the outcome. A member that answers
 * 429 with retry-after, or keeps timing out, stops getting requests; the other takes them.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { request } from "undici";
import { FaultUpstream } from "../../../test/helpers/fault-upstream.ts";
import { createUpstreamPool } from "./pool.ts";
import type { MemberOutcome, PoolLease } from "./pool-types.ts";
import { retryAfterMs } from "./upstream-json.ts";

/** Sends a streamed chat request on the lease's member and says how it went (a crude engine). */
async function send(lease: PoolLease, timeoutMs = 300): Promise<MemberOutcome> {
  const started = Date.now();
  try {
    const response = await request(`${lease.member.baseUrl}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "fault-model", messages: [{ role: "user", content: "hi" }], stream: true }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    if (response.statusCode !== 200) {
      await response.body.dump();
      return { kind: "status", status: response.statusCode, retryAfterMs: retryAfterMs(response.headers["retry-after"]) };
    }
    const text = await response.body.text();
    return text.endsWith("data: [DONE]\n\n") ? { kind: "ok", timeToFirstTokenMs: Date.now() - started } : { kind: "protocol" };
  } catch {
    return { kind: "timeout" };
  }
}

describe("upstream pool over HTTP", () => {
  let first: FaultUpstream;
  let second: FaultUpstream;
  before(async () => {
    first = await FaultUpstream.start();
    second = await FaultUpstream.start();
  });
  after(() => Promise.all([first.close(), second.close()]));

  it("keeps a member that answered 429 with retry-after out for that long, and a hanging one after the threshold", async () => {
    const outcomes: string[] = [];
    const pool = createUpstreamPool({
      urls: [first.baseUrl, second.baseUrl],
      maxInFlight: 4,
      health: { failureThreshold: 2 },
      onOutcome: (member, outcome) => outcomes.push(`${member.id === first.baseUrl ? "first" : "second"}:${outcome.kind}`),
    });
    first.script({ kind: "status", status: 429, retryAfter: "30" });
    const limited = await pool.acquire({ exclude: new Set([second.baseUrl]), signal: AbortSignal.timeout(1000) });
    limited.release(await send(limited));
    assert.equal(pool.state(), "degraded");
    for (let index = 0; index < 3; index++) {
      const lease = await pool.acquire({ signal: AbortSignal.timeout(1000) });
      assert.equal(lease.member.id, second.baseUrl);
      lease.release(await send(lease));
    }

    second.mode = { kind: "hang" };
    for (let index = 0; index < 2; index++) {
      const lease = await pool.acquire({ signal: AbortSignal.timeout(1000) });
      lease.release(await send(lease, 100));
    }
    assert.equal(pool.state(), "unavailable");
    await assert.rejects(pool.acquire({ signal: AbortSignal.timeout(1000) }), /upstream servers are unavailable/);
    assert.deepEqual(outcomes, ["first:status", "second:ok", "second:ok", "second:ok", "second:timeout", "second:timeout"]);
    // The hung requests' connections were closed by the client: the upstream saw it.
    await Promise.all(second.requests.slice(-2).map((received) => received.clientClosed));
    assert.equal(pool.stats().find((stats) => stats.id === second.baseUrl)?.errors.timeout, 2);
    pool.close();
  });
});
