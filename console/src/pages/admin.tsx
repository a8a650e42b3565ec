/** Admin: accounts (grant a plan, disable), plans (create, edit), redemption codes, all keys, models. */
import { useState } from "react";
import { api, post, type ApiKey, type List, type Model, type Plan } from "../api.ts";
import { formatCredits, formatDate, formatMoney, formatNumber } from "../format.ts";
import { useRouter } from "../router.tsx";
import { useSession } from "../session.tsx";
import { Badge, ConfirmDialog, CopyButton, Dialog, EmptyState, ErrorState, Field, Loading, Notice, PageHeader, Tabs, useApi } from "../components/ui.tsx";
import { KeysTable } from "./keys.tsx";
import { planLimits } from "./billing.tsx";
import { statusBadge } from "./models.tsx";

type Section = "accounts" | "plans" | "codes" | "keys" | "models";

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

export function AdminPage() {
  const { path, navigate } = useRouter();
  const section = (path.split("/")[2] as Section | undefined) ?? "accounts";
  return (
    <>
      <PageHeader title="Admin" description="Manage this installation: accounts, plans, codes, keys and models." />
      <Tabs
        label="Admin sections"
        value={section}
        onChange={(next) => navigate(`/admin/${next}`)}
        tabs={[
          ["accounts", "Accounts"],
          ["plans", "Plans"],
          ["codes", "Codes"],
          ["keys", "Keys"],
          ["models", "Models"],
        ]}
      />
      <div className="tab-panel" role="tabpanel">
        {section === "accounts" && <AccountsSection />}
        {section === "plans" && <PlansSection />}
        {section === "codes" && <CodesSection />}
        {section === "keys" && <AllKeysSection />}
        {section === "models" && <ModelsSection />}
      </div>
    </>
  );
}

