/** Admin › Codes: make single-use redemption codes (shown once) and see which were redeemed. */
import { useState } from "react";
import { post, type List, type Plan } from "../../api.ts";
import { formatDate } from "../../format.ts";
import { DataTable } from "../../components/data-table.tsx";
import { Badge, CopyButton, Dialog, EmptyState, ErrorState, Field, Loading, Notice, useApi } from "../../components/ui.tsx";

type Code = { code?: string; display_prefix?: string; plan: string; created?: number; redeemed?: number | null; redeemed_by?: string | null };

export function CodesSection() {
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
          <DataTable
            label="Redemption codes"
            bare
            rows={codes.data.data}
            rowKey={(_code, index) => String(index)}
            columns={[
              { id: "code", header: "Code", nowrap: true, cell: (code) => <code>{code.display_prefix ?? "—"}…</code> },
              { id: "plan", header: "Plan", cell: (code) => code.plan },
              { id: "created", header: "Created", nowrap: true, cell: (code) => formatDate(code.created) },
              { id: "redeemed", header: "Redeemed", nowrap: true, cell: (code) => (code.redeemed ? formatDate(code.redeemed) : <Badge tone="green">Unused</Badge>) },
              { id: "redeemed_by", header: "By", breakAnywhere: true, cell: (code) => code.redeemed_by ?? "—" },
            ]}
          />
        )}
      </section>
    </>
  );
}
