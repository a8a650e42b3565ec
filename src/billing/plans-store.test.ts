/** Plans in both stores: weight and service tiers saved and read back; a plan saved before they existed reads as weight 1, `default` alone at 1. */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { sql } from "kysely";
import { createAccount } from "../accounts/accounts.ts";
import { planSchema } from "../protocol/plans.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../test/helpers/databases.ts";
import { findAccountPlan, findAccountStanding, findPlan, listPlans, savePlan } from "./plans-store.ts";

const tiered = planSchema.parse({
  id: "tiered",
  name: "Tiered",
  price: { amount: 900, currency: "usd" },
  credit: 1000,
  weight: 1.1,
  service_tiers: { default: 1, flex: 0.5, priority: 2.25 },
});

for (const backend of backends) {
  describe(`plans store (${backend})`, () => {
    let store: TestDatabase;
    before(async () => {
      store = await openTestDatabase(backend);
    });
    after(async () => {
      await store?.close();
    });

    it("keeps a plan's weight and service tiers, and edits them", async () => {
      await savePlan(store.database, tiered, "admin");
      assert.deepEqual(await findPlan(store.database, "tiered"), tiered);
      assert.deepEqual((await listPlans(store.database)).find((plan) => plan.id === "tiered"), tiered);
      const account = await createAccount(store.database, { email: `tiers-${backend}@example.com` });
      await store.database.updateTable("accounts").set({ plan_id: "tiered" }).where("id", "=", account.id).execute();
      assert.deepEqual(await findAccountPlan(store.database, account.id), tiered);
      assert.deepEqual((await findAccountStanding(store.database, account.id))?.plan, tiered);
      const edited = { ...tiered, weight: 0.25, service_tiers: { flex: 0.1 } };
      await savePlan(store.database, edited, "admin");
      assert.deepEqual(await findPlan(store.database, "tiered"), edited);
    });

    it("reads a plan saved before weights and tiers as weight 1 with the default tier alone at 1", async () => {
      await store.database
        .insertInto("plans")
        .values({ id: "older", name: "Older", price_amount: 0, price_currency: "usd", credit: 5, days: null, rpm: null, tpm: null, models: null, origin: "config", created_at: 1, updated_at: 1 })
        .execute();
      const row = await store.database.selectFrom("plans").select(["weight", "service_tiers"]).where("id", "=", "older").executeTakeFirstOrThrow();
      assert.equal(Number(row.weight), 1);
      assert.equal(row.service_tiers, null);
      const older = await findPlan(store.database, "older");
      assert.equal(older?.weight, 1);
      assert.deepEqual(older?.service_tiers, { default: 1 });
      // A weight with no exact binary form (0.3) survives the column as it was written.
      await sql`update plans set weight = 0.3 where id = 'older'`.execute(store.database);
      assert.equal((await findPlan(store.database, "older"))?.weight, 0.3);
    });
  });
}
