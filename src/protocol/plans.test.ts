import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { ConfigError, loadSettings } from "../config/load.ts";
import { temporaryDirectory } from "../../test/helpers/server.ts";
import { MAX_CREDIT, MAX_PLAN_DAYS, MAX_PRICE_AMOUNT } from "./money-bounds.ts";
import { planOutOfBounds, planSchema, type Plan } from "./plans.ts";

const plan = { id: "pro", name: "Pro", price: { amount: 2000, currency: "USD" }, credit: 50000, days: 30 };

test("a plan at the maxima is valid; one past any of them is refused, naming the field", () => {
  assert.equal(planSchema.parse({ ...plan, credit: MAX_CREDIT, days: MAX_PLAN_DAYS, price: { amount: MAX_PRICE_AMOUNT, currency: "usd" } }).credit, MAX_CREDIT);
  for (const [changes, field] of [
    [{ credit: 9007199254740991 }, "credit"],
    [{ credit: MAX_CREDIT + 1 }, "credit"],
    [{ days: MAX_PLAN_DAYS + 1 }, "days"],
    [{ price: { amount: MAX_PRICE_AMOUNT + 1, currency: "usd" } }, "price.amount"],
  ] as const) {
    const parsed = planSchema.safeParse({ ...plan, ...changes });
    assert.equal(parsed.success, false, JSON.stringify(changes));
    assert.equal(parsed.error?.issues[0]?.path.join("."), field);
  }
});

test("a config file with a plan past the maxima does not load, and says which", () => {
  const file = path.join(temporaryDirectory(), "turnpike.json");
  fs.writeFileSync(file, JSON.stringify({ plans: [{ ...plan, credit: 9007199254740991 }] }));
  assert.throws(
    () => loadSettings({ flags: {}, env: {}, configFile: file }),
    (error: unknown) => error instanceof ConfigError && /plans/.test(error.message) && /credit/.test(error.message),
  );
});

test("tells which field of a stored plan is out of bounds", () => {
  const stored: Plan = { ...planSchema.parse(plan), credit: MAX_CREDIT * 2 };
  assert.match(planOutOfBounds(stored) ?? "", /'credit' out of bounds/);
  assert.equal(planOutOfBounds(planSchema.parse(plan)), null);
});

test("a plan's weight and service tiers: defaults, bounds, hundredths, at least one tier", () => {
  const parsed = planSchema.parse(plan);
  assert.equal(parsed.weight, 1);
  assert.deepEqual(parsed.service_tiers, { default: 1 });
  const tiered = planSchema.parse({ ...plan, weight: 2.5, service_tiers: { default: 1, flex: 0.5, priority: 2.25 } });
  assert.equal(tiered.weight, 2.5);
  assert.deepEqual(tiered.service_tiers, { default: 1, flex: 0.5, priority: 2.25 });
  assert.deepEqual(planSchema.parse({ ...plan, service_tiers: { flex: 0 } }).service_tiers, { flex: 0 });
  assert.equal(planSchema.parse({ ...plan, weight: 1000 }).weight, 1000);
  for (const [changes, field] of [
    [{ weight: 0 }, "weight"],
    [{ weight: -1 }, "weight"],
    [{ weight: 1000.5 }, "weight"],
    [{ service_tiers: {} }, "service_tiers"],
    [{ service_tiers: { default: 1, flex: 0.125 } }, "service_tiers.flex"],
    [{ service_tiers: { priority: 100.01 } }, "service_tiers.priority"],
    [{ service_tiers: { default: -0.5 } }, "service_tiers.default"],
    [{ service_tiers: { default: 1, scale: 1 } }, "service_tiers"],
  ] as const) {
    const checked = planSchema.safeParse({ ...plan, ...changes });
    assert.equal(checked.success, false, JSON.stringify(changes));
    assert.equal(checked.error?.issues[0]?.path.join("."), field, JSON.stringify(changes));
  }
});
