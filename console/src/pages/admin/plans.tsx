/** Admin › Plans: the plans on offer; create and edit them. */
import { useState } from "react";
import { api, post, type List, type Plan } from "../../api.ts";
import { formatCredits, formatMoney } from "../../format.ts";
import { Dialog, EmptyState, ErrorState, Field, Loading, Notice, useApi } from "../../components/ui.tsx";
import { planLimits } from "../billing.tsx";
import { SERVICE_TIERS, type ServiceTier, type ServiceTierPrices } from "../../../../src/protocol/service-tiers.ts";

export function PlansSection() {
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

/** Each tier's row of the form: allowed or not, and its price multiplier as typed. */
type TierRows = Record<ServiceTier, { allowed: boolean; multiplier: string }>;

function tierRowsOf(prices: ServiceTierPrices): TierRows {
  const row = (tier: ServiceTier) => ({ allowed: prices[tier] !== undefined, multiplier: String(prices[tier] ?? 1) });
  return { priority: row("priority"), default: row("default"), flex: row("flex") };
}

function tierPricesOf(rows: TierRows): ServiceTierPrices {
  return Object.fromEntries(SERVICE_TIERS.filter((tier) => rows[tier].allowed).map((tier) => [tier, Number(rows[tier].multiplier)]));
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
    weight: String(plan?.weight ?? 1),
  });
  const [tiers, setTiers] = useState<TierRows>(() => tierRowsOf(plan?.service_tiers ?? { default: 1 }));
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
      weight: Number(form.weight),
      service_tiers: tierPricesOf(tiers),
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
        <Field label="Share weight" htmlFor="plan-weight" hint="Share of a busy model against other accounts (1: an even share)">
          <input id="plan-weight" type="number" min={0.01} max={1000} step="any" required value={form.weight} onChange={set("weight")} />
        </Field>
        {SERVICE_TIERS.map((tier) => (
          <Field key={tier} label={`Service tier ${tier}`} htmlFor={`plan-tier-${tier}`} hint="Allowed, at this price multiplier (1: the model's prices)">
            <span className="copy-row">
              <input
                type="checkbox"
                aria-label={`Allow the ${tier} tier`}
                checked={tiers[tier].allowed}
                onChange={(event) => setTiers({ ...tiers, [tier]: { ...tiers[tier], allowed: event.target.checked } })}
              />
              <input
                id={`plan-tier-${tier}`}
                type="number"
                min={0}
                max={100}
                step={0.01}
                disabled={!tiers[tier].allowed}
                required={tiers[tier].allowed}
                value={tiers[tier].multiplier}
                onChange={(event) => setTiers({ ...tiers, [tier]: { ...tiers[tier], multiplier: event.target.value } })}
              />
            </span>
          </Field>
        ))}
      </form>
    </Dialog>
  );
}
