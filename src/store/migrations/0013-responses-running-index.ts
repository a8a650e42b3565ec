import type { Kysely } from "kysely";
import { sql } from "kysely";
import type { Migration } from "kysely/migration";

/**
 * The sweeper's look for background responses whose node died (`ResponseStore.failStale`): a
 * partial index over the few rows still queued or in progress, by their last save. Without it
 * every node's sweep (every 10 s by default) would scan a month of stored responses.
 */
export const migration0013ResponsesRunningIndex: Migration = {
  async up(database: Kysely<unknown>) {
    await database.schema
      .createIndex("responses_running")
      .on("responses")
      .column("updated_at")
      .where(sql.ref("background"), "=", 1)
      .where(sql.ref("status"), "in", ["queued", "in_progress"])
      .execute();
  },
  async down(database: Kysely<unknown>) {
    await database.schema.dropIndex("responses_running").execute();
  },
};
