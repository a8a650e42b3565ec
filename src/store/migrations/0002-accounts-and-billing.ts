import { sql, type Kysely } from "kysely";
import type { Migration } from "kysely/migration";

export const migration0002AccountsAndBilling: Migration = {
  async up(database: Kysely<unknown>) {
    const schema = database.schema;
    await schema
      .createTable("accounts")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("email", "text", (column) => column.notNull().unique())
      .addColumn("password_hash", "text")
      .addColumn("role", "text", (column) => column.notNull())
      .addColumn("balance", "bigint", (column) => column.notNull().defaultTo(0))
      .addColumn("plan_id", "text")
      .addColumn("created_at", "bigint", (column) => column.notNull())
      .addColumn("disabled_at", "bigint")
      .addCheckConstraint("accounts_balance_not_negative", sql`balance >= 0`)
      .execute();

    await schema
      .createTable("plans")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("name", "text", (column) => column.notNull())
      .addColumn("price_amount", "bigint", (column) => column.notNull())
      .addColumn("price_currency", "text", (column) => column.notNull())
      .addColumn("credit", "bigint", (column) => column.notNull())
      .addColumn("days", "integer")
      .addColumn("rpm", "integer")
      .addColumn("tpm", "integer")
      .addColumn("models", "text")
      .addColumn("origin", "text", (column) => column.notNull())
      .addColumn("created_at", "bigint", (column) => column.notNull())
      .addColumn("updated_at", "bigint", (column) => column.notNull())
      .execute();

    await schema
      .createTable("credit_lots")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("account_id", "text", (column) => column.notNull().references("accounts.id"))
      .addColumn("plan_id", "text")
      .addColumn("granted", "bigint", (column) => column.notNull())
      .addColumn("remaining", "bigint", (column) => column.notNull())
      .addColumn("expires_at", "bigint")
      .addColumn("source", "text", (column) => column.notNull().unique())
      .addColumn("created_at", "bigint", (column) => column.notNull())
      .execute();
    await schema.createIndex("credit_lots_account").on("credit_lots").columns(["account_id", "expires_at"]).execute();

    await schema
      .createTable("ledger_entries")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("account_id", "text", (column) => column.notNull().references("accounts.id"))
      .addColumn("kind", "text", (column) => column.notNull())
      .addColumn("amount", "bigint", (column) => column.notNull())
      .addColumn("lot_id", "text")
      .addColumn("hold_id", "text")
      .addColumn("created_at", "bigint", (column) => column.notNull())
      .execute();
    await schema.createIndex("ledger_entries_account").on("ledger_entries").columns(["account_id", "created_at"]).execute();

    await schema
      .createTable("holds")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("account_id", "text", (column) => column.notNull().references("accounts.id"))
      .addColumn("key_id", "text")
      .addColumn("amount", "bigint", (column) => column.notNull())
      .addColumn("status", "text", (column) => column.notNull())
      .addColumn("cost", "bigint")
      .addColumn("node_id", "text", (column) => column.notNull())
      .addColumn("expires_at", "bigint", (column) => column.notNull())
      .addColumn("created_at", "bigint", (column) => column.notNull())
      .addColumn("closed_at", "bigint")
      .execute();
    await schema.createIndex("holds_status").on("holds").columns(["status", "expires_at"]).execute();

    await schema
      .createTable("nodes")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("hostname", "text", (column) => column.notNull())
      .addColumn("pid", "integer", (column) => column.notNull())
      .addColumn("started_at", "bigint", (column) => column.notNull())
      .addColumn("last_seen_at", "bigint", (column) => column.notNull())
      .execute();

    await schema
      .createTable("usage_records")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("request_id", "text", (column) => column.notNull())
      .addColumn("account_id", "text")
      .addColumn("key_id", "text")
      .addColumn("model", "text", (column) => column.notNull())
      .addColumn("prompt_tokens", "bigint", (column) => column.notNull())
      .addColumn("cached_prompt_tokens", "bigint", (column) => column.notNull())
      .addColumn("completion_tokens", "bigint", (column) => column.notNull())
      .addColumn("cost", "bigint", (column) => column.notNull())
      .addColumn("latency_ms", "integer", (column) => column.notNull())
      .addColumn("status", "integer", (column) => column.notNull())
      .addColumn("finish_reason", "text")
      .addColumn("stream", "integer", (column) => column.notNull())
      .addColumn("created_at", "bigint", (column) => column.notNull())
      .execute();
    await schema.createIndex("usage_records_account").on("usage_records").columns(["account_id", "created_at"]).execute();
    await schema.createIndex("usage_records_key").on("usage_records").columns(["key_id", "created_at"]).execute();

    await schema
      .createTable("redemption_codes")
      .addColumn("code_hash", "text", (column) => column.primaryKey())
      .addColumn("plan_id", "text", (column) => column.notNull())
      .addColumn("created_at", "bigint", (column) => column.notNull())
      .addColumn("redeemed_at", "bigint")
      .addColumn("redeemed_by", "text")
      .execute();

    for (const [name, type] of [
      ["spend_cap", "bigint"],
      ["rpm", "integer"],
      ["tpm", "integer"],
      ["models", "text"],
    ] as const) {
      await schema.alterTable("api_keys").addColumn(name, type).execute();
    }
    await schema.alterTable("api_keys").addColumn("spent", "bigint", (column) => column.notNull().defaultTo(0)).execute();
    await schema.alterTable("api_keys").addColumn("reserved", "bigint", (column) => column.notNull().defaultTo(0)).execute();
  },
  async down(database: Kysely<unknown>) {
    for (const table of ["redemption_codes", "usage_records", "nodes", "holds", "ledger_entries", "credit_lots", "plans", "accounts"]) {
      await database.schema.dropTable(table).execute();
    }
  },
};
