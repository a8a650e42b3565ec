import type { Kysely } from "kysely";
import { sql } from "kysely";
import type { Migration } from "kysely/migration";

/**
 * Key scopes and parents. `scope` is what a key may reach: 'inference' (`/v1`), 'account' (also the
 * account's own `/api` routes) or 'admin' (also the admin routes). Existing keys become 'account',
 * as they worked before, except operator keys (no account), which stay 'admin'. Keys of admin
 * accounts become 'account' too: admin routes now take a session or a key created with admin scope.
 * `parent_key_id` is the key that created this one over `/api` (null when a session or the CLI did).
 */
export const migration0006KeyScopes: Migration = {
  async up(database: Kysely<unknown>) {
    await database.schema.alterTable("api_keys").addColumn("scope", "text", (column) => column.notNull().defaultTo("account")).execute();
    await database.schema.alterTable("api_keys").addColumn("parent_key_id", "text").execute();
    await database.schema.createIndex("api_keys_parent_key_id").on("api_keys").column("parent_key_id").execute();
    await sql`update api_keys set scope = 'admin' where account_id is null`.execute(database);
  },
  async down(database: Kysely<unknown>) {
    await database.schema.dropIndex("api_keys_parent_key_id").execute();
    await database.schema.alterTable("api_keys").dropColumn("parent_key_id").execute();
    await database.schema.alterTable("api_keys").dropColumn("scope").execute();
  },
};
