/** Usage: tokens and cost per day and per model over a chosen range, and the latest requests. */
import { useMemo, useState } from "react";
import { Bar, BarChart, CartesianGrid, Legend, ResponsiveContainer, Tooltip, XAxis, YAxis, type DefaultTooltipContentProps } from "recharts";
import type { List, UsageGroup, UsageRequest } from "../api.ts";
import { useSignedIn } from "../session.tsx";
import { chartCost, formatCost, formatDateTime, formatMoneyTick, formatNumber, formatSpent } from "../format.ts";
import { useCreditValue } from "../credit-value.ts";
import { DataTable, type Column } from "../components/data-table.tsx";
import { Badge, EmptyState, ErrorState, Field, Loading, PageHeader, Tabs, useApi } from "../components/ui.tsx";

type Range = "7" | "30" | "90" | "custom";
const DAY = 86_400_000;
/** The longest range `GET /api/usage/export` takes. */
const MAX_EXPORT_DAYS = 366;

function isoDay(time: number): string {
  return new Date(time).toISOString().slice(0, 10);
}

export function UsagePage() {
  const [range, setRange] = useState<Range>("30");
  const [customFrom, setCustomFrom] = useState(isoDay(Date.now() - 6 * DAY));
  const [customTo, setCustomTo] = useState(isoDay(Date.now()));
  const [metric, setMetric] = useState<"tokens" | "cost">("tokens");
  const session = useSignedIn();
  const isAdmin = session.role === "admin";
  // Admins may look at any account's usage, or everyone's; "" is their own.
  const [account, setAccount] = useState("");
  const accounts = useApi<List<{ id: string; email: string }>>(isAdmin ? "/api/admin/accounts" : null);

  const { from, to } = useMemo(() => {
    if (range === "custom") {
      const start = Date.parse(`${customFrom}T00:00:00Z`);
      const end = Date.parse(`${customTo}T00:00:00Z`) + DAY;
      return { from: Number.isNaN(start) ? Date.now() - 7 * DAY : start, to: Number.isNaN(end) ? Date.now() : end };
    }
    const end = Date.parse(`${isoDay(Date.now())}T00:00:00Z`) + DAY;
    return { from: end - Number(range) * DAY, to: end };
  }, [range, customFrom, customTo]);

  const scope = account === "" ? "" : `&account=${encodeURIComponent(account)}`;
  const query = `from=${new Date(from).toISOString()}&to=${new Date(to).toISOString()}${scope}`;
  const byDay = useApi<List<UsageGroup>>(`/api/usage?${query}&group_by=day`);
  const byModel = useApi<List<UsageGroup>>(`/api/usage?${query}&group_by=model`);
  const creditValue = useCreditValue();
  const requests = useApi<List<UsageRequest>>(`/api/usage/requests?limit=50${scope}`);

  const days = useMemo(() => {
    const found = new Map((byDay.data?.data ?? []).map((row) => [String(row.group).slice(0, 10), row]));
    const rows = [];
    for (let time = from; time < to; time += DAY) {
      const day = isoDay(time);
      const row = found.get(day);
      rows.push({
        day: day.slice(5),
        prompt: row ? row.prompt_tokens - row.cached_prompt_tokens : 0,
        cached: row?.cached_prompt_tokens ?? 0,
        completion: row?.completion_tokens ?? 0,
        cost: chartCost(row?.cost ?? 0, creditValue),
        credits: row?.cost ?? 0,
        requests: row?.requests ?? 0,
      });
    }
    return rows;
  }, [byDay.data, from, to, creditValue]);
  // A single day with usage would be a sliver at the chart's edge among empty days: drawn alone, centred.
  const usedDays = days.filter((day) => day.requests > 0);
  const chartDays = usedDays.length === 1 ? usedDays : days;

  const totals = (byModel.data?.data ?? []).reduce(
    (sum, row) => ({
      requests: sum.requests + row.requests,
      tokens: sum.tokens + row.prompt_tokens + row.completion_tokens,
      cost: sum.cost + row.cost,
    }),
    { requests: 0, tokens: 0, cost: 0 },
  );

  // The cost charts plot money when the server says what a credit is worth, credits otherwise.
  const inMoney = metric === "cost" && creditValue !== null;
  const costName = creditValue === null ? "Credits" : `Cost (${creditValue.currency.toUpperCase()})`;
  const costTicks = inMoney ? { allowDecimals: true, tickFormatter: (value: number) => formatMoneyTick(value, creditValue.currency) } : { allowDecimals: false };
  const costTooltip: DefaultTooltipContentProps["formatter"] = inMoney
    ? (_value, name, item) => [formatCost(Number((item.payload as { credits?: number }).credits ?? 0), creditValue), name]
    : undefined;

  return (
    <>
      <PageHeader
        title="Usage"
        description={
          account === ""
            ? "Tokens and credit spent by your keys. Figures come from the ledger and match your balance."
            : account === "all"
              ? "Tokens and credit spent by every account on this installation."
              : "Tokens and credit spent by the chosen account's keys."
        }
        actions={
          <div className="range-picker">
            {isAdmin && (
              <>
                <label htmlFor="usage-account" className="visually-hidden">
                  Account
                </label>
                <select id="usage-account" value={account} onChange={(event) => setAccount(event.target.value)}>
                  <option value="">My account</option>
                  <option value="all">All accounts</option>
                  {(accounts.data?.data ?? [])
                    .filter((row) => row.id !== session.id)
                    .map((row) => (
                      <option key={row.id} value={row.id}>
                        {row.email}
                      </option>
                    ))}
                </select>
              </>
            )}
            <label htmlFor="usage-range" className="visually-hidden">
              Range
            </label>
            <select id="usage-range" value={range} onChange={(event) => setRange(event.target.value as Range)}>
              <option value="7">Last 7 days</option>
              <option value="30">Last 30 days</option>
              <option value="90">Last 90 days</option>
              <option value="custom">Custom range</option>
            </select>
            {to - from > MAX_EXPORT_DAYS * DAY ? (
              <button type="button" className="button" disabled title={`An export covers at most ${MAX_EXPORT_DAYS} days.`}>
                Export CSV
              </button>
            ) : (
              <a className="button" href={`/api/usage/export?${query}`} download>
                Export CSV
              </a>
            )}
          </div>
        }
      />
      {range === "custom" && (
        <div className="inline-fields">
          <Field label="From" htmlFor="usage-from">
            <input id="usage-from" type="date" value={customFrom} max={customTo} onChange={(event) => setCustomFrom(event.target.value)} />
          </Field>
          <Field label="To" htmlFor="usage-to">
            <input id="usage-to" type="date" value={customTo} min={customFrom} onChange={(event) => setCustomTo(event.target.value)} />
          </Field>
        </div>
      )}
      {byDay.error || byModel.error ? (
        <ErrorState error={(byDay.error ?? byModel.error)!} retry={() => (byDay.reload(), byModel.reload())} />
      ) : !byDay.data || !byModel.data ? (
        <Loading />
      ) : (
        <>
          <div className="stat-grid">
            <Stat label="Requests" value={formatNumber(totals.requests)} testId="usage-requests" />
            <Stat label="Tokens" value={formatNumber(totals.tokens)} testId="usage-tokens" />
            <Stat label="Spent" value={formatSpent(totals.cost, creditValue)} testId="usage-cost" />
          </div>
          <section className="card" aria-labelledby="per-day">
            <div className="card-header">
              <h2 id="per-day">Per day</h2>
              <Tabs
                label="Chart"
                value={metric}
                onChange={setMetric}
                tabs={[
                  ["tokens", "Tokens"],
                  ["cost", "Cost"],
                ]}
              />
            </div>
            {usedDays.length === 1 && <p className="muted small chart-note">Only {usedDays[0]!.day} had usage in this range.</p>}
            <div className="chart" role="img" aria-label={`${metric === "tokens" ? "Tokens" : "Cost"} per day`}>
              <ResponsiveContainer width="100%" height={260}>
                <BarChart data={chartDays} maxBarSize={56} margin={{ top: 8, right: 8, bottom: 0, left: 0 }}>
                  <CartesianGrid strokeDasharray="3 3" vertical={false} stroke="var(--border)" />
                  <XAxis dataKey="day" tick={{ fontSize: 12, fill: "var(--muted)" }} tickLine={false} axisLine={false} minTickGap={16} />
                  <YAxis tick={{ fontSize: 12, fill: "var(--muted)" }} tickLine={false} axisLine={false} width={inMoney ? 72 : 56} {...costTicks} />
                  <Tooltip contentStyle={{ background: "var(--surface)", border: "1px solid var(--border)", borderRadius: 8 }} cursor={{ fill: "var(--hover)" }} formatter={costTooltip} />
                  {metric === "tokens" ? (
                    <>
                      <Legend wrapperStyle={{ fontSize: 12 }} formatter={(value: string) => <span className="chart-legend-text">{value}</span>} />
                      <Bar dataKey="prompt" name="Prompt" stackId="tokens" fill="#6366f1" isAnimationActive={false} />
                      <Bar dataKey="cached" name="Cached prompt" stackId="tokens" fill="#a5b4fc" isAnimationActive={false} />
                      <Bar dataKey="completion" name="Completion" stackId="tokens" fill="#10b981" isAnimationActive={false} radius={[4, 4, 0, 0]} />
                    </>
                  ) : (
                    <Bar dataKey="cost" name={costName} fill="#f59e0b" isAnimationActive={false} radius={[4, 4, 0, 0]} />
                  )}
                </BarChart>
              </ResponsiveContainer>
            </div>
          </section>
          <section className="card" aria-labelledby="per-model">
            <div className="card-header">
              <h2 id="per-model">Per model</h2>
            </div>
            {byModel.data.data.length === 0 ? (
              <EmptyState title="No usage in this range">Calls made with your keys show up here.</EmptyState>
            ) : (
              <>
              <div className="chart" role="img" aria-label={`${metric === "tokens" ? "Tokens" : "Cost"} per model`} style={{ minHeight: 0 }}>
                <ResponsiveContainer width="100%" height={Math.max(90, 44 * byModel.data.data.length + 40)}>
                  <BarChart
                    layout="vertical"
                    data={byModel.data.data.map((row) => ({ model: row.group, prompt: row.prompt_tokens, completion: row.completion_tokens, cost: chartCost(row.cost, creditValue), credits: row.cost }))}
                    margin={{ top: 0, right: 16, bottom: 0, left: 0 }}
                  >
                    <CartesianGrid strokeDasharray="3 3" horizontal={false} stroke="var(--border)" />
                    <XAxis type="number" tick={{ fontSize: 12, fill: "var(--muted)" }} tickLine={false} axisLine={false} {...costTicks} />
                    <YAxis type="category" dataKey="model" tick={{ fontSize: 12, fill: "var(--muted)" }} tickLine={false} axisLine={false} width={140} />
                    <Tooltip contentStyle={{ background: "var(--surface)", border: "1px solid var(--border)", borderRadius: 8 }} cursor={{ fill: "var(--hover)" }} formatter={costTooltip} />
                    {metric === "tokens" ? (
                      <>
                        <Bar dataKey="prompt" name="Prompt" stackId="tokens" fill="#6366f1" isAnimationActive={false} />
                        <Bar dataKey="completion" name="Completion" stackId="tokens" fill="#10b981" isAnimationActive={false} radius={[0, 4, 4, 0]} />
                      </>
                    ) : (
                      <Bar dataKey="cost" name={costName} fill="#f59e0b" isAnimationActive={false} radius={[0, 4, 4, 0]} />
                    )}
                  </BarChart>
                </ResponsiveContainer>
              </div>
              <DataTable
                label="Usage per model"
                bare
                rows={byModel.data.data}
                rowKey={(row) => row.group}
                columns={[
                  { id: "model", header: "Model", strong: true, cell: (row) => row.group },
                  { id: "requests", header: "Requests", numeric: true, cell: (row) => formatNumber(row.requests) },
                  { id: "prompt_tokens", header: "Prompt tokens", numeric: true, cell: (row) => formatNumber(row.prompt_tokens) },
                  { id: "cached_prompt_tokens", header: "Cached", numeric: true, cell: (row) => formatNumber(row.cached_prompt_tokens) },
                  { id: "completion_tokens", header: "Completion tokens", numeric: true, cell: (row) => formatNumber(row.completion_tokens) },
                  {
      id: "cost",
      header: creditValue === null ? "Credits" : "Cost",
      numeric: true,
      cell: (row) => <span title={`${formatNumber(row.cost)} credits`}>{formatCost(row.cost, creditValue)}</span>,
    },
                ]}
              />
              </>
            )}
          </section>
        </>
      )}
      <section className="card" aria-labelledby="recent">
        <div className="card-header">
          <h2 id="recent">Recent requests</h2>
          <button type="button" className="button small" onClick={requests.reload}>
            Refresh
          </button>
        </div>
        {requests.error ? (
          <ErrorState error={requests.error} retry={requests.reload} />
        ) : !requests.data ? (
          <Loading />
        ) : requests.data.data.length === 0 ? (
          <EmptyState title="No requests yet">Call /v1/chat/completions with one of your keys, or try the playground.</EmptyState>
        ) : (
          <RequestsTable rows={requests.data.data} />
        )}
      </section>
    </>
  );
}

