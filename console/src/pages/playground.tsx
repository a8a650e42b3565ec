/**
 * Playground: chat with a model through `/v1/chat/completions` or `/v1/responses` (a toggle,
 * remembered in this browser), streamed, with a key of your own or a temporary key for this
 * browser session (expires in 12 hours, revoked at sign-out). The temporary key is
 * inference-only: it can call `/v1`, never the account API. Only the models served through one
 * of those endpoints are offered (their `endpoints`): an embedding model is not.
 */
import { useEffect, useRef, useState } from "react";
import { api, post, type CreatedKey, type List, type Model } from "../api.ts";
import { costOf, formatCredits, formatNumber } from "../format.ts";
import { useSession } from "../session.tsx";
import { BalanceBanner } from "../components/balance-banner.tsx";
import { EmptyState, ErrorState, Field, Loading, PageHeader, useApi } from "../components/ui.tsx";
import { Link } from "../router.tsx";
import { CodeDialog } from "./playground-code.tsx";
import { DIALECTS, dialectsOf, playgroundModels, readStream, requestBody, saveDialect, savedDialect, type Dialect, type Message, type Parameters, type StreamUsage } from "./playground-dialects.ts";

/**
 * One exchange: the user's message and the answer. A failed exchange (the call was refused, or
 * ended in an error or was stopped before any text) shows its error and is never sent again:
 * the next request carries the successful exchanges only. Retry sends its message afresh.
 */
type Turn = { id: number; user: string; answer: string; state: "streaming" | "done" | "failed"; error?: string };

const TEMPORARY_KEY_HOURS = 12;
const storageKey = (accountId: string) => `turnpike.playground-key.${accountId}`;

/** The session's temporary key, made on first use and kept in this tab's storage. */
async function temporaryKey(accountId: string): Promise<string> {
  const stored = window.sessionStorage.getItem(storageKey(accountId));
  if (stored !== null) {
    const parsed = JSON.parse(stored) as { key: string; expires: number };
    if (parsed.expires * 1000 > Date.now() + 60_000) return parsed.key;
  }
  const expires = Math.floor(Date.now() / 1000) + TEMPORARY_KEY_HOURS * 3600;
  const created = await post<CreatedKey>("/api/keys", { name: "Playground (temporary)", scope: "inference", expires_at: expires });
  window.sessionStorage.setItem(storageKey(accountId), JSON.stringify({ id: created.id, key: created.key, expires }));
  return created.key;
}

/** Revokes and forgets the temporary key (at sign-out). */
export async function forgetTemporaryKey(accountId: string): Promise<void> {
  const stored = window.sessionStorage.getItem(storageKey(accountId));
  if (stored === null) return;
  window.sessionStorage.removeItem(storageKey(accountId));
  const { id } = JSON.parse(stored) as { id: string };
  await api("DELETE", `/api/keys/${encodeURIComponent(id)}`).catch(() => undefined);
}

/** The successful exchanges as messages, in order: what the next request carries after the system prompt. */
function historyOf(turns: readonly Turn[]): Message[] {
  return turns
    .filter((turn) => turn.state === "done")
    .flatMap((turn): Message[] => [
      { role: "user", content: turn.user },
      { role: "assistant", content: turn.answer },
    ]);
}

/** Whether the screen is wide enough for the settings beside the chat (the layout's breakpoint). */
const WIDE = "(min-width: 801px)";

