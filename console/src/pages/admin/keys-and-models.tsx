/** Admin › Keys (every account's keys, a page at a time; revoke any) and Models (status, what each serves, its queue on this node). */
import { useEffect, useState } from "react";
import { api, type ApiKey, type List, type Model, type ModelQueue } from "../../api.ts";
import { formatNumber } from "../../format.ts";
import { DataTable } from "../../components/data-table.tsx";
import { ConfirmDialog, EmptyState, ErrorState, Loading, useApi } from "../../components/ui.tsx";
import { KeysTable, LoadMoreKeys, usePagedKeys } from "../keys.tsx";
import { generates, ServiceBadges, statusBadge, vectorLength } from "../models.tsx";

export function AllKeysSection() {
  const keys = usePagedKeys("/api/admin/keys");
  const [revoking, setRevoking] = useState<ApiKey>();
  if (keys.error && !keys.keys) return <ErrorState error={keys.error} retry={keys.reload} />;
  if (!keys.keys) return <Loading />;
  if (keys.keys.length === 0) return <EmptyState title="No keys yet" />;
  return (
    <>
      <KeysTable keys={keys.keys} onRevoke={setRevoking} showOwner />
      {keys.error && <ErrorState error={keys.error} retry={keys.reload} />}
      <LoadMoreKeys keys={keys} />
      {revoking && (
        <ConfirmDialog
          title="Revoke key"
          confirmLabel="Revoke key"
          danger
          onClose={() => setRevoking(undefined)}
          onConfirm={async () => {
            await api("DELETE", `/api/admin/keys/${encodeURIComponent(revoking.id)}`);
            keys.reload();
          }}
        >
          <p>
            <code>{revoking.display_prefix}…</code> ({revoking.account_email ?? "operator"}) will stop working at once.
          </p>
        </ConfirmDialog>
      )}
    </>
  );
}

const TIERS = ["priority", "default", "flex"] as const;

/** Seconds, short: 0.4 s, 12 s, 3 min. */
function formatWait(ms: number): string {
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 120_000) return `${Math.round(ms / 1000)} s`;
  return `${Math.round(ms / 60_000)} min`;
}

/** A model's queue on this node: slots in use as a bar, waiting per service tier, the oldest wait. */
function QueueCell({ queue }: { queue: ModelQueue | undefined }) {
  if (queue === undefined) return <span className="muted">—</span>;
  const waiting = TIERS.reduce((sum, tier) => sum + queue.waiting[tier], 0);
  const oldest = Math.max(...TIERS.map((tier) => queue.oldest_wait_ms[tier] ?? 0));
  const used = queue.capacity > 0 ? Math.min(1, queue.busy / queue.capacity) : 0;
  return (
    <div className="queue-cell" data-testid={`queue-${queue.model}`}>
      <div className="queue-meter" role="meter" aria-label={`${queue.busy} of ${queue.capacity} running`} aria-valuemin={0} aria-valuemax={queue.capacity} aria-valuenow={queue.busy}>
        <span style={{ width: `${Math.round(used * 100)}%` }} />
      </div>
      <div className="small">
        {queue.busy} / {queue.capacity} running
        {waiting === 0 ? " · none waiting" : ` · ${waiting} waiting`}
      </div>
      {waiting > 0 && (
        <div className="small muted">
          {TIERS.filter((tier) => queue.waiting[tier] > 0)
            .map((tier) => `${tier} ${queue.waiting[tier]}`)
            .join(" · ")}
          {` · oldest ${formatWait(oldest)}`}
        </div>
      )}
      {queue.top_accounts.length > 1 && (
        <div className="small muted" title="Share of the tokens served lately (one-minute half-life)">
          Top: {queue.top_accounts.slice(0, 3).map((top) => `${top.account.slice(0, 12)} ${Math.round(top.share * 100)}%`).join(", ")}
        </div>
      )}
    </div>
  );
}

/** The queues, refreshed every two seconds while the page is open. */
function useQueues(): Map<string, ModelQueue> {
  const queues = useApi<List<ModelQueue>>("/api/admin/queues");
  const reload = queues.reload;
  useEffect(() => {
    const timer = setInterval(reload, 2_000);
    return () => clearInterval(timer);
  }, [reload]);
  return new Map((queues.data?.data ?? []).map((queue) => [queue.model, queue]));
}

export function ModelsSection() {
  const models = useApi<List<Model>>("/api/models");
  const queues = useQueues();
  if (models.error) return <ErrorState error={models.error} retry={models.reload} />;
  if (!models.data) return <Loading />;
  return (
    <DataTable
      label="Models and their status"
      rows={models.data.data}
      rowKey={(model) => model.id}
      columns={[
        { id: "model", header: "Model", strong: true, cell: (model) => <span className="mono">{model.id}</span> },
        {
          id: "status",
          header: "Status",
          cell: (model) => (
            <>
              {statusBadge(model.status)}
              {model.status.state === "unavailable" && <div className="muted small">{model.status.detail}</div>}
            </>
          ),
        },
        {
          id: "serves",
          header: "Serves",
          cell: (model) => (
            <>
              <ServiceBadges model={model} />
              {vectorLength(model) !== undefined && <div className="muted small">Vectors: {vectorLength(model)}</div>}
            </>
          ),
        },
        { id: "queue", header: "Queue (this node)", cell: (model) => <QueueCell queue={queues.get(model.id)} /> },
        { id: "context", header: "Context", numeric: true, cell: (model) => formatNumber(model.context_length) },
        {
          id: "prices",
          header: "Prices (prompt / cached / completion per 1M)",
          cell: (model) => {
            // An embedding's input is priced apart (`pricing.embeddings`) or at the prompt price.
            const embeddings = `${formatNumber(model.pricing.embeddings ?? model.pricing.prompt)} per embedding input`;
            if (!generates(model)) return embeddings;
            const generation = `${formatNumber(model.pricing.prompt)} / ${formatNumber(model.pricing.cached_prompt)} / ${formatNumber(model.pricing.completion)}`;
            return model.pricing.embeddings === undefined ? generation : `${generation}; ${embeddings}`;
          },
        },
      ]}
    />
  );
}
