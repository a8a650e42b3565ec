/**
 * PostgreSQL through `pg`, for several Turnpike nodes sharing one database.
 * BIGINT columns come back as JavaScript numbers (all our integers are far below 2^53).
 */
import pg from "pg";
import { Kysely, PostgresDialect } from "kysely";
import type { Database } from "./schema.ts";

const INT8_OID = 20;
pg.types.setTypeParser(INT8_OID, (value) => Number(value));

export function openPostgres(url: string): Kysely<Database> {
  const pool = new pg.Pool({ connectionString: url, max: 10 });
  return new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
}
