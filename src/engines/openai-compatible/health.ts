/**
 * Active health probes of a pool's members, one round every `health_interval`, each member at the
 * endpoint its kind offers:
 *
 * - vLLM: `GET /health` at the server's root: 200 once the engine is up (an empty body).
 * - SGLang: `GET /health` at the root: 503 while starting; 200 once a one-token generation went
 *   through (it waits up to `SGLANG_HEALTH_CHECK_TIMEOUT`, 20 s by default, so probes wait longer).
 * - llama-server: `GET /health` at the root: 503 `Loading model` while loading, 200 `{"status":"ok"}`.
 * - Ollama: `GET /api/version` at the root (not under `/v1`): any 200 means the server answers.
 * - OpenAI and unknown kinds: `GET /v1/models` with the API key (a 401 there means our key is refused).
 *
 * A member that refused our credentials (401/403, see `credentials.ts`) is probed where the key
 * is needed instead (`credentialsUrl`: vLLM's and llama-server's `/health` answer anyone), so
 * only an accepted key brings it back.
 *
 * Every probe carries the bearer key when one is configured; nothing here logs, and no error
 * holds the key. A failed probe takes the member out at once; a success after the cooldown brings
 * it back (see `PoolMember.probed`). The timer is `unref`ed: probes never keep the process alive.
 */
import type { UpstreamKind } from "./config-schema.ts";
import { refusalOf } from "./credentials.ts";
import type { PoolMember } from "./member.ts";
import { callJson, type JsonAnswer } from "./upstream-json.ts";
import { normalizeBaseUrl, serverRoot } from "./upstream-url.ts";

/** The URL a member of this kind is probed at. */
export function healthUrl(kind: UpstreamKind | undefined, baseUrl: string): string {
  switch (kind) {
    case "vllm":
    case "sglang":
    case "llama-server":
      return `${serverRoot(baseUrl)}/health`;
    case "ollama":
      return `${serverRoot(baseUrl)}/api/version`;
    default:
      return `${baseUrl.replace(/\/+$/, "")}/models`;
  }
}

/**
 * A URL of a member of this kind that answers only with accepted credentials: llama-server's
 * `/props` (its `/health` and `/v1/models` are public), `/v1/models` for the others (vLLM's and
 * SGLang's keys guard `/v1`). Ollama has no credentials of its own: its health URL.
 */
export function credentialsUrl(kind: UpstreamKind | undefined, baseUrl: string): string {
  if (kind === "llama-server") return `${serverRoot(baseUrl)}/props`;
  if (kind === "ollama") return healthUrl(kind, baseUrl);
  return `${normalizeBaseUrl(baseUrl)}/models`;
}

/** How long one probe may take by default, in milliseconds (SGLang's `/health` generates a token). */
export function defaultProbeTimeoutMs(kind: UpstreamKind | undefined): number {
  return kind === "sglang" ? 25_000 : 5_000;
}

export type ProbeOptions = {
  apiKey?: string;
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Probe where the credentials are needed (`credentialsUrl`), not the health endpoint. */
  credentials?: boolean;
};

/** Probes one member once: `ok` when it answered 2xx at its health endpoint (or its credentials URL). */
export async function probeMember(kind: UpstreamKind | undefined, baseUrl: string, options: ProbeOptions = {}): Promise<JsonAnswer> {
  return callJson(options.credentials === true ? credentialsUrl(kind, baseUrl) : healthUrl(kind, baseUrl), {
    apiKey: options.apiKey,
    timeoutMs: options.timeoutMs ?? defaultProbeTimeoutMs(kind),
    signal: options.signal,
    // A health body may be empty or plain text: the status says it all.
    json: false,
    maxBytes: 1024 * 1024,
  });
}

export type HealthCheckOptions = {
  kind: UpstreamKind | undefined;
  members: readonly PoolMember[];
  /** Milliseconds between rounds (`health_interval` × 1000). */
  intervalMs: number;
  apiKey?: string;
  /** Milliseconds one probe may take (default: `defaultProbeTimeoutMs(kind)`). */
  timeoutMs?: number;
  /** After each probe's verdict has been given to its member. */
  onProbe?: (member: PoolMember, answer: JsonAnswer) => void;
};

/** Probes every member on an interval; a member whose last probe still runs is skipped that round. */
export class HealthChecker {
  readonly #options: HealthCheckOptions;
  readonly #running = new Set<PoolMember>();
  readonly #stop = new AbortController();
  #timer: NodeJS.Timeout | undefined;

  constructor(options: HealthCheckOptions) {
    this.#options = options;
  }

  /** Starts the rounds (the first one after `intervalMs`; call `probeAll` for one now). */
  start(): void {
    if (this.#timer !== undefined || this.#stop.signal.aborted) return;
    this.#timer = setInterval(() => void this.probeAll(), this.#options.intervalMs);
    this.#timer.unref();
  }

  /** One round now; resolves when its probes have answered. */
  async probeAll(): Promise<void> {
    await Promise.all(this.#options.members.map((member) => this.#probe(member)));
  }

  /** Stops the rounds and abandons the probes in flight. */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#stop.abort();
  }

  async #probe(member: PoolMember): Promise<void> {
    if (this.#running.has(member) || this.#stop.signal.aborted) return;
    this.#running.add(member);
    try {
      const answer = await probeMember(this.#options.kind, member.baseUrl, {
        apiKey: this.#options.apiKey,
        timeoutMs: this.#options.timeoutMs,
        signal: this.#stop.signal,
        credentials: member.refusal !== undefined,
      });
      if (this.#stop.signal.aborted) return;
      member.probed(answer.ok, refusalOf(answer));
      this.#options.onProbe?.(member, answer);
    } catch {
      // Only the stop aborts a probe: nothing to record.
    } finally {
      this.#running.delete(member);
    }
  }
}
