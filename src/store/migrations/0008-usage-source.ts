import type { Kysely } from "kysely";
import type { Migration } from "kysely/migration";

/**
 * Each usage record says where its token counts came from (`counted` by this process, `upstream`
 * as an upstream server reported them, `estimated` from a stream cut before the upstream said)
 * and how many completion tokens went to reasoning. Older records have no source (they were all counted).
 */
export const migration0008UsageSource: Migration = {
  async up(database: Kysely<unknown>) {
    await database.schema.alterTable("usage_records").addColumn("usage_source", "text").execute();
    await database.schema.alterTable("usage_records").addColumn("reasoning_tokens", "integer", (column) => column.notNull().defaultTo(0)).execute();
  },
  async down(database: Kysely<unknown>) {
    await database.schema.alterTable("usage_records").dropColumn("reasoning_tokens").execute();
    await database.schema.alterTable("usage_records").dropColumn("usage_source").execute();
  },
};
