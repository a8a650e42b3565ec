import type { Kysely } from "kysely";
import type { Migration } from "kysely/migration";

/**
 * Key listings are paged newest first by (created_at, id) (`GET /api/keys`, `GET /api/admin/keys`):
 * an index in that order, per account and over every key, so a page reads its rows from the index
 * instead of sorting all keys. The per-account one also serves the key cap's count.
 */
export const migration0011KeyListingIndex: Migration = {
  async up(database: Kysely<unknown>) {
    await database.schema.createIndex("api_keys_account_created").on("api_keys").columns(["account_id", "created_at", "id"]).execute();
    await database.schema.createIndex("api_keys_created").on("api_keys").columns(["created_at", "id"]).execute();
  },
  async down(database: Kysely<unknown>) {
    await database.schema.dropIndex("api_keys_created").execute();
    await database.schema.dropIndex("api_keys_account_created").execute();
  },
};
