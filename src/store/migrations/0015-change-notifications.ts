import { sql, type Kysely } from "kysely";
import type { Migration } from "kysely/migration";
import { dialectOf } from "../dialect.ts";
import type { Database } from "../schema.ts";

/**
 * PostgreSQL: every write that changes what a node keeps in memory of a key (`VerifiedKeys`) or of
 * its account's plan (`Metering.standingOf`) sends a notification on `turnpike_changes`, naming
 * the table (`schema.table`: deployments sharing a database in schemas of their own tell theirs
 * apart), in the writing transaction, so it reaches every listening node when, and only when, the
 * write commits, whoever wrote it (a node, the CLI, an operator's SQL). Statement-level triggers:
 * one notification a statement, and none for the frequent writes that caches do not keep or
 * never refuse on (a key's `spent`, `reserved`, `last_used_at`; an account's `balance`). SQLite
 * has no notifications: its caches watch `PRAGMA data_version`. See `store/change-feed.ts`.
 */
export const migration0015ChangeNotifications: Migration = {
  async up(database: Kysely<unknown>) {
    if (dialectOf(database as Kysely<Database>) !== "postgres") return;
    await sql`
      CREATE OR REPLACE FUNCTION turnpike_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_notify('turnpike_changes', TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME);
        RETURN NULL;
      END
      $$`.execute(database);
    await sql`
      CREATE TRIGGER api_keys_changed AFTER INSERT OR DELETE OR UPDATE OF key_hash, account_id, revoked_at, expires_at, spend_cap, rpm, tpm, models, scope, parent_key_id
      ON api_keys FOR EACH STATEMENT EXECUTE FUNCTION turnpike_notify_change()`.execute(database);
    await sql`
      CREATE TRIGGER accounts_changed AFTER DELETE OR UPDATE OF disabled_at, plan_id
      ON accounts FOR EACH STATEMENT EXECUTE FUNCTION turnpike_notify_change()`.execute(database);
    await sql`
      CREATE TRIGGER plans_changed AFTER INSERT OR UPDATE OR DELETE
      ON plans FOR EACH STATEMENT EXECUTE FUNCTION turnpike_notify_change()`.execute(database);
  },
  async down(database: Kysely<unknown>) {
    if (dialectOf(database as Kysely<Database>) !== "postgres") return;
    await sql`DROP TRIGGER IF EXISTS plans_changed ON plans`.execute(database);
    await sql`DROP TRIGGER IF EXISTS accounts_changed ON accounts`.execute(database);
    await sql`DROP TRIGGER IF EXISTS api_keys_changed ON api_keys`.execute(database);
    await sql`DROP FUNCTION IF EXISTS turnpike_notify_change()`.execute(database);
  },
};
