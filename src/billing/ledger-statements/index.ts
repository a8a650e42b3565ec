/**
 * The ledger's statements for a database: chosen by the dialect recorded where the store was
 * opened (`store/dialect.ts`), never by testing the database where the SQL is written.
 */
import type { Kysely, Transaction } from "kysely";
import { dialectOf, type Dialect } from "../../store/dialect.ts";
import type { Database } from "../../store/schema.ts";
import { postgresStatements } from "./postgres.ts";
import { sqliteStatements } from "./sqlite.ts";
import type { LedgerStatements } from "./statements.ts";

export type { HoldInput, LedgerStatements } from "./statements.ts";

const statementsByDialect: Record<Dialect, LedgerStatements> = { sqlite: sqliteStatements, postgres: postgresStatements };

/** The statements in `database`'s dialect (a transaction's: those of the database it was begun on). */
export function ledgerStatementsOf(database: Kysely<Database> | Transaction<Database>): LedgerStatements {
  return statementsByDialect[dialectOf(database)];
}
