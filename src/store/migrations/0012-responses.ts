import type { Kysely } from "kysely";
import type { Migration } from "kysely/migration";

/**
 * The Responses API's stored responses (issue 21): one row a response, owned by the account of
 * the key that made it, holding the items its request added and the response resource as
 * `GET /v1/responses/{id}` returns it (JSON text, size-capped by `responses/store.ts`).
 * `previous_response_id` links a conversation's responses; the chain is walked by primary key.
 * No foreign key to `accounts`: operator keys own responses too (`account_id` null), like usage
 * records. The sweeper deletes rows past `expires_at` (the retention setting).
 */
export const migration0012Responses: Migration = {
  async up(database: Kysely<unknown>) {
    await database.schema
      .createTable("responses")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("account_id", "text")
      .addColumn("key_id", "text")
      .addColumn("model", "text", (column) => column.notNull())
      .addColumn("status", "text", (column) => column.notNull())
      .addColumn("created_at", "bigint", (column) => column.notNull())
      .addColumn("updated_at", "bigint", (column) => column.notNull())
      .addColumn("expires_at", "bigint", (column) => column.notNull())
      .addColumn("previous_response_id", "text")
      .addColumn("background", "integer", (column) => column.notNull())
      .addColumn("cancel_requested", "integer", (column) => column.notNull().defaultTo(0))
      .addColumn("size_bytes", "bigint", (column) => column.notNull())
      .addColumn("input_items", "text", (column) => column.notNull())
      .addColumn("response", "text", (column) => column.notNull())
      .execute();
    // Every lookup is by id (the primary key), the account checked on the row: no index by account,
    // which would cost every save a third B-tree write (nothing lists an account's responses yet).
    // The sweeper's `expires_at <= now`.
    await database.schema.createIndex("responses_expires").on("responses").column("expires_at").execute();
  },
  async down(database: Kysely<unknown>) {
    await database.schema.dropTable("responses").execute();
  },
};
