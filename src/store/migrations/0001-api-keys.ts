import type { Kysely } from "kysely";
import type { Migration } from "kysely/migration";

export const migration0001ApiKeys: Migration = {
  async up(database: Kysely<unknown>) {
    await database.schema
      .createTable("api_keys")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("name", "text", (column) => column.notNull())
      .addColumn("display_prefix", "text", (column) => column.notNull())
      .addColumn("key_hash", "text", (column) => column.notNull().unique())
      .addColumn("account_id", "text")
      .addColumn("created_at", "bigint", (column) => column.notNull())
      .addColumn("revoked_at", "bigint")
      .addColumn("expires_at", "bigint")
      .addColumn("last_used_at", "bigint")
      .execute();
    await database.schema.createIndex("api_keys_account_id").on("api_keys").column("account_id").execute();
  },
  async down(database: Kysely<unknown>) {
    await database.schema.dropTable("api_keys").execute();
  },
};
