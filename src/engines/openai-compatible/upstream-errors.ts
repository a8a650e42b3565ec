/**
 * What an upstream's refusal means for the client and for the pool. An upstream's message may
 * name its hosts, its addresses, its files or our key: clients see it only stripped of those, and
 * an upstream API key never appears in any error or log.
 *
 * - a context overflow (vLLM, SGLang, llama-server, OpenAI wordings) → 400 `context_length_exceeded`;
 * - 401/403 (our key is wrong or lacks access) and 404 (the model is not served there) → 503
 *   `upstream_unavailable`, and the operator is told loudly: it is their configuration;
 * - other 4xx → 400 with the upstream's message, stripped;
 * - 408, 429 and 5xx → try another member (honouring `retry-after`); when every attempt failed,
 *   502 `upstream_error` or 504 `upstream_timeout`.
 */
import { ApiError, ContextLengthExceededError, InvalidRequestError, UpstreamError, UpstreamTimeoutError, UpstreamUnavailableError } from "../../protocol/errors.ts";
import type { MemberOutcome } from "./pool-types.ts";

/** What to do with an upstream's answer or failure. */
export type UpstreamVerdict =
  /** The member failed: try another (nothing was sent to the client yet). `error` is what the client gets if none is left. */
  | { action: "retry"; outcome: MemberOutcome; error: ApiError; retryAfterMs?: number }
  /** The request itself was refused (or the operator must act): answer the client with `error` now. */
  | { action: "refuse"; outcome: MemberOutcome; error: ApiError; operatorAlert?: string };

/** The longest upstream message shown to a client. */
const MAX_MESSAGE_LENGTH = 500;

/**
 * An upstream's message made safe for a client: URLs, IP addresses, `host:port`, file paths,
 * bearer tokens and anything key-like (long runs of letters and digits, `sk-…`) are replaced, and
 * the given secrets removed wherever they appear. Cut to 500 characters.
 */
