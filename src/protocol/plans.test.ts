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
