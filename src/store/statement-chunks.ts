/**
 * Rows for multi-row statements (`INSERT … VALUES (…), (…)`, `WHERE id IN (…)`), cut into chunks
 * whose sizes are powers of two up to `MAX_ROWS_PER_STATEMENT`.
 *
 * Why: a statement's SQL text depends on how many rows it carries, and the SQLite store prepares
 * each SQL text once and keeps it (`sqlite.ts`, up to 512 statements). A group commit of any size
 * from 1 to 500 rows made a text of its own, so under bursty load the cache filled with hundreds
 * of one-off statements, each holding a compiled program of ~1.6 KB a row (about 200 MiB for
 * 500 of them, native memory V8 does not see) and pushing out the statements that are used on
 * every request. With sizes 1, 2, 4 … 256 a statement family has at most 9 texts (~0.8 MiB
 * compiled in all), and a batch of n rows takes at most popcount(n mod 256) + ⌊n / 256⌋ statements.
 */

/** The most rows in one statement: 256 × a usage record's 17 columns is far inside SQLite's 32,766 and PostgreSQL's 65,535 bound parameters. */
export const MAX_ROWS_PER_STATEMENT = 256;

/** `rows` in order, cut into chunks of 256, then the rest by its binary digits (largest first). */
export function statementChunks<Row>(rows: readonly Row[]): Row[][] {
  const chunks: Row[][] = [];
  let start = 0;
  for (let size = MAX_ROWS_PER_STATEMENT; start < rows.length; ) {
    if (rows.length - start >= size) {
      chunks.push(rows.slice(start, start + size));
      start += size;
    } else size /= 2;
  }
  return chunks;
}