export function sanitizeUpstreamMessage(message: string, secrets: readonly string[] = []): string {
  let text = message;
  for (const secret of secrets) if (secret.length >= 4) text = text.split(secret).join("(redacted)");
  text = text
    .replace(/[^\x20-\x7e\u00a0-\uffff]/g, " ")
    .replace(/\b[a-z][a-z0-9+.-]*:\/\/[^\s'"`<>)\]]+/gi, "(a URL)")
    .replace(/\bBearer\s+\S+/gi, "Bearer (redacted)")
    .replace(/\b(?:sk|pk|rk|key|api|token|hf)[-_][A-Za-z0-9_-]{8,}/g, "(redacted)")
    .replace(/\[[0-9a-f:]{2,}(?:%\w+)?\](?::\d+)?/gi, "(an address)")
    .replace(/\b(?:[0-9a-f]{1,4}:){2,7}[0-9a-f]{1,4}\b/gi, "(an address)")
    .replace(/\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b/g, "(an address)")
    .replace(/\b[a-z0-9-]+(?:\.[a-z0-9-]+)*:\d{2,5}\b/gi, "(an address)")
    .replace(/\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:internal|local|lan|svc|cluster|corp|home|intranet)\b/gi, "(a host)")
    .replace(/(^|[\s'"`(=])(?:[A-Za-z]:)?(?:\/[\w.@~+-]+){2,}\/?/g, "$1(a path)")
    .replace(/\b(?=[A-Za-z0-9+/_-]*\d)(?=[A-Za-z0-9+/_-]*[A-Za-z])[A-Za-z0-9+/_-]{32,}={0,2}/g, "(redacted)")
    .replace(/\s+/g, " ")
    .trim();
  return text.length > MAX_MESSAGE_LENGTH ? `${text.slice(0, MAX_MESSAGE_LENGTH - 1)}…` : text;
}

/** The wordings of a prompt that does not fit: vLLM, SGLang, llama-server, OpenAI, TGI-likes. */
const CONTEXT_OVERFLOW = [
  /maximum context length/i,
  /context[ _]length[ _]exceeded/i,
  /exceeds? the available context size/i,
  /exceed_context_size/i,
  /longer than the model'?s context length/i,
  /(?:prompt|input) is too long/i,
  /too many (?:input )?tokens/i,
  /exceeds? (?:the )?(?:model'?s )?(?:maximum )?context (?:window|length|size)/i,
];

/** Whether an upstream's error says the prompt (plus the completion asked for) does not fit the context. */
export function isContextOverflow(message: string, code?: unknown, type?: unknown): boolean {
  if (code === "context_length_exceeded" || type === "exceed_context_size_error") return true;
  return CONTEXT_OVERFLOW.some((pattern) => pattern.test(message));
}

/** The message, code and type of an upstream's error body, whatever its shape (OpenAI, vLLM's flat one, FastAPI's `detail`, plain text). */
export function readUpstreamError(body: string): { message: string; code?: unknown; type?: unknown; status?: number } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return { message: body.trim() };
  }
  return readErrorObject(parsed) ?? { message: body.trim() };
}

/** The same, from a parsed payload (an error event in a stream); undefined when it holds no error. */
export function readErrorObject(payload: unknown): { message: string; code?: unknown; type?: unknown; status?: number } | undefined {
  if (typeof payload !== "object" || payload === null) return undefined;
  const record = payload as Record<string, unknown>;
  const inner = record.error;
  const source: Record<string, unknown> | undefined =
    typeof inner === "object" && inner !== null ? (inner as Record<string, unknown>) : record.object === "error" ? record : undefined;
  if (source === undefined) {
    if (typeof inner === "string") return { message: inner };
    if (typeof record.detail === "string") return { message: record.detail };
    if (Array.isArray(record.detail)) {
      const first = record.detail[0] as { msg?: unknown; loc?: unknown } | undefined;
      return { message: typeof first?.msg === "string" ? `${first.msg}${Array.isArray(first.loc) ? ` (${first.loc.join(".")})` : ""}` : "invalid request" };
    }
    return undefined;
  }
  const message = typeof source.message === "string" ? source.message : typeof inner === "string" ? inner : "";
  const numeric = typeof source.code === "number" ? source.code : typeof source.status === "number" ? source.status : undefined;
  return { message, code: source.code, type: source.type, ...(numeric !== undefined ? { status: numeric } : {}) };
}

/** Milliseconds a `retry-after` (seconds or an HTTP date) or `retry-after-ms` header asks for; undefined when absent or unreadable. */
export function retryAfterMs(headers: Readonly<Record<string, string | string[] | undefined>>, now = Date.now()): number | undefined {
  const first = (name: string) => {
    const value = headers[name];
    return Array.isArray(value) ? value[0] : value;
  };
  const milliseconds = Number(first("retry-after-ms"));
  if (first("retry-after-ms") !== undefined && Number.isFinite(milliseconds) && milliseconds >= 0) return milliseconds;
  const value = first("retry-after");
  if (value === undefined) return undefined;
  if (/^\s*\d+(\.\d+)?\s*$/.test(value)) return Number(value) * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

/**
 * The verdict on an upstream's HTTP error answer (`status` ≥ 400) to `/chat/completions`.
 * `secrets` (our API key) are stripped from any message that could reach a client or a log.
 */
export function classifyHttpError(
  status: number,
  body: string,
  headers: Readonly<Record<string, string | string[] | undefined>>,
  secrets: readonly string[] = [],
): UpstreamVerdict {
  const error = readUpstreamError(body);
  const message = sanitizeUpstreamMessage(error.message, secrets);
  if (status === 401 || status === 403) {
    return {
      action: "refuse",
      outcome: { kind: "status", status },
      error: new UpstreamUnavailableError(),
      operatorAlert: `the upstream refused our credentials (HTTP ${status}): check the model's api_key_env and its access${message === "" ? "" : `; it said: ${message}`}`,
    };
  }
  if (status === 404) {
    return {
      action: "refuse",
      outcome: { kind: "status", status },
      error: new UpstreamUnavailableError(),
      operatorAlert: `the upstream does not serve this model (HTTP 404): check the entry's upstream.model and urls${message === "" ? "" : `; it said: ${message}`}`,
    };
  }
  if (status === 408 || status === 429 || status >= 500) {
    const wait = retryAfterMs(headers);
    return {
      action: "retry",
      outcome: { kind: "status", status, ...(wait !== undefined ? { retryAfterMs: wait } : {}) },
      error: new UpstreamError(`The model's upstream servers failed to answer (HTTP ${status}). Retry shortly.`),
      ...(wait !== undefined ? { retryAfterMs: wait } : {}),
    };
  }
  if (isContextOverflow(error.message, error.code, error.type)) {
    return { action: "refuse", outcome: { kind: "neutral" }, error: new ContextLengthExceededError(message || "The request does not fit the model's context window.") };
  }
  return {
    action: "refuse",
    outcome: { kind: "neutral" },
    error: new InvalidRequestError(message === "" ? `The model's upstream server refused the request (HTTP ${status}).` : `The model's upstream server refused the request: ${message}`),
  };
}

/**
 * The verdict on an error event inside a 200 stream (`data: {"error": …}`), before any content
 * reached the client: a 4xx-like code is the request's fault, anything else the member's.
 */
export function classifyStreamError(payload: unknown, secrets: readonly string[] = []): UpstreamVerdict {
  const error = readErrorObject(payload) ?? { message: "" };
  const message = sanitizeUpstreamMessage(error.message, secrets);
  const status = error.status;
  if (isContextOverflow(error.message, error.code, error.type)) {
    return { action: "refuse", outcome: { kind: "neutral" }, error: new ContextLengthExceededError(message || "The request does not fit the model's context window.") };
  }
  if (status !== undefined && status >= 400 && status < 500 && status !== 408 && status !== 429) {
    return { action: "refuse", outcome: { kind: "neutral" }, error: new InvalidRequestError(`The model's upstream server refused the request: ${message || `error ${status}`}`) };
  }
  return {
    action: "retry",
    outcome: { kind: "protocol" },
    error: new UpstreamError(message === "" ? "The model's upstream server failed mid-stream." : `The model's upstream server failed mid-stream: ${message}`),
  };
}

/** The error a client gets when a stream that already sent content fails (it cannot be retried). */
export function midStreamFailure(kind: "timeout" | "failure", detail?: string): ApiError {
  if (kind === "timeout") return new UpstreamTimeoutError(detail ?? "The model's upstream server stopped sending in the middle of the reply.");
  return new UpstreamError(detail ?? "The model's upstream server failed in the middle of the reply.");
}
