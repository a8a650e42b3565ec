/** Billing › History: the ledger's grants, charges and expiries, newest first, with the balance after each. */
import { useCallback, useEffect, useState } from "react";
import { ApiError, get } from "../api.ts";
import type { HistoryEntry } from "../../../src/protocol/billing-history.ts";
import { formatDateTime, formatNumber } from "../format.ts";
import { DataTable } from "../components/data-table.tsx";
import { EmptyState, ErrorState, Loading } from "../components/ui.tsx";

const PAGE_SIZE = 20;

const SOURCE_LABELS: Record<HistoryEntry["source"], string> = {
  purchase: "Purchase",
  code: "Code",
  admin: "Grant",
  grant: "Grant",
  usage: "Usage",
  expiry: "Expiry",
  refund: "Refund",
};

function signed(amount: number): string {
  return amount > 0 ? `+${formatNumber(amount)}` : formatNumber(amount);
}

/** The history, a page at a time ("Load more"); `generation` changes to load it afresh. */
export function BillingHistory({ generation }: { generation: number }) {
  const [entries, setEntries] = useState<HistoryEntry[]>();
  const [hasMore, setHasMore] = useState(false);
  const [loading, setLoading] = useState(false);
  const [error, setError] = useState<ApiError>();

  const load = useCallback(async (before?: string) => {
    setLoading(true);
    setError(undefined);
    try {
      const page = await get<{ data: HistoryEntry[]; has_more: boolean }>(`/api/billing/history?limit=${PAGE_SIZE}${before === undefined ? "" : `&before=${encodeURIComponent(before)}`}`);
      setEntries((previous) => (before === undefined ? page.data : [...(previous ?? []), ...page.data]));
      setHasMore(page.has_more);
    } catch (failure) {
      setError(failure instanceof ApiError ? failure : new ApiError(String(failure), 0, "error"));
    } finally {
      setLoading(false);
    }
  }, []);

  useEffect(() => {
    void load();
  }, [load, generation]);

  return (
    <section className="card" aria-labelledby="history-heading">
      <div className="card-header">
        <h2 id="history-heading">History</h2>
        <span className="muted small">Grants, purchases, redeemed codes, usage charges and expiries, with the balance after each.</span>
      </div>
      {error && <ErrorState error={error} retry={() => void load()} />}
      {!entries && !error && <Loading />}
      {entries && entries.length === 0 && <EmptyState title="No history yet">Credit you buy, redeem or are granted shows up here, and so do charges.</EmptyState>}
      {entries && entries.length > 0 && (
        <DataTable
          label="Billing history"
          bare
          rows={entries}
          rowKey={(entry) => entry.id}
          rowAttributes={(entry) => ({ "data-entry-id": entry.id })}
          columns={[
            { id: "time", header: "Time", nowrap: true, cell: (entry) => formatDateTime(entry.created) },
            { id: "source", header: "Type", nowrap: true, cell: (entry) => SOURCE_LABELS[entry.source] },
            { id: "description", header: "Description", cell: (entry) => entry.description },
            { id: "amount", header: "Credits", numeric: true, nowrap: true, cell: (entry) => <span className={entry.amount > 0 ? "positive" : undefined}>{signed(entry.amount)}</span> },
            { id: "balance_after", header: "Balance after", numeric: true, nowrap: true, cell: (entry) => formatNumber(entry.balance_after) },
          ]}
        />
      )}
      {hasMore && (
        <div>
          <button type="button" className="button small" disabled={loading} onClick={() => void load(entries?.at(-1)?.id)}>
            {loading ? "Loading…" : "Load more"}
          </button>
        </div>
      )}
    </section>
  );
}
