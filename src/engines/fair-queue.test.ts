/**
 * The fair queue, through the slot queue that uses it: bands before fairness, the least served
 * account next, weights, the lift of a returning account, per-account and total caps, flex wait
 * limits, positions and snapshots. Deterministic: requests are "served" tokens by the test.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { EngineOverloadedError, QueueShareExceededError, ResourceUnavailableError } from "../protocol/errors.ts";
import type { ServiceTier } from "../protocol/service-tiers.ts";
import { FairQueue, type QueueTicket } from "./fair-queue.ts";
import { SlotQueue, type SlotLease } from "./slot-queue.ts";

const never = () => new AbortController().signal;
const ticket = (account: string, tier: ServiceTier = "default", weight = 1, maxWaitMs?: number): QueueTicket => ({
  account,
  weight,
  tier,
  ...(maxWaitMs === undefined ? {} : { maxWaitMs }),
});

/** A request that will be served `tokens` once granted (its counter moves by tokens ÷ weight). */
function request(queue: SlotQueue<string>, who: QueueTicket, tokens: number, log: string[], held?: Array<{ label: string; lease: SlotLease<string> }>) {
  let served = 0;
  const waiting = queue.acquire(never(), undefined, { ticket: who, served: () => served });
  const lease = waiting.then((granted) => {
    log.push(who.account);
    held?.push({ label: who.account, lease: granted });
    served = tokens;
    return granted;
  });
  lease.catch(() => {});
  return { waiting, lease };
}

async function settle(): Promise<void> {
  await new Promise((resolve) => setImmediate(resolve));
}

