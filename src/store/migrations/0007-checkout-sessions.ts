import type { Kysely } from "kysely";
import type { Migration } from "kysely/migration";

/**
 * Stripe Checkout sessions as Turnpike started them: the account, the plan and what it cost
 * (amount and currency) and granted (credit and days) at that moment. A paid session is granted
 * once, and only when what Stripe says was paid matches what was recorded here.
 */
export const migration0007CheckoutSessions: Migration = {
  async up(database: Kysely<unknown>) {
    await database.schema
      .createTable("checkout_sessions")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("account_id", "text", (column) => column.notNull())
      .addColumn("plan_id", "text", (column) => column.notNull())
      .addColumn("amount", "bigint", (column) => column.notNull())
      .addColumn("currency", "text", (column) => column.notNull())
      .addColumn("credit", "bigint", (column) => column.notNull())
      .addColumn("days", "integer")
      .addColumn("status", "text", (column) => column.notNull())
      .addColumn("event_id", "text")
      .addColumn("created_at", "bigint", (column) => column.notNull())
      .addColumn("closed_at", "bigint")
      .execute();
    await database.schema.createIndex("checkout_sessions_account").on("checkout_sessions").columns(["account_id", "created_at"]).execute();
  },
  async down(database: Kysely<unknown>) {
    await database.schema.dropTable("checkout_sessions").execute();
  },
};
