/**
 * PostgreSQL through `pg`, for several Turnpike nodes sharing one database.
 * BIGINT columns come back as JavaScript numbers (all our integers are far below 2^53).
 */
import pg from "pg";
import { Kysely, PostgresDialect } from "kysely";
import type { Database } from "./schema.ts";

const INT8_OID = 20;
pg.types.setTypeParser(INT8_OID, (value) => Number(value));

export type PostgresOptions = {
  /**
   * An idle pooled connection broke (the server restarted, a proxy or `pg_terminate_backend`
   * cut it). The pool drops it and connects afresh for the next query; without a listener the
   * pool's 'error' event would end the process.
   */
  onConnectionError?: (error: Error) => void;
};

export function openPostgres(url: string, options: PostgresOptions = {}): Kysely<Database> {
  // A server that accepts the connection but never answers must not hold requests forever.
  const pool = new pg.Pool({ connectionString: url, max: 10, connectionTimeoutMillis: 5_000 });
  pool.on("error", (error) => options.onConnectionError?.(error));
  return new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
}
