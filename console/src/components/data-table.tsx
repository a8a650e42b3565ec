/**
 * The console's one table. At full width it is a table whose cells wrap rather than clip
 * (columns marked `nowrap` keep to one line: dates, numbers, badges). Where its container is
 * narrower than 640 px (a phone) every row becomes a card of "label: value" lines, so no field
 * is hidden off to the side. The ARIA roles are spelled out, since some browsers drop a table's
 * semantics once it is not displayed as a table.
 */
import type { ReactNode } from "react";

/** One column: its header, how to draw a row's cell, and how the cell behaves. */
export type Column<Row> = {
  /** Unique in the table; also the cell's `data-column` (tests and styles find cells by it). */
  id: string;
  /** The header, and the label of the value on a card. */
  header: string;
  cell: (row: Row) => ReactNode;
  /** Right-aligned, tabular figures. */
  numeric?: boolean;
  /** Kept on one line (short values); other cells wrap. */
  nowrap?: boolean;
  /** May break inside a word (emails, ids: one long word). */
  breakAnywhere?: boolean;
  /** Bold (the row's name). */
  strong?: boolean;
  /** Buttons: the header is read by screen readers only, and a card shows no label for it. */
  actions?: boolean;
};

export type DataTableProps<Row> = {
  /** The table's accessible name. */
  label: string;
  columns: ReadonlyArray<Column<Row> | false | null | undefined>;
  rows: readonly Row[];
  rowKey: (row: Row, index: number) => string;
  /** Extra attributes for a row's `<tr>` (`data-*` for tests). */
  rowAttributes?: (row: Row) => Record<string, string | undefined>;
  /** Inside a card: no border of its own. */
  bare?: boolean;
};

function cellClass(column: Column<unknown>): string | undefined {
  const classes = [column.numeric && "number", column.nowrap && "nowrap", column.breakAnywhere && "break-anywhere", column.strong && "strong", column.actions && "actions"].filter(Boolean);
  return classes.length === 0 ? undefined : classes.join(" ");
}

/** A table at full width, cards of "label: value" lines on a phone. */
export function DataTable<Row>({ label, columns, rows, rowKey, rowAttributes, bare }: DataTableProps<Row>) {
  const shown = columns.filter((column): column is Column<Row> => Boolean(column));
  return (
    <div className={bare ? "table-wrap bare" : "table-wrap"}>
      <table className="table data-table" role="table" aria-label={label}>
        <thead role="rowgroup">
          <tr role="row">
            {shown.map((column) => (
              <th key={column.id} scope="col" role="columnheader" className={cellClass(column as Column<unknown>)}>
                {column.actions ? <span className="visually-hidden">{column.header}</span> : column.header}
              </th>
            ))}
          </tr>
        </thead>
        <tbody role="rowgroup">
          {rows.map((row, index) => (
            <tr key={rowKey(row, index)} role="row" {...rowAttributes?.(row)}>
              {shown.map((column) => (
                <td key={column.id} role="cell" className={cellClass(column as Column<unknown>)} data-column={column.id} data-label={column.actions ? undefined : column.header}>
                  <span className="cell-value">{column.cell(row)}</span>
                </td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
