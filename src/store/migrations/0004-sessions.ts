import type { Kysely } from "kysely";
import type { Migration } from "kysely/migration";

/** Console sessions: only the SHA-256 of the session token is stored. */
export const migration0004Sessions: Migration = {
  async up(database: Kysely<unknown>) {
    await database.schema
      .createTable("sessions")
      .addColumn("token_hash", "text", (column) => column.primaryKey())
      .addColumn("account_id", "text", (column) => column.notNull().references("accounts.id"))
      .addColumn("created_at", "bigint", (column) => column.notNull())
      .addColumn("expires_at", "bigint", (column) => column.notNull())
      .execute();
    await database.schema.createIndex("sessions_account").on("sessions").columns(["account_id", "expires_at"]).execute();
  },
  async down(database: Kysely<unknown>) {
    await database.schema.dropTable("sessions").execute();
  },
};
