/** Billing: balance, plan and expiry; the plans on offer (Buy → Stripe Checkout); redeem a code; the history. */
import { useEffect, useState } from "react";
import { SERVICE_TIERS } from "../../../src/protocol/service-tiers.ts";
import { ApiError, post, type Account, type List, type Plan } from "../api.ts";
import { formatCredits, formatDate, formatMoney, formatNumber } from "../format.ts";
import { useRouter } from "../router.tsx";
import { BillingHistory } from "./billing-history.tsx";
import { EmptyState, ErrorState, Field, Loading, Notice, PageHeader, useApi } from "../components/ui.tsx";

export function BillingPage() {
  const account = useApi<Account>("/api/account");
  const plans = useApi<List<Plan>>("/api/plans");
  const { search } = useRouter();
  const checkout = search.get("checkout");
  const [historyGeneration, setHistoryGeneration] = useState(0);

  return (
    <>
      <PageHeader title="Billing" description="Credit pays for tokens at each model's prices. Buy a plan or redeem a code to add credit." />
      {checkout === "success" && <Notice tone="success">Thank you! Your payment went through; the credit appears as soon as the payment provider confirms it.</Notice>}
      {checkout === "cancel" && <Notice tone="info">Checkout was cancelled. Nothing was charged.</Notice>}
      {account.error ? (
        <ErrorState error={account.error} retry={account.reload} />
      ) : !account.data ? (
        <Loading />
      ) : (
        <div className="stat-grid">
          <div className="stat">
            <div className="muted small">Credit balance</div>
            <div className="stat-value" data-testid="balance">
              {formatCredits(account.data.balance)}
            </div>
          </div>
          <div className="stat">
            <div className="muted small">Plan</div>
            <div className="stat-value" data-testid="plan">
              {account.data.plan?.name ?? "No plan"}
            </div>
          </div>
          <div className="stat">
            <div className="muted small">Credit expires</div>
            <div className="stat-value">{account.data.credit_expires === null ? (account.data.balance > 0 ? "Never" : "—") : formatDate(account.data.credit_expires)}</div>
          </div>
        </div>
      )}
      <section aria-labelledby="plans-heading">
        <h2 id="plans-heading" className="section-title">
          Plans
        </h2>
        {plans.error ? (
          <ErrorState error={plans.error} retry={plans.reload} />
        ) : !plans.data ? (
          <Loading />
        ) : plans.data.data.length === 0 ? (
          <EmptyState title="No plans on offer">The operator has not defined any plans yet.</EmptyState>
        ) : (
          <div className="plan-grid">
            {plans.data.data.map((plan) => (
              <PlanCard key={plan.id} plan={plan} current={account.data?.plan?.id === plan.id} />
            ))}
          </div>
        )}
      </section>
      <RedeemCode
        onRedeemed={() => {
          account.reload();
          setHistoryGeneration((value) => value + 1);
        }}
      />
      <BillingHistory generation={historyGeneration} />
    </>
  );
}

export function planLimits(plan: Plan): string[] {
  return [
    plan.days === null ? "Credit never expires" : `Credit lasts ${plan.days} days`,
    plan.rpm === null ? "No request limit" : `${formatNumber(plan.rpm)} requests / minute`,
    plan.tpm === null ? "No token limit" : `${formatNumber(plan.tpm)} tokens / minute`,
    plan.models === null ? "All models" : `Models: ${plan.models.join(", ")}`,
    `Service tiers: ${SERVICE_TIERS.filter((tier) => plan.service_tiers[tier] !== undefined)
      .map((tier) => `${tier} ×${plan.service_tiers[tier]}`)
      .join(", ")}`,
    ...(plan.weight === 1 ? [] : [`Share weight ${plan.weight}`]),
  ];
}

function PlanCard({ plan, current }: { plan: Plan; current: boolean }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError>();
  async function buy() {
    setBusy(true);
    setError(undefined);
    try {
      const session = await post<{ id: string; url: string }>("/api/billing/checkout", { plan: plan.id });
      window.location.assign(session.url);
    } catch (failure) {
      setError(failure as ApiError);
      setBusy(false);
    }
  }
  return (
    <article className={current ? "plan-card current" : "plan-card"} aria-labelledby={`plan-${plan.id}`}>
      <h3 id={`plan-${plan.id}`}>{plan.name}</h3>
      <div className="plan-price">{formatMoney(plan.price)}</div>
      <div className="plan-credit">{formatCredits(plan.credit)}</div>
      <ul className="plan-limits">
        {planLimits(plan).map((line) => (
          <li key={line}>{line}</li>
        ))}
      </ul>
      <button type="button" className="button primary full" onClick={buy} disabled={busy}>
        {busy ? "Opening checkout…" : current ? "Buy again" : `Buy ${plan.name}`}
      </button>
      {error && (
        <Notice tone={error.code === "payments_not_configured" ? "info" : "error"}>
          {error.code === "payments_not_configured" ? "Online payments are not configured on this server. Ask an administrator for a plan or a redemption code." : error.message}
        </Notice>
      )}
    </article>
  );
}

function RedeemCode({ onRedeemed }: { onRedeemed: () => void }) {
  const [code, setCode] = useState("");
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState<{ tone: "success" | "error"; text: string }>();
  useEffect(() => {
    // "Redeem a code" in the low-balance banner links here.
    if (window.location.hash === "#redeem-code") document.getElementById("redeem-code")?.focus();
  }, []);
  async function submit(event: React.FormEvent) {
    event.preventDefault();
    setBusy(true);
    setResult(undefined);
    try {
      const redeemed = await post<{ granted: boolean; plan: Plan | string; balance: number }>("/api/billing/redeem", { code: code.trim() });
      const planName = typeof redeemed.plan === "string" ? redeemed.plan : redeemed.plan.name;
      setResult({ tone: "success", text: `Code redeemed: ${planName}. Your balance is now ${formatCredits(redeemed.balance)}.` });
      setCode("");
      onRedeemed();
    } catch (failure) {
      setResult({ tone: "error", text: (failure as Error).message });
    } finally {
      setBusy(false);
    }
  }
  return (
    <section className="card" aria-labelledby="redeem-heading">
      <h2 id="redeem-heading">Redeem a code</h2>
      <form className="inline-form" onSubmit={submit}>
        <Field label="Redemption code" htmlFor="redeem-code">
          <input id="redeem-code" className="mono" required value={code} onChange={(event) => setCode(event.target.value)} placeholder="XXXX-XXXX-XXXX" autoComplete="off" />
        </Field>
        <button type="submit" className="button primary" disabled={busy || code.trim() === ""}>
          {busy ? "Redeeming…" : "Redeem"}
        </button>
      </form>
      {result && <Notice tone={result.tone}>{result.text}</Notice>}
    </section>
  );
}
