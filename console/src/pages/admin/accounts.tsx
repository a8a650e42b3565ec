/** Admin › Accounts: every account with balance and plan; grant a plan, disable or enable. */
import { useState } from "react";
import { post, type List, type Plan } from "../../api.ts";
import { formatCredits, formatDate, formatNumber } from "../../format.ts";
import { useSession } from "../../session.tsx";
import { DataTable } from "../../components/data-table.tsx";
import { Badge, ConfirmDialog, Dialog, EmptyState, ErrorState, Field, Loading, Notice, useApi } from "../../components/ui.tsx";

type AdminAccount = {
  id: string;
  email: string;
  role: "admin" | "user";
  balance: number;
  plan: { id: string; name: string } | null;
  active_keys: number;
  created: number;
  disabled: number | null;
};

export function AccountsSection() {
  const { session } = useSession();
  const accounts = useApi<List<AdminAccount>>("/api/admin/accounts");
  const [granting, setGranting] = useState<AdminAccount>();
  const [toggling, setToggling] = useState<AdminAccount>();
  if (accounts.error) return <ErrorState error={accounts.error} retry={accounts.reload} />;
  if (!accounts.data) return <Loading />;
  return (
    <>
      <DataTable
        label="Accounts"
        rows={accounts.data.data}
        rowKey={(account) => account.id}
        rowAttributes={(account) => ({ "data-account": account.email })}
        columns={[
          { id: "email", header: "Email", strong: true, breakAnywhere: true, cell: (account) => account.email },
          { id: "role", header: "Role", nowrap: true, cell: (account) => (account.role === "admin" ? <Badge tone="blue">Admin</Badge> : "User") },
          { id: "plan", header: "Plan", cell: (account) => account.plan?.name ?? <span className="muted">—</span> },
          { id: "balance", header: "Balance", numeric: true, cell: (account) => formatNumber(account.balance) },
          { id: "keys", header: "Keys", numeric: true, cell: (account) => account.active_keys },
          { id: "created", header: "Created", nowrap: true, cell: (account) => formatDate(account.created) },
          { id: "status", header: "Status", nowrap: true, cell: (account) => (account.disabled === null ? <Badge tone="green">Active</Badge> : <Badge tone="red">Disabled</Badge>) },
          {
            id: "actions",
            header: "Actions",
            actions: true,
            cell: (account) => (
              <>
                <button type="button" className="button small" onClick={() => setGranting(account)} aria-label={`Grant a plan to ${account.email}`}>
                  Grant plan
                </button>
                {account.id !== session?.id && (
                  <button type="button" className="button small danger-text" onClick={() => setToggling(account)} aria-label={`${account.disabled === null ? "Disable" : "Enable"} ${account.email}`}>
                    {account.disabled === null ? "Disable" : "Enable"}
                  </button>
                )}
              </>
            ),
          },
        ]}
      />
      {granting && <GrantDialog account={granting} onClose={() => setGranting(undefined)} onGranted={accounts.reload} />}
      {toggling && (
        <ConfirmDialog
          title={toggling.disabled === null ? "Disable account" : "Enable account"}
          confirmLabel={toggling.disabled === null ? "Disable account" : "Enable account"}
          danger={toggling.disabled === null}
          onClose={() => setToggling(undefined)}
          onConfirm={async () => {
            await post(`/api/admin/accounts/${encodeURIComponent(toggling.id)}/${toggling.disabled === null ? "disable" : "enable"}`);
            accounts.reload();
          }}
        >
          <p>
            {toggling.disabled === null ? (
              <>
                <strong>{toggling.email}</strong> will be signed out, and their API keys will stop working until the account is enabled again.
              </>
            ) : (
              <>
                <strong>{toggling.email}</strong> will be able to sign in again, and their keys will work again.
              </>
            )}
          </p>
        </ConfirmDialog>
      )}
    </>
  );
}

function GrantDialog({ account, onClose, onGranted }: { account: AdminAccount; onClose: () => void; onGranted: () => void }) {
  const plans = useApi<List<Plan>>("/api/plans");
  const [plan, setPlan] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();
  const chosen = plan || plans.data?.data[0]?.id || "";
  return (
    <Dialog
      title={`Grant a plan to ${account.email}`}
      onClose={onClose}
      footer={
        <>
          <button type="button" className="button" onClick={onClose}>
            Cancel
          </button>
          <button
            type="button"
            className="button primary"
            disabled={busy || chosen === ""}
            onClick={async () => {
              setBusy(true);
              setError(undefined);
              try {
                await post(`/api/admin/accounts/${encodeURIComponent(account.id)}/grant`, { plan: chosen });
                onGranted();
                onClose();
              } catch (failure) {
                setError((failure as Error).message);
                setBusy(false);
              }
            }}
          >
            {busy ? "Granting…" : "Grant plan"}
          </button>
        </>
      }
    >
      {plans.error && <ErrorState error={plans.error} retry={plans.reload} />}
      {!plans.data && !plans.error && <Loading />}
      {plans.data && plans.data.data.length === 0 && <EmptyState title="No plans">Create a plan first.</EmptyState>}
      {plans.data && plans.data.data.length > 0 && (
        <Field label="Plan" htmlFor="grant-plan" hint="Adds the plan's credit to the account, for the plan's days; no payment is taken.">
          <select id="grant-plan" value={chosen} onChange={(event) => setPlan(event.target.value)}>
            {plans.data.data.map((candidate) => (
              <option key={candidate.id} value={candidate.id}>
                {candidate.name} — {formatCredits(candidate.credit)}
              </option>
            ))}
          </select>
        </Field>
      )}
      {error && <Notice tone="error">{error}</Notice>}
    </Dialog>
  );
}
