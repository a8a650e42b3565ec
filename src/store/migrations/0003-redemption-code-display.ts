import type { Kysely } from "kysely";
import type { Migration } from "kysely/migration";

/** Redemption codes keep a short display prefix (never enough to redeem) so admins can tell them apart. */
export const migration0003RedemptionCodeDisplay: Migration = {
  async up(database: Kysely<unknown>) {
    await database.schema.alterTable("redemption_codes").addColumn("display_prefix", "text").execute();
    await database.schema.createIndex("redemption_codes_created").on("redemption_codes").columns(["created_at"]).execute();
  },
  async down(database: Kysely<unknown>) {
    await database.schema.dropIndex("redemption_codes_created").execute();
    await database.schema.alterTable("redemption_codes").dropColumn("display_prefix").execute();
  },
};
