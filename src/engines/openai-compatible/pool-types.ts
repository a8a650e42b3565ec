/**
 * The seam between the upstream engine (which speaks to one member at a time: body, stream,
 * retries) and its pool (which picks members, counts what runs on each, and watches their health).
 */
import type { UpstreamKind } from "./config-schema.ts";
import type { EngineMember } from "../engine.ts";
import type { QueueTicket, Served } from "../fair-queue.ts";

/** The statuses that mean "your credentials are refused". */
export type RefusalStatus = 401 | 403;

/** One upstream server of a pool. */
export type UpstreamMember = {
  /** Its name (`<model>#<index>` or the entry's): what `/metrics` and the logs call it. */
  readonly id: string;
  /** The base URL without credentials (`http://10.0.0.5:8000/v1`): for the log only, never `/metrics` or a client. */
  readonly url: string;
  /** The base URL, ending in `/v1`. */
  readonly baseUrl: string;
};

/**
 * How a request to a member ended, for the pool's health accounting: `ok`; a failure that is the
 * member's (`connect`: refused, reset, or no connection in time; `timeout`: no first token or a
 * stalled stream; `status`: 429/5xx; `protocol`: garbage); or `neutral` (the client left, or the
 * upstream refused the request itself with a 4xx: nothing wrong with the member).
 */
export type MemberOutcome =
  | { kind: "ok"; timeToFirstTokenMs?: number }
  | { kind: "connect" | "timeout" | "status" | "protocol"; status?: number; retryAfterMs?: number }
  | { kind: "neutral" };

/** A member lent to one request: release it exactly once, saying how it went. */
export type PoolLease = {
  readonly member: UpstreamMember;
  release(outcome: MemberOutcome): void;
};

export type AcquireOptions = {
  /**
   * A hash of the request's prefix (system prompt, tools, first messages): the pool prefers the
   * member that last served it (its prefix cache holds it), unless that one is much busier.
   */
  affinity?: string;
  /** Members already tried for this request (not picked again while another can be). */
  exclude?: ReadonlySet<string>;
  signal: AbortSignal;
  /** Whose share the request draws on and its band (none: the default band of one shared account). */
  ticket?: QueueTicket;
  /** Tokens it has been served so far (the fair queue charges its account as they come). */
  served?: Served;
};

export interface UpstreamPool {
  /**
   * Detects the kind when not given, probes every member once and starts the periodic probes.
   * Never throws. Optional: a pool made for a test may have nothing to open.
   */
  open?(): Promise<void>;
  /** Detects the kind again while it is unknown (every member was down at start); true once known. Optional, as `open`. */
  redetect?(): Promise<boolean>;
  /**
   * A member with room for one more request: the least busy healthy one (affinity aside).
   * Waits in the model's queue while every healthy member is full; throws `EngineOverloadedError`
   * (503 with retry-after) synchronously when the queue is full too (so the engine's `start`
   * refuses before anything is sent); rejects with `UpstreamUnavailableError` when no member is
   * healthy, and with the signal's reason when aborted while waiting.
   */
  acquire(options: AcquireOptions): Promise<PoolLease> & { position?(): number };
  /** Each member's load and health (for `/v1/models`, metrics). */
  members(): EngineMember[];
  /** The members refusing our credentials now (401/403), with the status. Optional, as `open`. */
  refusals?(): Array<{ member: UpstreamMember; status: RefusalStatus }>;
  /** `ready`: every member healthy; `degraded`: some; `unavailable`: none. */
  state(): "ready" | "degraded" | "unavailable";
  /** The kind the members speak (given, or detected by `open`). */
  readonly kind: UpstreamKind | undefined;
  close(): void;
}
