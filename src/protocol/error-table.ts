/**
 * The README's error table, written from the error catalog: `node scripts/write-error-table.ts`
 * rewrites it between its markers, and `error-catalog.test.ts` fails when the two differ.
 */
import { anthropicErrorOf } from "./anthropic-messages/errors.ts";
import { ERROR_CATALOG, ERROR_CODES } from "./error-catalog.ts";
import { ApiError } from "./errors.ts";

/** The markers around the generated table in README.md. */
export const ERROR_TABLE_START = "<!-- error-table:start (generated from src/protocol/error-catalog.ts by scripts/write-error-table.ts) -->";
export const ERROR_TABLE_END = "<!-- error-table:end -->";

/**
 * The table as Markdown: status, code, type, the status and type Anthropic's shape answers it with
 * (on `/v1/messages`), meaning; one row a code, in the catalog's order.
 */
export function errorTableMarkdown(): string {
  const rows = ERROR_CODES.map((code) => {
    const entry = ERROR_CATALOG[code];
    const anthropic = anthropicErrorOf(new ApiError("", code));
    return `| ${entry.status} | \`${code}\` | ${entry.type} | ${anthropic.status} ${anthropic.type} | ${entry.meaning.replaceAll("|", "\\|")} |`;
  });
  return ["| status | code | type | on `/v1/messages` | when |", "| --- | --- | --- | --- | --- |", ...rows].join("\n");
}

/** `readme` with the text between the markers replaced by the current table. */
export function withErrorTable(readme: string): string {
  const start = readme.indexOf(ERROR_TABLE_START);
  const end = readme.indexOf(ERROR_TABLE_END);
  if (start < 0 || end < start) throw new Error("README.md has no error-table markers");
  return `${readme.slice(0, start + ERROR_TABLE_START.length)}\n${errorTableMarkdown()}\n${readme.slice(end)}`;
}

/** The rows of the table between the markers, as `{code, status}` (for checks). */
export function readErrorTable(readme: string): Array<{ code: string; status: number }> {
  const start = readme.indexOf(ERROR_TABLE_START);
  const end = readme.indexOf(ERROR_TABLE_END);
  if (start < 0 || end < start) return [];
  const rows: Array<{ code: string; status: number }> = [];
  for (const line of readme.slice(start, end).split("\n")) {
    const match = /^\|\s*(\d{3})\s*\|\s*`([a-z_]+)`\s*\|/.exec(line);
    if (match !== null) rows.push({ status: Number(match[1]), code: match[2]! });
  }
  return rows;
}
