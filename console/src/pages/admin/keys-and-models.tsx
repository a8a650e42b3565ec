/** Admin › Keys (every account's keys, revoke any) and Models (status of each). */
import { useState } from "react";
import { api, type ApiKey, type List, type Model } from "../../api.ts";
import { formatNumber } from "../../format.ts";
import { ConfirmDialog, EmptyState, ErrorState, Loading, useApi } from "../../components/ui.tsx";
import { KeysTable } from "../keys.tsx";
import { statusBadge } from "../models.tsx";

export function AllKeysSection() {
  const keys = useApi<List<ApiKey>>("/api/admin/keys");
  const [revoking, setRevoking] = useState<ApiKey>();
  if (keys.error) return <ErrorState error={keys.error} retry={keys.reload} />;
  if (!keys.data) return <Loading />;
  if (keys.data.data.length === 0) return <EmptyState title="No keys yet" />;
  return (
    <>
      <KeysTable keys={keys.data.data} onRevoke={setRevoking} showOwner />
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
    <div className="table-wrap">
      <table className="table" aria-label="Models and their status">
        <thead>
          <tr>
            <th scope="col">Model</th>
            <th scope="col">Status</th>
            <th scope="col" className="number">Context</th>
            <th scope="col">Prices (prompt / cached / completion per 1M)</th>
          </tr>
        </thead>
        <tbody>
          {models.data.data.map((model) => (
            <tr key={model.id}>
              <td className="strong mono">{model.id}</td>
              <td>
                {statusBadge(model.status)}
                {model.status.state === "unavailable" && <div className="muted small">{model.status.detail}</div>}
              </td>
              <td className="number">{formatNumber(model.context_length)}</td>
              <td>
                {formatNumber(model.pricing.prompt)} / {formatNumber(model.pricing.cached_prompt)} / {formatNumber(model.pricing.completion)}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
