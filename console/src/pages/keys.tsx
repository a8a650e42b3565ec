/** API Keys: the account's keys, a page at a time ("Load more"), "Create Key" (shown once), revoke with confirmation. */
import { useCallback, useEffect, useRef, useState } from "react";
import { api, ApiError, get, post, type ApiKey, type CreatedKey, type List, type Model } from "../api.ts";
import type { KeyScope, PageOf } from "../../../src/protocol/account-api.ts";
import { useSignedIn } from "../session.tsx";
import { formatCredits, formatDate, formatRelative } from "../format.ts";
import { BalanceBanner } from "../components/balance-banner.tsx";
import { DataTable, type Column } from "../components/data-table.tsx";
import { Badge, ConfirmDialog, CopyButton, Dialog, EmptyState, ErrorState, Field, Loading, Notice, PageHeader, useApi } from "../components/ui.tsx";

/** Keys a page holds; the server allows up to 200. */
export const KEY_PAGE_SIZE = 50;

/**
 * A key listing (`/api/keys` or `/api/admin/keys`), newest first, a page at a time: `loadMore`
 * asks for the page after the last key shown; `reload` loads afresh as many keys as are shown
 * (at most 200), so a revoke does not fold the list back to its first page.
 */
export function usePagedKeys(path: string) {
  const [keys, setKeys] = useState<ApiKey[]>();
  const [hasMore, setHasMore] = useState(false);
  const [loading, setLoading] = useState(false);
  const [error, setError] = useState<ApiError>();
  const shown = useRef(0);
  // Only the newest request's answer is kept (a reload while a page is loading wins).
  const latest = useRef(0);

  const load = useCallback(
    async (after: string | undefined, limit: number) => {
      const ticket = ++latest.current;
      setLoading(true);
      setError(undefined);
      try {
        const page = await get<PageOf<ApiKey>>(`${path}?limit=${limit}${after === undefined ? "" : `&after=${encodeURIComponent(after)}`}`);
        if (ticket !== latest.current) return;
        setKeys((previous) => {
          const next = after === undefined ? page.data : [...(previous ?? []), ...page.data];
          shown.current = next.length;
          return next;
        });
        setHasMore(page.has_more);
      } catch (failure) {
        if (ticket === latest.current) setError(failure instanceof ApiError ? failure : new ApiError(String(failure), 0, "error"));
      } finally {
        if (ticket === latest.current) setLoading(false);
      }
    },
    [path],
  );

  useEffect(() => {
    void load(undefined, KEY_PAGE_SIZE);
  }, [load]);

  return {
    keys,
    hasMore,
    loading,
    error,
    loadMore: () => void load(keys?.at(-1)?.id, KEY_PAGE_SIZE),
    reload: () => void load(undefined, Math.min(200, Math.max(KEY_PAGE_SIZE, shown.current))),
  };
}

/** "Load more" under a key table, while the server has more. */
export function LoadMoreKeys({ keys }: { keys: ReturnType<typeof usePagedKeys> }) {
  if (!keys.hasMore) return null;
  return (
    <div className="load-more">
      <button type="button" className="button small" disabled={keys.loading} onClick={keys.loadMore}>
        {keys.loading ? "Loading…" : "Load more"}
      </button>
    </div>
  );
}

export function KeysPage() {
  const keys = usePagedKeys("/api/keys");
  const [creating, setCreating] = useState(false);
  const [revoking, setRevoking] = useState<ApiKey>();
  const createButton = (
    <button type="button" className="button primary" onClick={() => setCreating(true)}>
      + Create Key
    </button>
  );

  return (
    <>
      <PageHeader
        title="API Keys"
        description="Your secret keys authenticate requests to /v1. Keep them safe: anyone with a key can spend your credit."
        actions={createButton}
      />
      <BalanceBanner />
      {keys.error && <ErrorState error={keys.error} retry={keys.reload} />}
      {!keys.keys && keys.loading && <Loading />}
      {keys.keys && keys.keys.length === 0 && (
        <EmptyState title="No API keys yet" action={createButton}>
          Create a key to call the API from your code.
        </EmptyState>
      )}
      {keys.keys && keys.keys.length > 0 && <KeysTable keys={keys.keys} onRevoke={setRevoking} />}
      <LoadMoreKeys keys={keys} />
      {creating && <CreateKeyDialog onClose={() => setCreating(false)} onCreated={keys.reload} />}
      {revoking && (
        <ConfirmDialog
          title="Revoke secret key"
          confirmLabel="Revoke key"
          danger
          onClose={() => setRevoking(undefined)}
          onConfirm={async () => {
            await api("DELETE", `/api/keys/${encodeURIComponent(revoking.id)}`);
            keys.reload();
          }}
        >
          <p>
            The key <strong>{revoking.name || revoking.display_prefix}</strong> (<code>{revoking.display_prefix}…</code>) will stop working at once.
            Requests made with it will be refused. This cannot be undone.
          </p>
        </ConfirmDialog>
      )}
    </>
  );
}

