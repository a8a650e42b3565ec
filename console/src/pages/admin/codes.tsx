/** Admin › Codes: make single-use redemption codes (shown once) and see which were redeemed. */
import { useState } from "react";
import { post, type List, type Plan } from "../../api.ts";
import { formatDate } from "../../format.ts";
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
