/**
 * What an upstream's refusal means for the client and for the pool. An upstream's own words may
 * name its hosts, addresses, files, accounts or our key, in more forms than any filter knows:
 * clients never see them. A client gets a fixed message for the upstream's status (and, for a
 * prompt that does not fit, the numbers read out of the upstream's words: nothing else of them);
 * the upstream's words go to the log (`upstreamMessage`, our API key removed), with the member.
 *
 * - a context overflow (vLLM, SGLang, llama-server, OpenAI wordings) → 400 `context_length_exceeded`;
 * - 401/403 (our key is wrong or lacks access) and 404 (the model is not served there) → 503
 *   `upstream_unavailable`, and the operator is told loudly: it is their configuration;
 * - other 4xx → 400 with the fixed message of its status (`refusalMessage`);
 * - 408, 429 and 5xx → try another member (honouring `retry-after`); when every attempt failed,
 *   502 `upstream_error` or 504 `upstream_timeout`.
 */
import { ApiError, ContextLengthExceededError, InternalServerError, InvalidRequestError, UpstreamError, UpstreamTimeoutError, UpstreamUnavailableError } from "../../protocol/errors.ts";
import type { MemberOutcome } from "./pool-types.ts";
import { describeConnectionFailure, UpstreamConnectionError, UpstreamRequestError } from "./upstream-client.ts";

/** What to do with an upstream's answer or failure. `upstreamMessage` is the upstream's own words, for the log only. */
export type UpstreamVerdict =
  /** The member failed: try another (nothing was sent to the client yet). `error` is what the client gets if none is left. */
  | { action: "retry"; outcome: MemberOutcome; error: ApiError; retryAfterMs?: number; upstreamMessage?: string }
  /** The request itself was refused (or the operator must act): answer the client with `error` now. */
  | { action: "refuse"; outcome: MemberOutcome; error: ApiError; operatorAlert?: string; upstreamMessage?: string };

/** The longest upstream message written to the log. */
const MAX_LOGGED_LENGTH = 2000;

/**
 * An upstream's message as it may be logged: the given secrets (our API key) removed wherever
 * they appear, control characters made spaces, cut to 2,000 characters. Never shown to a client.
 */
export function upstreamWordsForLog(message: string, secrets: readonly string[] = []): string {
  let text = message;
  for (const secret of secrets) if (secret.length >= 4) text = text.split(secret).join("(redacted)");
  text = text
    .replace(/[^\x20-\x7e\u00a0-\uffff]/g, " ")
    .replace(/\s+/g, " ")
    .trim();
  return text.length > MAX_LOGGED_LENGTH ? `${text.slice(0, MAX_LOGGED_LENGTH - 1)}…` : text;
}

/**
 * The fixed message a client gets for an upstream's refusal with this status: the status says
 * what kind of refusal it was, the upstream's words stay in the log.
 */
