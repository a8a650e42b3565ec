/** Admin › Keys (every account's keys, a page at a time; revoke any) and Models (status and what each serves). */
import { useState } from "react";
import { api, type ApiKey, type List, type Model } from "../../api.ts";
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

export function ModelsSection() {
  const models = useApi<List<Model>>("/api/models");
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
