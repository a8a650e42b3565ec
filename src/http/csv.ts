/** CSV as RFC 4180 writes it: comma-separated, CRLF line ends, fields quoted when they need it. */

/**
 * One field. Quoted when it holds a comma, a quote, CR or LF (quotes doubled inside). Text that
 * a spreadsheet would run as a formula (starting with `=`, `+`, `-`, `@`, tab or CR) gets a
 * leading `'`, as OWASP advises against CSV injection; numbers are written as they are.
 */
export function csvField(value: string | number | boolean | null | undefined): string {
  if (value === null || value === undefined) return "";
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  const text = /^[=+\-@\t\r]/.test(value) ? `'${value}` : value;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** One line, CRLF included. */
export function csvLine(values: ReadonlyArray<string | number | boolean | null | undefined>): string {
  return `${values.map(csvField).join(",")}\r\n`;
}