export function PlaygroundPage() {
  const { session } = useSession();
  const models = useApi<List<Model>>("/api/models");
  const [modelId, setModelId] = useState("");
  const [keyMode, setKeyMode] = useState<"temporary" | "own">("temporary");
  const [ownKey, setOwnKey] = useState("");
  const [system, setSystem] = useState("You are a helpful assistant.");
  const [parameters, setParameters] = useState<Parameters>({ temperature: 1, max_tokens: 256, top_p: 1, seed: "" });
  const [turns, setTurns] = useState<Turn[]>([]);
  const [draft, setDraft] = useState("");
  const [usage, setUsage] = useState<{ dialect: Dialect; usage: StreamUsage; cost: number }>();
  const [chosenDialect, setChosenDialect] = useState<Dialect>(savedDialect);
  const [showCode, setShowCode] = useState(false);
  const [settingsOpen, setSettingsOpen] = useState(() => window.matchMedia?.(WIDE).matches ?? true);
  const abort = useRef<AbortController | null>(null);
  const nextId = useRef(1);
  const endOfChat = useRef<HTMLDivElement>(null);
  const streaming = turns.some((turn) => turn.state === "streaming");

  const offered = playgroundModels(models.data?.data ?? []);
  const model = offered.find((candidate) => candidate.id === modelId);
  const dialects = dialectsOf(model);
  // The saved choice stays for the next model that serves it; this one may serve another dialect only.
  const dialect = dialects.includes(chosenDialect) ? chosenDialect : (dialects[0] ?? "chat");
  useEffect(() => {
    // The first model on offer until one is chosen (or when the chosen one is no longer offered).
    const first = offered[0];
    if (first !== undefined && model === undefined) setModelId(first.id);
  }, [models.data, modelId]);
  useEffect(() => {
    // Braces: newer browsers return a promise from scrollIntoView, which React would take for a cleanup.
    endOfChat.current?.scrollIntoView?.({ block: "nearest" });
  }, [turns]);

  /** The request body for `conversation`: what Send posts and View code shows. */
  function bodyFor(conversation: Message[]) {
    return requestBody(dialect, { model, modelId, system, parameters, conversation });
  }

  function chooseDialect(next: Dialect) {
    setChosenDialect(next);
    saveDialect(next);
  }

  function update(id: number, change: Partial<Turn>) {
    setTurns((previous) => previous.map((turn) => (turn.id === id ? { ...turn, ...change } : turn)));
  }

  /** Sends `text` after the successful exchanges of `history`. */
  async function run(text: string, history: Turn[]) {
    if (!model || !session) return;
    const id = nextId.current++;
    const body = bodyFor([...historyOf(history), { role: "user", content: text }]);
    setTurns([...history, { id, user: text, answer: "", state: "streaming" }]);
    setUsage(undefined);
    const controller = new AbortController();
    abort.current = controller;
    let answer = "";
    try {
      const key = keyMode === "own" ? ownKey.trim() : await temporaryKey(session.id);
      if (key === "") throw new Error("Paste one of your API keys, or use a temporary key.");
      const response = await fetch(DIALECTS[dialect].path, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (!response.ok || response.body === null) {
        const failure = (await response.json().catch(() => ({}))) as { error?: { message?: string } };
        throw new Error(failure.error?.message ?? `The server answered ${response.status}.`);
      }
      await readStream(dialect, response.body, {
        onText(delta) {
          answer += delta;
          update(id, { answer });
        },
        onUsage(streamUsage) {
          const cost = costOf(model.pricing, { prompt_tokens: streamUsage.input, completion_tokens: streamUsage.output, cached_tokens: streamUsage.cached });
          setUsage({ dialect: dialect, usage: streamUsage, cost });
        },
      });
      update(id, { state: "done" });
    } catch (failure) {
      const stopped = (failure as Error).name === "AbortError";
      // Stopped after some text: keep what came, as the answer. Anything else failed.
      if (stopped && answer !== "") update(id, { state: "done" });
      else update(id, { state: "failed", error: stopped ? "Stopped before the model answered." : (failure as Error).message });
    } finally {
      abort.current = null;
    }
  }

  function send(event: React.FormEvent) {
    event.preventDefault();
    if (draft.trim() === "" || streaming) return;
    const text = draft;
    setDraft("");
    void run(text, turns);
  }

  /** Sends a failed exchange's message again, in its place at the end of the chat. */
  function retry(turn: Turn) {
    if (streaming) return;
    void run(
      turn.user,
      turns.filter((candidate) => candidate.id !== turn.id),
    );
  }

  if (models.error) return <ErrorState error={models.error} retry={models.reload} />;
  if (!models.data) return <Loading />;
  if (offered.length === 0) {
    return (
      <>
        <PageHeader title="Playground" description="Try the models with your prompts. Calls are billed to your account like any other." />
        {models.data.data.length === 0 ? (
          <EmptyState title="No models">The operator has not configured any models.</EmptyState>
        ) : (
          <EmptyState title="No chat models" action={<Link to="/models">See what each model serves</Link>}>
            The playground needs a model served at <code>{DIALECTS.chat.path}</code> or <code>{DIALECTS.responses.path}</code>, and none of this server&apos;s models is (an embedding model
            answers at <code>/v1/embeddings</code> only).
          </EmptyState>
        )}
      </>
    );
  }

  const supported = new Set(model?.supported_parameters ?? []);
  const nextBody = bodyFor([...historyOf(turns), ...(draft.trim() === "" ? [] : [{ role: "user" as const, content: draft }])]);
  return (
    <>
      <PageHeader
        title="Playground"
        description="Try the models with your prompts. Calls are billed to your account like any other."
        actions={
          <>
            <button type="button" className="button" onClick={() => setShowCode(true)}>
              {"</>"} View code
            </button>
            <button type="button" className="button" onClick={() => (setTurns([]), setUsage(undefined))} disabled={streaming}>
              Clear
            </button>
          </>
        }
      />
      <BalanceBanner />
      <div className="playground">
        <details
          className="card playground-settings"
          open={settingsOpen}
          onToggle={(event) => setSettingsOpen((event.currentTarget as HTMLDetailsElement).open)}
        >
          <summary>
            <span className="summary-title">Settings</span>
            <span className="muted small summary-detail">
              {modelId} · {DIALECTS[dialect].label} · {keyMode === "temporary" ? "temporary key" : "your key"}
            </span>
          </summary>
          <div className="settings-fields">
            <Field label="Model" htmlFor="pg-model">
              <select id="pg-model" value={modelId} onChange={(event) => setModelId(event.target.value)}>
                {offered.map((candidate) => (
                  <option key={candidate.id} value={candidate.id}>
                    {candidate.id}
                    {candidate.status.state === "ready" ? "" : ` (${candidate.status.state})`}
                  </option>
                ))}
              </select>
            </Field>
            {dialects.length > 1 && (
              <fieldset className="field segmented-field" aria-describedby="pg-dialect-hint">
                <legend>API</legend>
                <div className="segmented">
                  {dialects.map((candidate) => (
                    <label key={candidate} className={candidate === dialect ? "segment active" : "segment"}>
                      <input type="radio" name="pg-dialect" value={candidate} checked={candidate === dialect} onChange={() => chooseDialect(candidate)} disabled={streaming} />
                      {DIALECTS[candidate].label}
                    </label>
                  ))}
                </div>
                <p className="hint" id="pg-dialect-hint">
                  {dialect === "chat" ? (
                    <>
                      Posts to <code>/v1/chat/completions</code>.
                    </>
                  ) : (
                    <>
                      Posts to <code>/v1/responses</code> with <code>store: false</code>: nothing is kept on the server, and each message sends the whole conversation again.
                    </>
                  )}
                </p>
              </fieldset>
            )}
            <Field
              label="API key"
              htmlFor="pg-key-mode"
              hint={keyMode === "temporary" ? "Inference only; expires in 12 hours or at sign-out." : "Used only in this tab, never stored."}
            >
              <select id="pg-key-mode" value={keyMode} onChange={(event) => setKeyMode(event.target.value as "temporary" | "own")}>
                <option value="temporary">Temporary key</option>
                <option value="own">One of my keys</option>
              </select>
            </Field>
            {keyMode === "own" && (
              <Field label="Your key" htmlFor="pg-key">
                <input id="pg-key" type="password" className="mono" autoComplete="off" value={ownKey} onChange={(event) => setOwnKey(event.target.value)} placeholder="tp-…" />
              </Field>
            )}
            <Field label="System prompt" htmlFor="pg-system">
              <textarea id="pg-system" rows={4} value={system} onChange={(event) => setSystem(event.target.value)} />
            </Field>
            {supported.has("temperature") && (
              <Field label={`Temperature: ${parameters.temperature.toFixed(2)}`} htmlFor="pg-temperature">
                <input id="pg-temperature" type="range" min={0} max={2} step={0.05} value={parameters.temperature} onChange={(event) => setParameters({ ...parameters, temperature: Number(event.target.value) })} />
              </Field>
            )}
            {supported.has("top_p") && (
              <Field label={`Top P: ${parameters.top_p.toFixed(2)}`} htmlFor="pg-top-p">
                <input id="pg-top-p" type="range" min={0} max={1} step={0.05} value={parameters.top_p} onChange={(event) => setParameters({ ...parameters, top_p: Number(event.target.value) })} />
              </Field>
            )}
            {supported.has("max_tokens") && (
              <Field label="Maximum tokens" htmlFor="pg-max-tokens" hint={dialect === "responses" ? <>Sent as <code>max_output_tokens</code>, which must be at least 16.</> : undefined}>
                <input id="pg-max-tokens" type="number" min={1} max={model?.context_length} value={parameters.max_tokens} onChange={(event) => setParameters({ ...parameters, max_tokens: Math.max(1, Number(event.target.value) || 1) })} />
              </Field>
            )}
            {/* The Responses API has no seed. */}
            {supported.has("seed") && dialect === "chat" && (
              <Field label="Seed (optional)" htmlFor="pg-seed">
                <input id="pg-seed" type="number" value={parameters.seed} onChange={(event) => setParameters({ ...parameters, seed: event.target.value })} />
              </Field>
            )}
          </div>
        </details>
        <section className="card playground-chat" aria-label="Conversation">
          <div className="messages" aria-live="polite">
            {turns.length === 0 && <p className="muted center">Send a message to start.</p>}
            {turns.map((turn) => (
              <div key={turn.id} className={turn.state === "failed" ? "exchange failed" : "exchange"} data-testid="exchange" data-state={turn.state}>
                <div className="message user">
                  <div className="message-role">You</div>
                  <div className="message-content">{turn.user}</div>
                </div>
                {turn.state === "failed" ? (
                  <div className="message error" role="alert" data-testid="failed-message">
                    <div className="message-role">Failed · left out of the conversation</div>
                    {turn.answer !== "" && <div className="message-content muted">{turn.answer}</div>}
                    <div className="message-content">{turn.error}</div>
                    <div>
                      <button type="button" className="button small" onClick={() => retry(turn)} disabled={streaming}>
                        Retry
                      </button>
                    </div>
                  </div>
                ) : (
                  <div className="message assistant" data-testid="assistant-message">
                    <div className="message-role">Assistant</div>
                    <div className="message-content">{turn.answer || (turn.state === "streaming" ? <span className="typing">…</span> : "")}</div>
                  </div>
                )}
              </div>
            ))}
            <div ref={endOfChat} />
          </div>
          {usage && (
            <div className="usage-line" data-testid="playground-usage">
              {formatNumber(usage.usage.input)} {usage.dialect === "chat" ? "prompt" : "input"}
              {usage.usage.cached > 0 && <> ({formatNumber(usage.usage.cached)} cached)</>} + {formatNumber(usage.usage.output)} {usage.dialect === "chat" ? "completion" : "output"} tokens · {formatCredits(usage.cost)}
              {usage.usage.finish && <> · {usage.dialect === "chat" ? "finished" : "status"}: {usage.usage.finish}</>}
            </div>
          )}
          <form className="composer" onSubmit={send}>
            <label htmlFor="pg-message" className="visually-hidden">
              Message
            </label>
            <textarea
              id="pg-message"
              rows={2}
              placeholder="Enter a message…"
              value={draft}
              onChange={(event) => setDraft(event.target.value)}
              onKeyDown={(event) => {
                if (event.key === "Enter" && !event.shiftKey) {
                  event.preventDefault();
                  event.currentTarget.form?.requestSubmit();
                }
              }}
            />
            {streaming ? (
              <button type="button" className="button" onClick={() => abort.current?.abort()}>
                Stop
              </button>
            ) : (
              <button type="submit" className="button primary" disabled={draft.trim() === ""}>
                Send
              </button>
            )}
          </form>
        </section>
      </div>
      {showCode && <CodeDialog dialect={dialect} body={nextBody} onClose={() => setShowCode(false)} />}
    </>
  );
}