describe("FairQueue", () => {
  it("serves a waiting priority request before default ones, and default before flex, whatever the arrival", async () => {
    const queue = new SlotQueue(["only"], 8);
    const log: string[] = [];
    const holder = await queue.acquire(never(), undefined, { ticket: ticket("x"), served: () => 1 });
    const flex = request(queue, ticket("f", "flex"), 1, log);
    const plain = request(queue, ticket("d"), 1, log);
    const urgent = request(queue, ticket("p", "priority"), 1, log);
    holder.release();
    for (const next of [urgent, plain, flex]) {
      (await next.lease).release();
      await settle();
    }
    assert.deepEqual(log, ["p", "d", "f"]);
  });

  it("gives the next slot to the account served least, not to the one that queued first", async () => {
    const queue = new SlotQueue(["only"], 64);
    const log: string[] = [];
    const holder = await queue.acquire(never(), undefined, { ticket: ticket("a"), served: () => 100 });
    // A floods first; B's one request arrives after A's ten.
    const floods = Array.from({ length: 10 }, () => request(queue, ticket("a"), 100, log));
    const single = request(queue, ticket("b"), 10, log);
    assert.equal(single.waiting.position(), 1, "B is next: A was served already");
    holder.release();
    (await single.lease).release();
    for (const flood of floods) (await flood.lease).release();
    assert.equal(log[0], "b");
    assert.equal(log.filter((who) => who === "a").length, 10, "A is never starved: it gets every slot B does not use");
  });

  it("shares slots in proportion to the plans' weights among backlogged accounts", async () => {
    const queue = new SlotQueue(["s0", "s1"], 400);
    const weights: Record<string, number> = { w2: 2, a: 1, b: 1, c: 1 };
    const servedTokens: Record<string, number> = { w2: 0, a: 0, b: 0, c: 0 };
    const held: Array<{ label: string; lease: SlotLease<string> }> = [];
    const log: string[] = [];
    for (let round = 0; round < 80; round++) {
      for (const account of Object.keys(weights)) request(queue, ticket(account, "default", weights[account]), 10, log, held);
    }
    // 150 turns: the slot held longest is given back, and the queue picks who gets it.
    for (let turn = 0; turn < 150; turn++) {
      await settle();
      const oldest = held.shift();
      assert.ok(oldest !== undefined, `a slot is held at turn ${turn}`);
      servedTokens[oldest.label]! += 10;
      oldest.lease.release();
    }
    const total = Object.values(servedTokens).reduce((sum, value) => sum + value, 0);
    const share = (account: string) => servedTokens[account]! / total;
    assert.ok(Math.abs(share("w2") - 0.4) <= 0.04, `weight 2 got ${share("w2")}`);
    for (const account of ["a", "b", "c"]) assert.ok(Math.abs(share(account) - 0.2) <= 0.02, `${account} got ${share(account)}`);
  });

  it("lifts an account that comes back to the least served active one: no credit banked while idle", () => {
    const queue = new FairQueue<undefined>({ maxWaiting: 8, describeRunning: () => "1 request is running" });
    let servedA = 0;
    const running = queue.begin(ticket("a"), () => servedA);
    servedA = 1000;
    assert.equal(queue.counterOf("a"), 1000);
    // B has never been served: it starts at A's counter, not at 0 (it cannot then hold the slots for 1000 tokens).
    queue.join(ticket("b"), never(), undefined, () => 0).catch(() => {});
    assert.equal(queue.counterOf("b"), 1000);
    running.end();
  });

  it("sets an account that comes back to the current minimum: not starved for what it was served before it went idle", () => {
    const queue = new FairQueue<undefined>({ maxWaiting: 8, describeRunning: () => "" });
    let servedA = 0;
    const a = queue.begin(ticket("a"), () => servedA);
    servedA = 5000;
    a.end();
    const b = queue.begin(ticket("b"), () => 0);
    // B arrived with nobody active: it starts where A left off, not at 0 (it would hold every slot for 5000 tokens).
    assert.equal(queue.counterOf("b"), 5000);
    b.end();
    const c = queue.begin(ticket("c"), () => 100);
    const again = queue.begin(ticket("a"), () => 0);
    assert.equal(queue.counterOf("a"), queue.counterOf("c"), "A is back at the active minimum, not at its own 5000");
    c.end();
    again.end();
  });

  it("refuses one account past its share of the queue with 429, and anyone past the whole queue with 503", async () => {
    const queue = new SlotQueue(["only"], 4, { maxWaitingPerAccount: 2 });
    await queue.acquire(never());
    queue.acquire(never(), undefined, { ticket: ticket("a"), served: () => 0 }).catch(() => {});
    queue.acquire(never(), undefined, { ticket: ticket("a"), served: () => 0 }).catch(() => {});
    assert.throws(() => queue.acquire(never(), undefined, { ticket: ticket("a"), served: () => 0 }), (error: unknown) => error instanceof QueueShareExceededError && error.status === 429);
    queue.acquire(never(), undefined, { ticket: ticket("b"), served: () => 0 }).catch(() => {});
    queue.acquire(never(), undefined, { ticket: ticket("c"), served: () => 0 }).catch(() => {});
    assert.throws(() => queue.acquire(never(), undefined, { ticket: ticket("d"), served: () => 0 }), (error: unknown) => error instanceof EngineOverloadedError && error.status === 503);
  });

  it("refuses a flex request with 429 and a retry-after once its wait limit passes, and frees its place", async () => {
    const waits: Array<[ServiceTier, string]> = [];
    const queue = new SlotQueue(["only"], 4, { onWaited: (tier, _ms, outcome) => waits.push([tier, outcome]) });
    const holder = await queue.acquire(never());
    const flex = queue.acquire(never(), undefined, { ticket: ticket("f", "flex", 1, 20), served: () => 0 });
    await assert.rejects(flex, (error: unknown) => error instanceof ResourceUnavailableError && error.status === 429 && error.headers["retry-after"] !== undefined);
    assert.equal(queue.waiting, 0);
    assert.deepEqual(waits, [["flex", "refused"]]);
    holder.release();
    // Idle: flex is served at once.
    const idle = await queue.acquire(never(), undefined, { ticket: ticket("f", "flex", 1, 20), served: () => 0 });
    assert.equal(idle.slot, "only");
  });

  it("frees the place of a waiter whose client left, at once", async () => {
    const queue = new SlotQueue(["only"], 4);
    const holder = await queue.acquire(never());
    const controller = new AbortController();
    const left = queue.acquire(controller.signal, undefined, { ticket: ticket("a"), served: () => 0 });
    const stays = queue.acquire(never(), undefined, { ticket: ticket("b"), served: () => 0 });
    assert.equal(stays.position(), 2);
    controller.abort(new Error("gone"));
    await assert.rejects(left, /gone/);
    assert.equal(queue.waiting, 1);
    assert.equal(stays.position(), 1);
    holder.release();
    assert.equal((await stays).slot, "only");
    assert.equal(stays.position(), 0);
  });

  it("shows waiting per band, the oldest wait and the accounts served most", async () => {
    let now = 1_000;
    const queue = new FairQueue<undefined>({ maxWaiting: 8, describeRunning: () => "", now: () => now });
    let served = 0;
    const run = queue.begin(ticket("big"), () => served);
    served = 300;
    queue.begin(ticket("small"), () => 100);
    queue.join(ticket("p", "priority"), never(), undefined, () => 0).catch(() => {});
    now += 500;
    queue.join(ticket("f", "flex"), never(), undefined, () => 0).catch(() => {});
    now += 250;
    const snapshot = queue.snapshot();
    assert.deepEqual(snapshot.waiting, { priority: 1, default: 0, flex: 1 });
    assert.deepEqual(snapshot.oldestWaitMs, { priority: 750, default: null, flex: 250 });
    assert.equal(snapshot.running, 2);
    assert.equal(snapshot.topShares[0]?.account, "big");
    assert.ok(Math.abs(snapshot.topShares[0]!.share - 0.75) < 0.01);
    run.end();
  });

  it("never makes a request wait while a slot is free, whatever its band (work-conserving)", async () => {
    const queue = new SlotQueue(["s0", "s1"], 0);
    const flex = await queue.acquire(never(), undefined, { ticket: ticket("f", "flex", 1, 10), served: () => 0 });
    const plain = await queue.acquire(never(), undefined, { ticket: ticket("d"), served: () => 0 });
    assert.deepEqual([flex.slot, plain.slot].sort(), ["s0", "s1"]);
  });
});