export function refusalMessage(status: number | undefined): string {
  switch (status) {
    case 400:
      return "The upstream engine refused the request as invalid.";
    case 401:
    case 403:
      return "The upstream engine refused Turnpike's credentials; the operator has been told.";
    case 404:
      return "The upstream engine does not serve this model; the operator has been told.";
    case 409:
      return "The upstream engine refused the request as conflicting with its state.";
    case 413:
      return "The upstream engine refused the request as too large.";
    case 415:
      return "The upstream engine refused the request's content type.";
    case 422:
      return "The upstream engine refused a parameter of the request as out of range or of the wrong type.";
    default:
      return status !== undefined && status >= 400 && status < 500
        ? `The upstream engine refused the request (HTTP ${status}).`
        : "The upstream engine refused the request.";
  }
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

/** Token counts an upstream gave with its overflow: the context, and the request's total or its prompt. */
export type OverflowCounts = { contextLength?: number; requestedTokens?: number; promptTokens?: number };

/** A whole number of tokens as an upstream wrote it (`8192`, `8,192`); undefined when absent or absurd. */
function tokens(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const value = Number(text.replace(/,/g, ""));
  return Number.isSafeInteger(value) && value > 0 && value < 1e12 ? value : undefined;
}

const firstMatch = (message: string, patterns: readonly RegExp[]): number | undefined => {
  for (const pattern of patterns) {
    const found = tokens(pattern.exec(message)?.[1]);
    if (found !== undefined) return found;
  }
  return undefined;
};

/**
 * The numbers of an overflow, read out of the upstream's words (vLLM: "maximum context length is
 * 4096 tokens. However, you requested 5000 tokens"; SGLang: "The input (9000 tokens) is longer
 * than the model's context length (8192 tokens)"; OpenAI: "your messages resulted in 130000
 * tokens") or its fields (llama-server's `n_ctx`, `n_prompt_tokens`). Only these numbers reach a client.
 */
export function overflowCounts(message: string, fields: OverflowCounts = {}): OverflowCounts {
  const contextLength =
    fields.contextLength ?? firstMatch(message, [/context (?:length|window|size)(?: is| of)?[\s(:]{0,3}(\d[\d,]*) ?tokens/i, /(\d[\d,]*)[- ]token context/i]);
  const requestedTokens = fields.requestedTokens ?? firstMatch(message, [/you requested (?:a total of )?(\d[\d,]*) tokens/i, /requested a total of (\d[\d,]*) tokens/i]);
  const promptTokens =
    fields.promptTokens ??
    firstMatch(message, [/request has (\d[\d,]*) input tokens/i, /input \((\d[\d,]*) tokens\)/i, /messages resulted in (\d[\d,]*) tokens/i, /(\d[\d,]*) in the messages/i]);
  return {
    ...(contextLength !== undefined ? { contextLength } : {}),
    ...(requestedTokens !== undefined ? { requestedTokens } : {}),
    ...(promptTokens !== undefined ? { promptTokens } : {}),
  };
}

/** The client's message for an overflow: fixed words around the upstream's numbers. */
export function contextOverflowMessage(counts: OverflowCounts): string {
  const context = counts.contextLength === undefined ? "The request does not fit the model's context window." : `This model's maximum context length is ${counts.contextLength} tokens.`;
  const size =
    counts.requestedTokens !== undefined
      ? ` However, you requested ${counts.requestedTokens} tokens${counts.promptTokens !== undefined ? ` (${counts.promptTokens} in the messages)` : ""}.`
      : counts.promptTokens !== undefined
        ? ` However, your messages are ${counts.promptTokens} tokens${counts.contextLength !== undefined && counts.promptTokens < counts.contextLength ? ", which with the completion asked for do not fit" : ""}.`
        : "";
  return `${context}${size} Please reduce the length of the messages or the completion.`;
}

/** What an upstream's error says: its message (for the log), code, type, status, and overflow numbers it gave as fields. */
export type UpstreamErrorReading = { message: string; code?: unknown; type?: unknown; status?: number; counts?: OverflowCounts };

/** The message, code and type of an upstream's error body, whatever its shape (OpenAI, vLLM's flat one, FastAPI's `detail`, plain text). */
export function readUpstreamError(body: string): UpstreamErrorReading {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return { message: body.trim() };
  }
  return readErrorObject(parsed) ?? { message: body.trim() };
}

/** The same, from a parsed payload (an error event in a stream); undefined when it holds no error. */
export function readErrorObject(payload: unknown): UpstreamErrorReading | undefined {
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
  // llama-server gives an overflow's numbers as fields.
  const contextLength = typeof source.n_ctx === "number" ? tokens(String(source.n_ctx)) : undefined;
  const promptTokens = typeof source.n_prompt_tokens === "number" ? tokens(String(source.n_prompt_tokens)) : undefined;
  const counts: OverflowCounts = { ...(contextLength !== undefined ? { contextLength } : {}), ...(promptTokens !== undefined ? { promptTokens } : {}) };
  return {
    message,
    code: source.code,
    type: source.type,
    ...(numeric !== undefined ? { status: numeric } : {}),
    ...(Object.keys(counts).length > 0 ? { counts } : {}),
  };
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

/** The overflow error a client gets, from what the upstream said. */
function overflowError(error: UpstreamErrorReading): ContextLengthExceededError {
  return new ContextLengthExceededError(contextOverflowMessage(overflowCounts(error.message, error.counts)));
}

/**
 * The verdict on an upstream's HTTP error answer (`status` ≥ 400) to `/chat/completions`. The
 * client's error holds none of the upstream's words; `upstreamMessage` (for the log) has
 * `secrets` (our API key) removed.
 */
export function classifyHttpError(
  status: number,
  body: string,
  headers: Readonly<Record<string, string | string[] | undefined>>,
  secrets: readonly string[] = [],
): UpstreamVerdict {
  const error = readUpstreamError(body);
  const message = upstreamWordsForLog(error.message, secrets);
  const words = message === "" ? {} : { upstreamMessage: message };
  if (status === 401 || status === 403) {
    return {
      action: "refuse",
      outcome: { kind: "status", status },
      error: new UpstreamUnavailableError(),
      operatorAlert: `the upstream refused our credentials (HTTP ${status}): check the model's api_key_env and its access`,
      ...words,
    };
  }
  if (status === 404) {
    return {
      action: "refuse",
      outcome: { kind: "status", status },
      error: new UpstreamUnavailableError(),
      operatorAlert: "the upstream does not serve this model (HTTP 404): check the entry's upstream.model and urls",
      ...words,
    };
  }
  if (status === 408 || status === 429 || status >= 500) {
    const wait = retryAfterMs(headers);
    return {
      action: "retry",
      outcome: { kind: "status", status, ...(wait !== undefined ? { retryAfterMs: wait } : {}) },
      error: new UpstreamError(`The model's upstream servers failed to answer (HTTP ${status}). Retry shortly.`),
      ...(wait !== undefined ? { retryAfterMs: wait } : {}),
      ...words,
    };
  }
  if (isContextOverflow(error.message, error.code, error.type)) {
    return { action: "refuse", outcome: { kind: "neutral" }, error: overflowError(error), ...words };
  }
  return { action: "refuse", outcome: { kind: "neutral" }, error: new InvalidRequestError(refusalMessage(status)), ...words };
}

/**
 * The verdict on an error event inside a 200 stream (`data: {"error": …}`): a 4xx-like code is
 * the request's fault, anything else the member's. The client's error holds none of the upstream's words.
 */
export function classifyStreamError(payload: unknown, secrets: readonly string[] = []): UpstreamVerdict {
  const error = readErrorObject(payload) ?? { message: "" };
  const message = upstreamWordsForLog(error.message, secrets);
  const words = message === "" ? {} : { upstreamMessage: message };
  const status = error.status;
  if (isContextOverflow(error.message, error.code, error.type)) {
    return { action: "refuse", outcome: { kind: "neutral" }, error: overflowError(error), ...words };
  }
  if (status !== undefined && status >= 400 && status < 500 && status !== 408 && status !== 429) {
    return { action: "refuse", outcome: { kind: "neutral" }, error: new InvalidRequestError(refusalMessage(status)), ...words };
  }
  return { action: "retry", outcome: { kind: "protocol" }, error: new UpstreamError("The model's upstream server failed mid-stream."), ...words };
}

/** The error a client gets when a stream that already sent content fails (it cannot be retried). */
export function midStreamFailure(kind: "timeout" | "failure", detail?: string): ApiError {
  if (kind === "timeout") return new UpstreamTimeoutError(detail ?? "The model's upstream server stopped sending in the middle of the reply.");
  return new UpstreamError(detail ?? "The model's upstream server failed in the middle of the reply.");
}

/**
 * The verdict on a failure that is no answer at all: our own request refused by the HTTP client
 * (never the member's fault: refused now, another member not tried, `report`ed by its name and
 * code only, as an argument the client refused may hold a header's value), or a connection that
 * failed (another member is tried).
 */
export function classifyTransportFailure(error: unknown, report: (message: string, fields: Record<string, unknown>) => void): UpstreamVerdict {
  if (error instanceof UpstreamRequestError) {
    const cause = error.cause as { name?: unknown; code?: unknown } | undefined;
    report("a request could not be sent upstream for a reason of ours; not counted against the member", { error: String(cause?.name ?? "Error"), code: String(cause?.code ?? "") });
    return { action: "refuse", outcome: { kind: "neutral" }, error: new InternalServerError(undefined, error) };
  }
  const failure = error instanceof UpstreamConnectionError ? error : describeConnectionFailure(error);
  if (failure.kind === "connect-timeout") return { action: "retry", outcome: { kind: "connect" }, error: new UpstreamTimeoutError() };
  return { action: "retry", outcome: { kind: "connect" }, error: new UpstreamError() };
}
