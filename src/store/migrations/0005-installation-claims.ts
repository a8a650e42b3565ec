import type { Kysely } from "kysely";
import type { Migration } from "kysely/migration";

/**
 * One-time claims on the installation, decided by a primary key: e.g. `first_admin`, which the
 * first sign-up takes, so two sign-ups at once cannot both become admin.
 */
export const migration0005InstallationClaims: Migration = {
  async up(database: Kysely<unknown>) {
    await database.schema
      .createTable("installation_claims")
      .addColumn("name", "text", (column) => column.primaryKey())
      .addColumn("account_id", "text", (column) => column.notNull())
      .addColumn("created_at", "bigint", (column) => column.notNull())
      .execute();
  },
  async down(database: Kysely<unknown>) {
    await database.schema.dropTable("installation_claims").execute();
  },
};
