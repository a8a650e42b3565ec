/**
 * HTTP to one pool's upstreams: one undici `Agent` (a keep-alive connection pool per origin),
 * the API key as a bearer token, and errors that say what failed without saying where or with
 * what key. Timeouts for the first token and between chunks are the engine's (it knows when
 * content began); the agent only bounds how long a connection may take to open.
 */
import { Agent, request, type Dispatcher } from "undici";

export type UpstreamClientOptions = {
  /** Milliseconds to open a connection before giving up on the member. */
  connectTimeoutMs: number;
  /** Connections per origin at most (the member's `max_in_flight`). */
  connectionsPerOrigin: number;
  /** Sent as `Authorization: Bearer …`; never logged or put in an error. */
  apiKey?: string;
};

/** A request to a member failed before it answered: `connect` (refused, reset, unreachable, or too slow to connect) or `aborted`. */
export class UpstreamConnectionError extends Error {
  readonly kind: "connect" | "connect-timeout" | "aborted";
  constructor(kind: "connect" | "connect-timeout" | "aborted", message: string) {
    super(message);
    this.name = "UpstreamConnectionError";
    this.kind = kind;
  }
}

/**
 * A request to a member that could not be sent for a reason of ours, not the member's (an
 * argument the HTTP client refused, a bug): it says nothing of the member's health, so it never
 * counts against it.
 */
export class UpstreamRequestError extends Error {
  constructor(message: string, cause: unknown) {
    super(message, { cause });
    this.name = "UpstreamRequestError";
  }
}

/** An upstream's answer: status, headers, and the body as bytes (read it or `dump` it). */
export type UpstreamResponse = {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: AsyncIterable<Uint8Array> & { text(): Promise<string>; dump(options?: { limit: number }): Promise<void> };
};

/** Error codes that mean "this member cannot be reached" (as opposed to "it answered badly"). */
const CONNECTION_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EPIPE",
  "ETIMEDOUT",
  "UND_ERR_SOCKET",
  "UND_ERR_CLOSED",
  "UND_ERR_CONNECT_TIMEOUT",
]);

/** Codes of failures that are ours (a request the HTTP client would not send), not the network's. */
const OWN_FAILURE_CODES = new Set(["UND_ERR_INVALID_ARG", "UND_ERR_NOT_SUPPORTED", "UND_ERR_INVALID_RETURN_VALUE", "ERR_INVALID_ARG_TYPE", "ERR_INVALID_ARG_VALUE", "ERR_INVALID_CHAR", "ERR_HTTP_INVALID_HEADER_VALUE"]);

/**
 * Whether a failure of the HTTP client came from the network or the member (it carries a system
 * or undici code: refused, reset, closed, timed out...) rather than from our own request: an
 * error without a code (a `RangeError`, a `TypeError` of ours) or with one of `OWN_FAILURE_CODES`.
 */
export function isNetworkFailure(error: unknown): boolean {
  const code = errorCode(error);
  return code !== undefined && !OWN_FAILURE_CODES.has(code);
}

