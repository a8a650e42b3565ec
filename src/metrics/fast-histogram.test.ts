import { test } from "node:test";
import assert from "node:assert/strict";
import { Histogram, Registry } from "prom-client";
import { FastHistogram } from "./fast-histogram.ts";

const BUCKETS = [0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

/** The same observations through prom-client's Histogram and a FastHistogram, each in a registry of its own. */
function both(observations: ReadonlyArray<readonly [route: string, tier: string, seconds: number]>) {
  const promRegistry = new Registry();
  const fastRegistry = new Registry();
  const config = { name: "turnpike_test_seconds", help: "A test histogram", labelNames: ["route", "tier"] as const, buckets: BUCKETS };
  const prom = new Histogram({ ...config, labelNames: [...config.labelNames], registers: [promRegistry] });
  const fast = new FastHistogram({ ...config, registers: [fastRegistry] });
  for (const [route, tier, seconds] of observations) {
    prom.observe({ route, tier }, seconds);
    fast.child(route, tier).observe(seconds);
  }
  return { promRegistry, fastRegistry, prom, fast };
}

test("a FastHistogram renders the same exposition text and JSON as prom-client's Histogram for the same observations", async () => {
  // On bounds, between them, past the last one, zero, several label sets in any order.
  const observations: Array<readonly [string, string, number]> = [
    ["/v1/chat/completions", "default", 0.005],
    ["/v1/chat/completions", "default", 0.0051],
    ["/v1/chat/completions", "flex", 0],
    ["/v1/models", "default", 3.5],
    ["/v1/chat/completions", "default", 2.5],
    ["/v1/models", "default", 0.3],
    ["/v1/chat/completions", "flex", 120],
  ];
  for (let index = 0; index < 200; index++) observations.push(["/v1/embeddings", index % 2 === 0 ? "default" : "priority", (index * 0.0137) % 3]);
  const { promRegistry, fastRegistry } = both(observations);
  assert.equal(await fastRegistry.metrics(), await promRegistry.metrics());
  // As JSON text (prom-client's entries carry `exemplar: undefined`, which JSON drops).
  const asJson = async (registry: Registry) => JSON.parse(JSON.stringify(await registry.getMetricsAsJSON())) as unknown;
  assert.deepEqual(await asJson(fastRegistry), await asJson(promRegistry));
  assert.match(await fastRegistry.metrics(), /turnpike_test_seconds_bucket\{le="0.005",route="\/v1\/chat\/completions",tier="default"\} 1\n/);
});

test("the record form, children kept across calls, and reset", async () => {
  const { promRegistry, fastRegistry, prom, fast } = both([["/a", "x", 0.2]]);
  const child = fast.child("/a", "x");
  child.observe(0.7);
  prom.observe({ route: "/a", tier: "x" }, 0.7);
  fast.observe({ route: "/b", tier: "y" }, 0.01);
  prom.observe({ route: "/b", tier: "y" }, 0.01);
  assert.equal(await fastRegistry.metrics(), await promRegistry.metrics());
  // A child handed out before a reset observes into the fresh state after it.
  fastRegistry.resetMetrics();
  promRegistry.resetMetrics();
  child.observe(0.04);
  prom.observe({ route: "/a", tier: "x" }, 0.04);
  assert.equal(await fastRegistry.metrics(), await promRegistry.metrics());
  assert.throws(() => child.observe(Number.NaN), /not a valid number/);
});