function Stat({ label, value, testId }: { label: string; value: string; testId: string }) {
  return (
    <div className="stat">
      <div className="muted small">{label}</div>
      <div className="stat-value" data-testid={testId}>
        {value}
      </div>
    </div>
  );
}

function RequestsTable({ rows }: { rows: UsageRequest[] }) {
  const creditValue = useCreditValue();
  const columns: Array<Column<UsageRequest>> = [
    { id: "time", header: "Time", nowrap: true, cell: (row) => formatDateTime(row.created) },
    { id: "key", header: "Key", cell: (row) => row.key_name || <code>{row.key_id ?? "—"}</code> },
    { id: "model", header: "Model", cell: (row) => row.model },
    {
      id: "prompt_tokens",
      header: "Prompt",
      numeric: true,
      cell: (row) => (
        <>
          {formatNumber(row.prompt_tokens)}
          {row.cached_prompt_tokens > 0 && <span className="muted small"> ({formatNumber(row.cached_prompt_tokens)} cached)</span>}
        </>
      ),
    },
    { id: "completion_tokens", header: "Completion", numeric: true, cell: (row) => formatNumber(row.completion_tokens) },
    {
      id: "cost",
      header: creditValue === null ? "Credits" : "Cost",
      numeric: true,
      cell: (row) => <span title={`${formatNumber(row.cost)} credits`}>{formatCost(row.cost, creditValue)}</span>,
    },
    { id: "latency", header: "Latency", numeric: true, nowrap: true, cell: (row) => `${formatNumber(row.latency_ms)} ms` },
    {
      id: "status",
      header: "Status",
      cell: (row) => (
        <>
          <Badge tone={row.status < 400 ? "green" : "red"}>{row.status}</Badge>
          {row.finish_reason && <span className="muted small"> {row.finish_reason}</span>}
          {Boolean(row.stream) && <span className="muted small"> · stream</span>}
          {row.service_tier !== "default" && <span className="muted small"> · {row.service_tier} tier</span>}
        </>
      ),
    },
  ];
  return <DataTable label="Recent requests" columns={columns} rows={rows} rowKey={(row) => row.id} rowAttributes={(row) => ({ "data-request-id": row.request_id })} bare />;
}