function AccountsSection() {
  const { session } = useSession();
  const accounts = useApi<List<AdminAccount>>("/api/admin/accounts");
  const [granting, setGranting] = useState<AdminAccount>();
  const [toggling, setToggling] = useState<AdminAccount>();
  if (accounts.error) return <ErrorState error={accounts.error} retry={accounts.reload} />;
  if (!accounts.data) return <Loading />;
  return (
    <>
      <div className="table-wrap">
        <table className="table" aria-label="Accounts">
          <thead>
            <tr>
              <th scope="col">Email</th>
              <th scope="col">Role</th>
              <th scope="col">Plan</th>
              <th scope="col" className="number">Balance</th>
              <th scope="col" className="number">Keys</th>
              <th scope="col">Created</th>
              <th scope="col">Status</th>
              <th scope="col">
                <span className="visually-hidden">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {accounts.data.data.map((account) => (
              <tr key={account.id} data-account={account.email}>
                <td className="strong">{account.email}</td>
                <td>{account.role === "admin" ? <Badge tone="blue">Admin</Badge> : "User"}</td>
                <td>{account.plan?.name ?? <span className="muted">—</span>}</td>
                <td className="number" data-column="balance">
                  {formatNumber(account.balance)}
                </td>
                <td className="number">{account.active_keys}</td>
                <td>{formatDate(account.created)}</td>
                <td>{account.disabled === null ? <Badge tone="green">Active</Badge> : <Badge tone="red">Disabled</Badge>}</td>
                <td className="actions">
                  <button type="button" className="button small" onClick={() => setGranting(account)} aria-label={`Grant a plan to ${account.email}`}>
                    Grant plan
                  </button>
                  {account.id !== session?.id && (
                    <button type="button" className="button small danger-text" onClick={() => setToggling(account)} aria-label={`${account.disabled === null ? "Disable" : "Enable"} ${account.email}`}>
                      {account.disabled === null ? "Disable" : "Enable"}
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
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

function PlansSection() {
  const plans = useApi<List<Plan>>("/api/admin/plans");
  const [editing, setEditing] = useState<Plan | "new">();
  if (plans.error) return <ErrorState error={plans.error} retry={plans.reload} />;
  if (!plans.data) return <Loading />;
  return (
    <>
      <div className="section-actions">
        <button type="button" className="button primary" onClick={() => setEditing("new")}>
          + Create plan
        </button>
      </div>
      {plans.data.data.length === 0 ? (
        <EmptyState title="No plans yet">Plans from the config file and plans made here appear in Billing.</EmptyState>
      ) : (
        <div className="plan-grid">
          {plans.data.data.map((plan) => (
            <article key={plan.id} className="plan-card">
              <h3>{plan.name}</h3>
              <div className="muted small mono">{plan.id}</div>
              <div className="plan-price">{formatMoney(plan.price)}</div>
              <div className="plan-credit">{formatCredits(plan.credit)}</div>
              <ul className="plan-limits">
                {planLimits(plan).map((line) => (
                  <li key={line}>{line}</li>
                ))}
              </ul>
              <button type="button" className="button full" onClick={() => setEditing(plan)}>
                Edit
              </button>
            </article>
          ))}
        </div>
      )}
      {editing && <PlanDialog plan={editing === "new" ? undefined : editing} onClose={() => setEditing(undefined)} onSaved={plans.reload} />}
    </>
  );
}

function optionalInteger(text: string): number | null {
  return text.trim() === "" ? null : Number(text);
}

function PlanDialog({ plan, onClose, onSaved }: { plan?: Plan; onClose: () => void; onSaved: () => void }) {
  const [form, setForm] = useState({
    id: plan?.id ?? "",
    name: plan?.name ?? "",
    amount: plan ? String(plan.price.amount) : "",
    currency: plan?.price.currency ?? "usd",
    credit: plan ? String(plan.credit) : "",
    days: plan?.days == null ? "" : String(plan.days),
    rpm: plan?.rpm == null ? "" : String(plan.rpm),
    tpm: plan?.tpm == null ? "" : String(plan.tpm),
    models: plan?.models?.join(", ") ?? "",
  });
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();
  const set = (field: keyof typeof form) => (event: React.ChangeEvent<HTMLInputElement>) => setForm({ ...form, [field]: event.target.value });

  async function submit(event: React.FormEvent) {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    const body = {
      ...(plan ? {} : { id: form.id.trim() }),
      name: form.name.trim(),
      price: { amount: Number(form.amount), currency: form.currency.trim().toLowerCase() },
      credit: Number(form.credit),
      days: optionalInteger(form.days),
      rpm: optionalInteger(form.rpm),
      tpm: optionalInteger(form.tpm),
      models: form.models.trim() === "" ? null : form.models.split(",").map((model) => model.trim()).filter(Boolean),
    };
    try {
      if (plan) await api("PATCH", `/api/admin/plans/${encodeURIComponent(plan.id)}`, body);
      else await post("/api/admin/plans", body);
      onSaved();
      onClose();
    } catch (failure) {
      setError((failure as Error).message);
      setBusy(false);
    }
  }

  return (
    <Dialog
      title={plan ? `Edit ${plan.name}` : "Create plan"}
      onClose={onClose}
      footer={
        <>
          <button type="button" className="button" onClick={onClose}>
            Cancel
          </button>
          <button type="submit" form="plan-form" className="button primary" disabled={busy}>
            {busy ? "Saving…" : "Save plan"}
          </button>
        </>
      }
    >
      <form id="plan-form" className="form grid-2" onSubmit={submit}>
        {error && <Notice tone="error">{error}</Notice>}
        {!plan && (
          <Field label="Id" htmlFor="plan-id" hint="Letters, digits, . _ -">
            <input id="plan-id" required pattern="[A-Za-z0-9][A-Za-z0-9._\-]*" value={form.id} onChange={set("id")} />
          </Field>
        )}
        <Field label="Name" htmlFor="plan-name">
          <input id="plan-name" required value={form.name} onChange={set("name")} />
        </Field>
        <Field label="Price (minor units, e.g. cents)" htmlFor="plan-amount">
          <input id="plan-amount" type="number" min={0} step={1} required value={form.amount} onChange={set("amount")} />
        </Field>
        <Field label="Currency" htmlFor="plan-currency">
          <input id="plan-currency" required pattern="[A-Za-z]{3}" maxLength={3} value={form.currency} onChange={set("currency")} />
        </Field>
        <Field label="Credit granted" htmlFor="plan-credit">
          <input id="plan-credit" type="number" min={0} step={1} required value={form.credit} onChange={set("credit")} />
        </Field>
        <Field label="Days the credit lasts" htmlFor="plan-days" hint="Empty: never expires">
          <input id="plan-days" type="number" min={1} step={1} value={form.days} onChange={set("days")} />
        </Field>
        <Field label="Requests per minute" htmlFor="plan-rpm" hint="Empty: no limit">
          <input id="plan-rpm" type="number" min={1} step={1} value={form.rpm} onChange={set("rpm")} />
        </Field>
        <Field label="Tokens per minute" htmlFor="plan-tpm" hint="Empty: no limit">
          <input id="plan-tpm" type="number" min={1} step={1} value={form.tpm} onChange={set("tpm")} />
        </Field>
        <Field label="Models" htmlFor="plan-models" hint="Comma-separated ids; empty: every model">
          <input id="plan-models" value={form.models} onChange={set("models")} />
        </Field>
      </form>
    </Dialog>
  );
}

type Code = { code?: string; display_prefix?: string; plan: string; created?: number; redeemed?: number | null; redeemed_by?: string | null };

function CodesSection() {
  const plans = useApi<List<Plan>>("/api/plans");
  const codes = useApi<List<Code>>("/api/admin/codes");
  const [plan, setPlan] = useState("");
  const [count, setCount] = useState("1");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();
  const [created, setCreated] = useState<Code[]>();
  const chosen = plan || plans.data?.data[0]?.id || "";
  async function submit(event: React.FormEvent) {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const result = await post<List<Code>>("/api/admin/codes", { plan: chosen, count: Number(count) });
      setCreated(result.data);
      codes.reload();
    } catch (failure) {
      setError((failure as Error).message);
    } finally {
      setBusy(false);
    }
  }
  return (
    <>
      <section className="card" aria-labelledby="new-codes">
        <h2 id="new-codes">Create redemption codes</h2>
        <form className="inline-form" onSubmit={submit}>
          <Field label="Plan" htmlFor="code-plan">
            <select id="code-plan" value={chosen} onChange={(event) => setPlan(event.target.value)}>
              {plans.data?.data.map((candidate) => (
                <option key={candidate.id} value={candidate.id}>
                  {candidate.name}
                </option>
              ))}
            </select>
          </Field>
          <Field label="How many" htmlFor="code-count">
            <input id="code-count" type="number" min={1} max={1000} value={count} onChange={(event) => setCount(event.target.value)} />
          </Field>
          <button type="submit" className="button primary" disabled={busy || chosen === ""}>
            {busy ? "Creating…" : "Create codes"}
          </button>
        </form>
        {error && <Notice tone="error">{error}</Notice>}
      </section>
      {created && (
        <Dialog title="Save these codes" onClose={() => setCreated(undefined)} footer={<CopyButton text={created.map((code) => code.code).join("\n")} label="Copy all" />}>
          <Notice tone="warning">Each code can be redeemed once. They are shown only now: copy them before closing.</Notice>
          <pre className="code" tabIndex={0}>
            <code>{created.map((code) => code.code).join("\n")}</code>
          </pre>
        </Dialog>
      )}
      <section className="card" aria-labelledby="codes-list">
        <h2 id="codes-list">Codes</h2>
        {codes.error ? (
          <ErrorState error={codes.error} retry={codes.reload} />
        ) : !codes.data ? (
          <Loading />
        ) : codes.data.data.length === 0 ? (
          <EmptyState title="No codes yet" />
        ) : (
          <div className="table-wrap">
            <table className="table" aria-label="Redemption codes">
              <thead>
                <tr>
                  <th scope="col">Code</th>
                  <th scope="col">Plan</th>
                  <th scope="col">Created</th>
                  <th scope="col">Redeemed</th>
                  <th scope="col">By</th>
                </tr>
              </thead>
              <tbody>
                {codes.data.data.map((code, index) => (
                  <tr key={index}>
                    <td>
                      <code>{code.display_prefix ?? "—"}…</code>
                    </td>
                    <td>{code.plan}</td>
                    <td>{formatDate(code.created)}</td>
                    <td>{code.redeemed ? formatDate(code.redeemed) : <Badge tone="green">Unused</Badge>}</td>
                    <td>{code.redeemed_by ?? "—"}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>
    </>
  );
}

function AllKeysSection() {
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

function ModelsSection() {
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
                {model.status.detail && <div className="muted small">{model.status.detail}</div>}
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
