import type { Kysely } from "kysely";
import type { Migration } from "kysely/migration";

/**
 * Metering from credit leases (issue 12): a usage record names the hold (lease) it was charged
 * against, so closing a lease charges the sum of its records, and a running request's progress
 * is checkpointed, so that a node killed mid-stream is charged for what it had generated.
 * A checkpoint's id is the id its request's usage record will have: the record and the
 * checkpoint are written (or turned into each other by the sweeper) idempotently.
 */
export const migration0009UsageCheckpoints: Migration = {
  async up(database: Kysely<unknown>) {
    await database.schema.alterTable("usage_records").addColumn("hold_id", "text").execute();
    await database.schema.createIndex("usage_records_hold").on("usage_records").column("hold_id").execute();
    await database.schema
      .createTable("usage_checkpoints")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("hold_id", "text", (column) => column.notNull())
      .addColumn("request_id", "text", (column) => column.notNull())
      .addColumn("account_id", "text")
      .addColumn("key_id", "text")
      .addColumn("model", "text", (column) => column.notNull())
      .addColumn("prompt_tokens", "bigint", (column) => column.notNull())
      .addColumn("cached_prompt_tokens", "bigint", (column) => column.notNull())
      .addColumn("completion_tokens", "bigint", (column) => column.notNull())
      .addColumn("reasoning_tokens", "bigint", (column) => column.notNull())
      .addColumn("usage_source", "text")
      .addColumn("cost", "bigint", (column) => column.notNull())
      .addColumn("stream", "integer", (column) => column.notNull())
      .addColumn("created_at", "bigint", (column) => column.notNull())
      .addColumn("updated_at", "bigint", (column) => column.notNull())
      .execute();
    await database.schema.createIndex("usage_checkpoints_hold").on("usage_checkpoints").column("hold_id").execute();
  },
  async down(database: Kysely<unknown>) {
    await database.schema.dropTable("usage_checkpoints").execute();
    await database.schema.dropIndex("usage_records_hold").execute();
    await database.schema.alterTable("usage_records").dropColumn("hold_id").execute();
  },
};
