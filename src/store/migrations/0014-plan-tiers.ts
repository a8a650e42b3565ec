import type { Kysely } from "kysely";
import type { Migration } from "kysely/migration";

/**
 * Fair share and service tiers (issue 24): each plan's `weight` (its accounts' share of a
 * saturated model, 1 for the plans there were) and `service_tiers` (JSON: the tiers it allows,
 * each with its price multiplier; null: `default` alone at 1); each usage record, and the
 * checkpoint it may be made from, says the tier it was served in (null for older ones: `default`).
 */
export const migration0014PlanTiers: Migration = {
  async up(database: Kysely<unknown>) {
    await database.schema.alterTable("plans").addColumn("weight", "double precision", (column) => column.notNull().defaultTo(1)).execute();
    await database.schema.alterTable("plans").addColumn("service_tiers", "text").execute();
    await database.schema.alterTable("usage_records").addColumn("service_tier", "text").execute();
    await database.schema.alterTable("usage_checkpoints").addColumn("service_tier", "text").execute();
  },
  async down(database: Kysely<unknown>) {
    await database.schema.alterTable("usage_checkpoints").dropColumn("service_tier").execute();
    await database.schema.alterTable("usage_records").dropColumn("service_tier").execute();
    await database.schema.alterTable("plans").dropColumn("service_tiers").execute();
    await database.schema.alterTable("plans").dropColumn("weight").execute();
  },
};