const SCOPE_LABELS: Record<KeyScope, string> = { inference: "Inference", account: "Account", admin: "Admin" };

function scopeBadge(key: ApiKey) {
  return <Badge tone={key.scope === "admin" ? "amber" : key.scope === "account" ? "blue" : "neutral"}>{SCOPE_LABELS[key.scope]}</Badge>;
}

function statusBadge(key: ApiKey) {
  if (key.status === "active") return <Badge tone="green">Active</Badge>;
  if (key.status === "expired") return <Badge tone="amber">Expired</Badge>;
  return <Badge tone="red">Revoked</Badge>;
}

export function KeysTable({ keys, onRevoke, showOwner }: { keys: ApiKey[]; onRevoke: (key: ApiKey) => void; showOwner?: boolean }) {
  const columns: Array<Column<ApiKey> | false> = [
    {
      id: "name",
      header: "Name",
      strong: true,
      cell: (key) => (
        <>
          {key.name || <span className="muted">Unnamed</span>} <code className="key-prefix">{key.display_prefix}…</code>
        </>
      ),
    },
    showOwner === true && { id: "owner", header: "Owner", breakAnywhere: true, cell: (key) => key.account_email ?? <span className="muted">operator</span> },
    { id: "scope", header: "Access", nowrap: true, cell: scopeBadge },
    { id: "created", header: "Created", nowrap: true, cell: (key) => formatDate(key.created) },
    { id: "last_used", header: "Last used", cell: (key) => formatRelative(key.last_used) },
    { id: "expires", header: "Expires", nowrap: true, cell: (key) => (key.expires === null ? "Never" : formatDate(key.expires)) },
    { id: "models", header: "Models", cell: (key) => (key.models === null ? <span className="muted">All</span> : key.models.join(", ")) },
    {
      id: "spent",
      header: "Spent",
      cell: (key) => (
        <>
          {key.spent.toLocaleString()}
          {key.spend_cap !== null && <span className="muted"> / {formatCredits(key.spend_cap)}</span>}
        </>
      ),
    },
    { id: "status", header: "Status", nowrap: true, cell: statusBadge },
    {
      id: "actions",
      header: "Actions",
      actions: true,
      cell: (key) =>
        key.status !== "revoked" && (
          <button type="button" className="button small danger-text" onClick={() => onRevoke(key)} aria-label={`Revoke ${key.name || key.display_prefix}`}>
            Revoke
          </button>
        ),
    },
  ];
  return <DataTable label="API Keys" columns={columns} rows={keys} rowKey={(key) => key.id} rowAttributes={(key) => ({ "data-key-id": key.id })} />;
}

const EXPIRY_CHOICES: Array<[string, string]> = [
  ["never", "Never"],
  ["7", "7 days"],
  ["30", "30 days"],
  ["90", "90 days"],
  ["custom", "Custom date"],
];