function errorCode(error: unknown): string | undefined {
  for (let current: unknown = error, depth = 0; current !== undefined && current !== null && depth < 4; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === "string") return code;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

/** Why a request to a member failed, in words safe for logs (a code, no address). */
export function describeConnectionFailure(error: unknown): UpstreamConnectionError {
  if (error instanceof UpstreamConnectionError) return error;
  const code = errorCode(error);
  if (code === "UND_ERR_CONNECT_TIMEOUT") return new UpstreamConnectionError("connect-timeout", "could not connect in time");
  if (code === "UND_ERR_ABORTED" || (error as { name?: unknown } | undefined)?.name === "AbortError") return new UpstreamConnectionError("aborted", "the request was aborted");
  return new UpstreamConnectionError("connect", code !== undefined && CONNECTION_CODES.has(code) ? `connection failed (${code})` : `connection failed (${code ?? "unknown error"})`);
}

/** An upstream's streamed answer: status, headers, and the body's pieces as they arrive (iterate once). */
export type UpstreamStream = {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: AsyncIterable<Uint8Array>;
};

/** Pieces held unread before the upstream's connection is paused (TCP then slows the upstream). */
const HELD_BYTES = 64 * 1024;

/**
 * One streamed answer as undici's dispatch handler: the status and headers resolve `response`,
 * then each piece is queued for the one reader of `body` (a promise only when it has to wait).
 * The request's signal aborts it; a reader that stops early aborts it too, so the connection is
 * not left half read. Failures before the answer reject `response` as `UpstreamClient.#send`'s do.
 */
class StreamedAnswer implements Dispatcher.DispatchHandler, AsyncIterator<Uint8Array> {
  readonly response: Promise<UpstreamStream>;
  readonly #signal: AbortSignal;
  #resolve!: (stream: UpstreamStream) => void;
  #reject!: (error: unknown) => void;
  #controller: Dispatcher.DispatchController | undefined;
  #started = false;
  readonly #pieces: Uint8Array[] = [];
  #held = 0;
  #ended = false;
  #failure: Error | undefined;
  #waiting: { resolve: (result: IteratorResult<Uint8Array>) => void; reject: (error: unknown) => void } | undefined;

  constructor(signal: AbortSignal) {
    this.#signal = signal;
    this.response = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    if (!signal.aborted) signal.addEventListener("abort", this.#onAbort, { once: true });
  }

  readonly #onAbort = (): void => {
    const reason = this.#signal.reason instanceof Error ? this.#signal.reason : Object.assign(new Error("aborted"), { name: "AbortError" });
    if (this.#controller !== undefined && !this.#controller.aborted) this.#controller.abort(reason);
    else if (this.#controller === undefined) this.onResponseError(undefined, reason);
  };

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    if (this.#signal.aborted) this.#onAbort();
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    this.#started = true;
    this.#resolve({ status: statusCode, headers, body: { [Symbol.asyncIterator]: () => this } });
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    const waiting = this.#waiting;
    if (waiting !== undefined) {
      this.#waiting = undefined;
      waiting.resolve({ done: false, value: chunk });
      return;
    }
    this.#pieces.push(chunk);
    this.#held += chunk.length;
    if (this.#held > HELD_BYTES) controller.pause();
  }

  onResponseEnd(): void {
    this.#ended = true;
    this.#finish();
  }

  onResponseError(_controller: Dispatcher.DispatchController | undefined, error: Error): void {
    this.#signal.removeEventListener("abort", this.#onAbort);
    if (!this.#started) {
      this.#started = true;
      const signal = this.#signal;
      this.#reject(!signal.aborted && !isNetworkFailure(error) ? new UpstreamRequestError("the request could not be sent", error) : describeConnectionFailure(signal.aborted ? Object.assign(new Error("aborted"), { name: "AbortError" }) : error));
      return;
    }
    this.#failure ??= error;
    this.#finish();
  }

  #finish(): void {
    this.#signal.removeEventListener("abort", this.#onAbort);
    const waiting = this.#waiting;
    if (waiting === undefined) return;
    this.#waiting = undefined;
    if (this.#failure !== undefined) waiting.reject(this.#failure);
    else waiting.resolve({ done: true, value: undefined });
  }

  next(): Promise<IteratorResult<Uint8Array>> {
    const piece = this.#pieces.shift();
    if (piece !== undefined) {
      this.#held -= piece.length;
      if (this.#controller?.paused === true && this.#held <= HELD_BYTES / 2) this.#controller.resume();
      return Promise.resolve({ done: false, value: piece });
    }
    if (this.#failure !== undefined) return Promise.reject(this.#failure);
    if (this.#ended) return Promise.resolve({ done: true, value: undefined });
    return new Promise((resolve, reject) => {
      this.#waiting = { resolve, reject };
    });
  }

  /** The reader stopped early (a `break`, a throw): the rest is not wanted. */
  return(): Promise<IteratorResult<Uint8Array>> {
    if (!this.#ended && this.#failure === undefined) {
      this.#failure = new Error("the answer was not read to its end");
      if (this.#controller !== undefined && !this.#controller.aborted) this.#controller.abort(this.#failure);
    }
    this.#pieces.length = 0;
    this.#signal.removeEventListener("abort", this.#onAbort);
    return Promise.resolve({ done: true, value: undefined });
  }
}

/** The HTTP side of one pool: chat completion and embeddings posts and JSON probes over one keep-alive agent. */
export class UpstreamClient {
  readonly #agent: Dispatcher;
  readonly #apiKey: string | undefined;

  constructor(options: UpstreamClientOptions) {
    this.#apiKey = options.apiKey;
    this.#agent = new Agent({
      connect: { timeout: options.connectTimeoutMs },
      connections: options.connectionsPerOrigin,
      keepAliveTimeout: 30_000,
      // The engine times the first token and the gaps between chunks itself.
      headersTimeout: 0,
      bodyTimeout: 0,
    });
  }

  #headers(json: boolean): Record<string, string> {
    return {
      accept: json ? "application/json" : "text/event-stream",
      ...(json ? {} : { "content-type": "application/json" }),
      ...(this.#apiKey !== undefined && this.#apiKey !== "" ? { authorization: `Bearer ${this.#apiKey}` } : {}),
    };
  }

  /**
   * POSTs a generation body (JSON text, written when the request was prepared) to `url` (a chat
   * completion's `/chat/completions`, a text completion's `/completions` or `/infill`), and gives
   * the answer's body as the pieces arrive, with no stream in between: undici's own callbacks feed
   * them (see `StreamedAnswer`). Throws `UpstreamConnectionError` when the network or the member
   * gave no answer, `UpstreamRequestError` when the request could not be sent for a reason of ours.
   */
  streamGeneration(url: string, body: string, signal: AbortSignal): Promise<UpstreamStream> {
    let target = this.#targets.get(url);
    if (target === undefined) {
      const parsed = new URL(url);
      target = { origin: parsed.origin, path: `${parsed.pathname}${parsed.search}` };
      if (this.#targets.size >= 64) this.#targets.clear();
      this.#targets.set(url, target);
    }
    this.#streamHeaders ??= this.#headers(false);
    const answer = new StreamedAnswer(signal);
    try {
      this.#agent.dispatch({ origin: target.origin, path: target.path, method: "POST", headers: this.#streamHeaders, body }, answer);
    } catch (error) {
      answer.onResponseError(undefined, error as Error);
    }
    return answer.response;
  }

  /** Chat completion URLs by member base URL, and URLs split for `dispatch`: the same few, every request. */
  readonly #targets = new Map<string, { origin: string; path: string }>();
  #streamHeaders: Record<string, string> | undefined;

  /**
   * POSTs an embeddings body (JSON text) to `{baseUrl}/embeddings`; the answer is JSON. Throws as
   * `streamGeneration` does.
   */
  async postEmbeddings(baseUrl: string, body: string, signal: AbortSignal): Promise<UpstreamResponse> {
    return this.#send(`${baseUrl.replace(/\/+$/, "")}/embeddings`, { method: "POST", headers: { ...this.#headers(true), "content-type": "application/json" }, body }, signal, true);
  }

  /** GETs (or POSTs `body` to) a JSON endpoint for probes; undefined on any failure or non-2xx answer. */
  async getJson(url: string, signal: AbortSignal, body?: unknown): Promise<unknown> {
    try {
      const init = body === undefined ? { method: "GET" as const, headers: this.#headers(true) } : { method: "POST" as const, headers: { ...this.#headers(true), "content-type": "application/json" }, body: JSON.stringify(body) };
      const response = await this.#send(url, init, signal);
      if (response.status < 200 || response.status >= 300) {
        await response.body.dump({ limit: 64 * 1024 }).catch(() => {});
        return undefined;
      }
      return JSON.parse(await response.body.text()) as unknown;
    } catch {
      return undefined;
    }
  }

  async #send(url: string, init: { method: "GET" | "POST"; headers: Record<string, string>; body?: string }, signal: AbortSignal, ownFailures = false): Promise<UpstreamResponse> {
    try {
      const response = await request(url, { ...init, dispatcher: this.#agent, signal });
      return { status: response.statusCode, headers: response.headers, body: response.body };
    } catch (error) {
      if (ownFailures && !signal.aborted && !isNetworkFailure(error)) throw new UpstreamRequestError("the request could not be sent", error);
      throw describeConnectionFailure(signal.aborted ? Object.assign(new Error("aborted"), { name: "AbortError" }) : error);
    }
  }

  /** Closes every connection (running requests are destroyed). */
  async close(): Promise<void> {
    await this.#agent.destroy().catch(() => {});
  }
}
