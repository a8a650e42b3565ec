import type { Kysely } from "kysely";
import type { Migration } from "kysely/migration";

/**
 * Refunds and disputes of Stripe purchases (issue 19). A granted Checkout session keeps its
 * payment intent (`pi_…`), which is what Stripe's `charge.refunded` and `charge.dispute.*` events
 * name; and the URL Stripe gave it, so that an open session is handed out again instead of a new
 * one being made. Each refund or dispute that took credit back is a `checkout_reversals` row,
 * keyed by what makes it happen once (the refund event, or the dispute), with the credit it
 * accounts for, what it took back, and what had been spent already.
 */
export const migration0010CheckoutReversals: Migration = {
  async up(database: Kysely<unknown>) {
    await database.schema.alterTable("checkout_sessions").addColumn("payment_intent", "text").execute();
    await database.schema.alterTable("checkout_sessions").addColumn("url", "text").execute();
    await database.schema.createIndex("checkout_sessions_payment_intent").on("checkout_sessions").column("payment_intent").execute();
    await database.schema
      .createTable("checkout_reversals")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("session_id", "text", (column) => column.notNull())
      .addColumn("account_id", "text", (column) => column.notNull())
      .addColumn("kind", "text", (column) => column.notNull())
      .addColumn("event_id", "text", (column) => column.notNull())
      .addColumn("amount", "bigint", (column) => column.notNull())
      .addColumn("share", "bigint", (column) => column.notNull())
      .addColumn("taken", "bigint", (column) => column.notNull())
      .addColumn("spent", "bigint", (column) => column.notNull())
      .addColumn("entry_id", "text", (column) => column.notNull())
      .addColumn("created_at", "bigint", (column) => column.notNull())
      .execute();
    await database.schema.createIndex("checkout_reversals_session").on("checkout_reversals").column("session_id").execute();
    await database.schema.createIndex("checkout_reversals_entry").on("checkout_reversals").column("entry_id").execute();
  },
  async down(database: Kysely<unknown>) {
    await database.schema.dropTable("checkout_reversals").execute();
    await database.schema.dropIndex("checkout_sessions_payment_intent").execute();
    await database.schema.alterTable("checkout_sessions").dropColumn("url").execute();
    await database.schema.alterTable("checkout_sessions").dropColumn("payment_intent").execute();
  },
};