function CreateKeyDialog({ onClose, onCreated }: { onClose: () => void; onCreated: () => void }) {
  const models = useApi<List<Model>>("/api/models");
  const session = useSignedIn();
  const [name, setName] = useState("");
  const [scope, setScope] = useState<KeyScope>("account");
  const [expiry, setExpiry] = useState("never");
  const [customDate, setCustomDate] = useState("");
  const [restrict, setRestrict] = useState(false);
  const [chosen, setChosen] = useState<string[]>([]);
  const [spendCap, setSpendCap] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();
  const [created, setCreated] = useState<CreatedKey>();

  if (created) {
    // Closing forgets the key: it lives only in this dialog's state.
    return (
      <Dialog
        title="Save your key"
        onClose={onClose}
        footer={
          <button type="button" className="button primary" onClick={onClose}>
            Done
          </button>
        }
      >
        <Notice tone="warning">
          Please save this secret key somewhere safe and accessible. For security reasons, <strong>you won't be able to view it again</strong> through
          Turnpike. If you lose it, you'll need to create a new one.
        </Notice>
        <Field label={`Secret key "${created.name}"`} htmlFor="new-key">
          <div className="copy-row">
            <input id="new-key" className="mono" readOnly value={created.key} onFocus={(event) => event.target.select()} />
            <CopyButton text={created.key} />
          </div>
        </Field>
      </Dialog>
    );
  }

  async function submit(event: React.FormEvent) {
    event.preventDefault();
    setError(undefined);
    let expiresAt: number | null = null;
    if (expiry === "custom") {
      if (customDate === "") return setError("Pick an expiry date.");
      expiresAt = Math.floor(new Date(`${customDate}T23:59:59`).getTime() / 1000);
    } else if (expiry !== "never") {
      expiresAt = Math.floor(Date.now() / 1000) + Number(expiry) * 86_400;
    }
    if (restrict && chosen.length === 0) return setError("Choose at least one model, or allow all models.");
    const cap = spendCap.trim() === "" ? null : Number(spendCap);
    if (cap !== null && (!Number.isInteger(cap) || cap < 1)) return setError("The spend cap must be a whole number of credits.");
    setBusy(true);
    try {
      const key = await post<CreatedKey>("/api/keys", { name: name.trim(), scope, expires_at: expiresAt, models: restrict ? chosen : null, spend_cap: cap });
      setCreated(key);
      onCreated();
    } catch (failure) {
      setError((failure as Error).message);
    } finally {
      setBusy(false);
    }
  }

  return (
    <Dialog
      title="Create Key"
      onClose={onClose}
      footer={
        <>
          <button type="button" className="button" onClick={onClose}>
            Cancel
          </button>
          <button type="submit" form="create-key" className="button primary" disabled={busy}>
            {busy ? "Creating…" : "Create secret key"}
          </button>
        </>
      }
    >
      <form id="create-key" onSubmit={submit} className="form">
        {error && <Notice tone="error">{error}</Notice>}
        <Field label="Name" htmlFor="key-name">
          <input id="key-name" required maxLength={100} placeholder="My test key" value={name} onChange={(event) => setName(event.target.value)} autoFocus />
        </Field>
        <Field
          label="Access"
          htmlFor="key-scope"
          hint={
            scope === "inference"
              ? "Chat completions and models (/v1) only."
              : scope === "account"
                ? "/v1, and this account's API: keys, usage, balance."
                : "/v1, this account's API, and the admin routes. Keep it especially safe."
          }
        >
          <select id="key-scope" value={scope} onChange={(event) => setScope(event.target.value as KeyScope)}>
            <option value="inference">Inference only</option>
            <option value="account">Account</option>
            {session.role === "admin" && <option value="admin">Admin</option>}
          </select>
        </Field>
        <Field label="Expiration" htmlFor="key-expiry">
          <select id="key-expiry" value={expiry} onChange={(event) => setExpiry(event.target.value)}>
            {EXPIRY_CHOICES.map(([value, label]) => (
              <option key={value} value={value}>
                {label}
              </option>
            ))}
          </select>
        </Field>
        {expiry === "custom" && (
          <Field label="Expires on" htmlFor="key-expiry-date">
            <input id="key-expiry-date" type="date" value={customDate} min={new Date(Date.now() + 86_400_000).toISOString().slice(0, 10)} onChange={(event) => setCustomDate(event.target.value)} />
          </Field>
        )}
        <fieldset className="fieldset">
          <legend>Models</legend>
          <label className="radio">
            <input type="radio" name="key-models" checked={!restrict} onChange={() => setRestrict(false)} /> All models
          </label>
          <label className="radio">
            <input type="radio" name="key-models" checked={restrict} onChange={() => setRestrict(true)} /> Only these models
          </label>
          {restrict && (
            <div className="checklist">
              {models.loading && <Loading label="Loading models…" />}
              {models.error && <Notice tone="error">{models.error.message}</Notice>}
              {models.data?.data.map((model) => (
                <label key={model.id} className="checkbox">
                  <input
                    type="checkbox"
                    checked={chosen.includes(model.id)}
                    onChange={(event) => setChosen((previous) => (event.target.checked ? [...previous, model.id] : previous.filter((id) => id !== model.id)))}
                  />
                  {model.id}
                </label>
              ))}
            </div>
          )}
        </fieldset>
        <Field label="Spend cap (optional)" htmlFor="key-cap" hint="Most credits this key may spend in total. Leave empty for no cap of its own.">
          <input id="key-cap" type="number" inputMode="numeric" min={1} step={1} placeholder="No cap" value={spendCap} onChange={(event) => setSpendCap(event.target.value)} />
        </Field>
      </form>
    </Dialog>
  );
}
