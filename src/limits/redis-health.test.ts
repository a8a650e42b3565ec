/**
 * The health probe's hysteresis, driven probe by probe with a scripted probe (no Redis, no interval timer: `start` is
 * given an interval longer than any test, and each probe is run with `probeNow`).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { RedisHealth, withTimeout, type ProbeOutcome } from "./redis-health.ts";

/** A health whose probe answers from `script` (true: success, false: failure, "hang": never answers). */
function scripted(options: { failuresToUnreachable?: number; successesToReachable?: number; timeoutMs?: number } = {}) {
  const script: Array<boolean | "hang"> = [];
  const switches: boolean[] = [];
  const outcomes: ProbeOutcome[] = [];
  const health = new RedisHealth({
    intervalMs: 3_600_000,
    timeoutMs: options.timeoutMs ?? 1000,
    failuresToUnreachable: options.failuresToUnreachable ?? 3,
    successesToReachable: options.successesToReachable ?? 3,
    onProbe: (outcome) => outcomes.push(outcome),
    probe: () => {
      const next = script.shift();
      if (next === undefined) throw new Error("the test ran more probes than it scripted");
      if (next === "hang") return new Promise(() => {});
      return next ? Promise.resolve("PONG") : Promise.reject(new Error("connection refused"));
    },
    onChange: (reachable) => switches.push(reachable),
  });
  const run = async (...results: Array<boolean | "hang">) => {
    script.push(...results);
    for (let index = 0; index < results.length; index++) await health.probeNow();
  };
  return { health, switches, outcomes, run };
}

describe("RedisHealth", () => {
  test("stays reachable through fewer failures in a row than the threshold, and a success resets the count", async () => {
    const { health, switches, run } = scripted();
    health.start(true);
    try {
      await run(false, false, true, false, false, true);
      assert.equal(health.reachable, true);
      assert.deepEqual(switches, []);
    } finally {
      health.stop();
    }
  });

  test("becomes unreachable on the third failure in a row, and reports it once", async () => {
    const { health, switches, outcomes, run } = scripted();
    health.start(true);
    try {
      await run(false, false, false, false, false);
      assert.deepEqual(
        outcomes.map((outcome) => outcome.reachable),
        [true, true, false, false, false],
      );
      assert.deepEqual(switches, [false]);
    } finally {
      health.stop();
    }
  });

  test("a probe that does not answer within its timeout counts as a failure", async () => {
    const { health, switches, outcomes, run } = scripted({ timeoutMs: 20 });
    health.start(true);
    try {
      await run("hang", "hang", "hang");
      assert.deepEqual(outcomes, [
        { ok: false, reachable: true },
        { ok: false, reachable: true },
        { ok: false, reachable: false },
      ]);
      assert.deepEqual(switches, [false]);
    } finally {
      health.stop();
    }
  });

  test("does not flap back on one success: only three successes in a row make it reachable again", async () => {
    const { health, switches, outcomes, run } = scripted();
    health.start(true);
    try {
      await run(false, false, false);
      await run(true, false, true, true, false, true, true, true);
      assert.deepEqual(
        outcomes.slice(3).map((outcome) => [outcome.ok, outcome.reachable]),
        [
          [true, false],
          [false, false],
          [true, false],
          [true, false],
          [false, false],
          [true, false],
          [true, false],
          [true, true],
        ],
      );
      assert.deepEqual(switches, [false, true]);
    } finally {
      health.stop();
    }
  });

  test("starting unreachable is reported at once, and needs the successes in a row like any return", async () => {
    const { health, switches, run } = scripted({ successesToReachable: 2 });
    health.start(false, new Error("refused"));
    try {
      assert.deepEqual(switches, [false]);
      await run(true);
      assert.equal(health.reachable, false);
      await run(true);
      assert.equal(health.reachable, true);
      assert.deepEqual(switches, [false, true]);
    } finally {
      health.stop();
    }
  });

  test("markUnreachable switches at once and restarts the count of successes", async () => {
    const { health, switches, run } = scripted();
    health.start(true);
    try {
      await run(true, true);
      health.markUnreachable(new Error("the merge failed"));
      health.markUnreachable(new Error("again"));
      assert.deepEqual(switches, [false]);
      await run(true, true);
      assert.equal(health.reachable, false, "the two successes before the switch do not count");
      await run(true);
      assert.deepEqual(switches, [false, true]);
    } finally {
      health.stop();
    }
  });

  test("probes on its own every interval once started, and not after stop", async () => {
    let probes = 0;
    const health = new RedisHealth({ intervalMs: 10, probe: async () => void probes++, onChange: () => {} });
    health.start(true);
    const deadline = Date.now() + 10_000;
    while (probes < 3 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    health.stop();
    assert.ok(probes >= 3, `probed ${probes} times`);
    const stoppedAt = probes;
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.ok(probes <= stoppedAt + 1, "at most the probe already running finished after stop");
  });
});

test("withTimeout passes a result through, and rejects a promise that takes too long", async () => {
  assert.equal(await withTimeout(Promise.resolve(7), 1000, "a command"), 7);
  await assert.rejects(withTimeout(new Promise(() => {}), 10, "a command"), /a command took longer than 10 ms/);
});
