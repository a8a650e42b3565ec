/**
 * Keyset paging over rows ordered by (time, id): the one predicate the usage pages, the CSV
 * export and the billing history page with. Ties on the time are ordered by id, so no row is
 * lost or repeated between pages, on SQLite and PostgreSQL alike.
 */
import { sql, type RawBuilder, type SqlBool } from "kysely";

/** A row's place in (time, id) order: its time (milliseconds) and id. */
export type KeysetCursor = { created_at: number; id: string };

/**
 * Rows past `cursor` in (time, id) order, for `.where(...)`: `"<"` those before it (pages of a
 * newest-first list), `">"` those after it (oldest first), `"<="` those before it and itself.
 * @param timeColumn the time column as the query names it, e.g. `"usage.created_at"`
 */
export function pastCursor(timeColumn: string, idColumn: string, comparison: "<" | ">" | "<=", cursor: KeysetCursor): RawBuilder<SqlBool> {
  const strict = sql.raw(comparison === ">" ? ">" : "<");
  const onId = sql.raw(comparison);
  const time = sql.ref(timeColumn);
  return sql<SqlBool>`(${time} ${strict} ${cursor.created_at} or (${time} = ${cursor.created_at} and ${sql.ref(idColumn)} ${onId} ${cursor.id}))`;
}
