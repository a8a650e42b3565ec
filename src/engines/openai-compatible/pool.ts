/**
 * A pool of upstream servers serving one model: which member takes the next request, how many
 * wait when all are full, and what each member's health is.
 *
 * Routing: the member with the fewest requests in flight among those that can take one (healthy
 * with room, or recovering with no trial running); ties go round-robin. With an `affinity` (a hash
 * of the request's prefix), the member that served it last is preferred while it is not much
 * busier: while its in-flight count exceeds the least busy one's by at most
 * `affinitySlack(max_in_flight)` = max(2, ⌈25% of max_in_flight⌉), its prefix cache saves more than
 * the extra wait costs. What served an affinity is remembered in an LRU map (4096 entries by
 * default). Members in `exclude` (already tried for this request) are taken only when no other
 * member has room. While active probes run, a recovering member is sent no client request as long
 * as a healthy one has room: the probe brings it back.
 *
 * When every serving member is full, requests wait in one bounded queue, served in the fair
 * queue's order (`fair-queue.ts`: bands, then the least served account, then arrival); a released
 * lease goes to the waiter it picks. A full queue: `EngineOverloadedError` (503, retry-after 1),
 * an account with its most waiting: `QueueShareExceededError` (429), both thrown at once by
 * `acquire` (not a rejected promise), so a request is refused before it starts. No member
 * serving (all cooling down): `UpstreamUnavailableError` with retry-after = the shortest cooldown
 * left. A waiter whose signal aborts leaves the queue and gets the signal's reason.
 */
import type { UpstreamEntry, UpstreamKind } from "./config-schema.ts";
import { ShuttingDownError, UpstreamUnavailableError } from "../../protocol/errors.ts";
import type { EngineMember } from "../engine.ts";
import { refusalOf } from "./credentials.ts";
import { detectKind } from "./detect.ts";
import { HealthChecker, probeMember } from "./health.ts";
import { LruMap } from "./lru-map.ts";
import { memberName, memberUrl } from "./upstream-url.ts";
import { PoolMember, type MemberHealthOptions, type MemberStats } from "./member.ts";
import type { AcquireOptions, MemberOutcome, PoolLease, RefusalStatus, UpstreamMember, UpstreamPool } from "./pool-types.ts";
import { FairQueue, NOTHING_SERVED, settledWaiting, UNTICKETED, type Grant, type QueuingOptions, type Waiting } from "../fair-queue.ts";

export type UpstreamPoolOptions = {
  /** One base URL per member (`/v1` is added when missing). */
  urls: readonly string[];
  /** Each member's name, in the order of `urls` (metrics and logs; default: its URL without credentials). */
  names?: readonly string[];
  /** The kind the members speak; detected by `open` when absent. */
  kind?: UpstreamKind;
  /** Requests one member runs at once (`max_in_flight`). */
  maxInFlight: number;
  /** Requests that may wait when every serving member is full (default 256). */
  queueSize?: number;
  /** The queue's per-account cap and wait reports. */
  queuing?: QueuingOptions;
  /** Sent as a bearer token to probes (and detection); never logged. */
  apiKey?: string;
  /** Milliseconds between active health probes (`health_interval` × 1000); 0 or absent: none. */
  healthIntervalMs?: number;
  /** Milliseconds one probe may take (default: 5 s, SGLang 25 s). */
  probeTimeoutMs?: number;
  /** Affinity hashes remembered (default 4096). */
  affinityEntries?: number;
  /** Passive health: threshold, cooldowns, clock. */
  health?: MemberHealthOptions;
  /** Each released lease's outcome (for metrics). */
  onOutcome?: (member: UpstreamMember, outcome: MemberOutcome) => void;
  /**
   * A member went out (`healthy` false) or came back, by requests or by probes, or began or
   * stopped refusing our credentials (`refusal`: 401/403 while it refuses them), for logs: once per change.
   */
  onHealthChange?: (member: UpstreamMember, healthy: boolean, refusal?: RefusalStatus) => void;
};

/** What `createUpstreamPool` returns: the seam's pool, plus opening and per-member stats. */
export type UpstreamPoolHandle = UpstreamPool & {
  /**
   * Detects the kind when not given (asking the first 8 members, 4 at a time, until one answers;
   * unknown, probes use `/v1/models`), asks each member once whether it accepts the key, probes every
   * member once and starts the periodic probes. Never throws: an unreachable pool stays as it is
   * (its requests fail and trip the members).
   */
  open(): Promise<void>;
  /** Each member's counters, for metrics. */
  stats(): Array<MemberStats & { id: string }>;
};

/** How many more requests in flight the member that served an affinity may have than the least busy one and still be preferred. */
export function affinitySlack(maxInFlight: number): number {
  return Math.max(2, Math.ceil(maxInFlight * 0.25));
}

/**
 * The pool options an upstream model entry gives (probes every `health_interval` seconds); with
 * the model's id, its members are named (see `memberName`).
 */
export function poolOptionsFromEntry(entry: UpstreamEntry, apiKey?: string, modelId?: string): UpstreamPoolOptions {
  return {
    urls: entry.urls.map(memberUrl),
    ...(modelId !== undefined ? { names: entry.urls.map((member, index) => memberName(modelId, member, index)) } : {}),
    kind: entry.kind,
    maxInFlight: entry.max_in_flight,
    apiKey,
    healthIntervalMs: entry.health_interval * 1000,
  };
}

/** A pool over `options.urls`; call `open` to detect its kind and start the health probes. */
export function createUpstreamPool(options: UpstreamPoolOptions): UpstreamPoolHandle {
  return new Pool(options);
}

/** Members asked at once when detecting the pool's kind, and at most in all. */
const DETECT_AT_ONCE = 4;
const DETECT_AT_MOST = 8;

class Pool implements UpstreamPoolHandle {
  readonly #options: UpstreamPoolOptions;
  readonly #members: PoolMember[];
  readonly #queue: FairQueue<AcquireOptions>;
  readonly #affinity: LruMap<string, PoolMember>;
  /** What each member was when last reported: `healthy`, `down`, or the status it refused our credentials with. */
  readonly #wasHealthy = new Map<PoolMember, "healthy" | "down" | RefusalStatus>();
  #kind: UpstreamKind | undefined;
  #health: HealthChecker | undefined;
  #rotation = 0;
  #closed = false;
  #opening: Promise<void> | undefined;

  constructor(options: UpstreamPoolOptions) {
    if (options.urls.length === 0) throw new TypeError("An upstream pool needs at least one URL.");
    this.#options = options;
    this.#kind = options.kind;
    this.#members = options.urls.map((url, index) => new PoolMember(url, options.maxInFlight, options.health, options.names?.[index]));
    for (const member of this.#members) this.#wasHealthy.set(member, "healthy");
    this.#affinity = new LruMap(options.affinityEntries ?? 4096);
    this.#queue = new FairQueue({
      maxWaiting: options.queueSize ?? 256,
      ...options.queuing,
      describeRunning: () => `${this.#members.reduce((sum, candidate) => sum + candidate.inFlight, 0)} requests are running upstream`,
    });
  }

  get kind(): UpstreamKind | undefined {
    return this.#kind;
  }

  open(): Promise<void> {
    this.#opening ??= this.#open();
    return this.#opening;
  }

  async #open(): Promise<void> {
    await this.#detect();
    if (this.#closed) return;
    await this.#checkCredentials();
    if (this.#closed) return;
    this.#startProbes();
    await this.#health?.probeAll();
    if (!this.#closed) this.#health?.start();
  }

  /** Asks members what they are until one says (a few at a time, the first DETECT_AT_MOST only). */
  async #detect(): Promise<void> {
    // Members are asked a few at a time, in order, until one says what it is; a pool of 256 dead
    // members is not asked for minutes: past the first DETECT_AT_MOST, the kind stays unknown.
    const asked = Math.min(this.#members.length, DETECT_AT_MOST);
    for (let start = 0; this.#kind === undefined && start < asked && !this.#closed; start += DETECT_AT_ONCE) {
      const batch = this.#members.slice(start, Math.min(asked, start + DETECT_AT_ONCE));
      const detected = await Promise.all(
        batch.map((member) =>
          detectKind(member.baseUrl, this.#options.apiKey, {
            onRefused: (status) => this.#refused(member, status),
          }).catch(() => undefined),
        ),
      );
      this.#kind = detected.find((kind) => kind !== undefined);
    }
  }

  /**
   * Asks each member once, where the key is needed (`credentialsUrl`), whether it accepts it: a
   * configured kind skips detection, and vLLM's and llama-server's `/health` answer anyone, so
   * the probes alone would miss a refused key. A 401/403 marks the member as refusing.
   */
  async #checkCredentials(): Promise<void> {
    const kind = this.#kind;
    if (kind === undefined || kind === "ollama") return;
    await Promise.all(
      this.#members.map(async (member) => {
        if (member.refusal !== undefined) return;
        const answer = await probeMember(kind, member.baseUrl, { apiKey: this.#options.apiKey, timeoutMs: this.#options.probeTimeoutMs, credentials: true }).catch(() => undefined);
        const refusal = answer === undefined ? undefined : refusalOf(answer);
        if (refusal !== undefined && !this.#closed) this.#refused(member, refusal);
      }),
    );
  }

  /** `member` refused our credentials: out, and said so (once). */
  #refused(member: PoolMember, status: RefusalStatus): void {
    member.probed(false, status);
    this.#changed(member);
  }

  /** (Re)starts the periodic probes for the kind known now (not started: none configured). */
  #startProbes(): void {
    const intervalMs = this.#options.healthIntervalMs ?? 0;
    if (this.#closed || intervalMs <= 0) return;
    this.#health?.stop();
    this.#health = new HealthChecker({
      kind: this.#kind,
      members: this.#members,
      intervalMs,
      apiKey: this.#options.apiKey,
      timeoutMs: this.#options.probeTimeoutMs,
      onProbe: (member) => this.#changed(member),
    });
  }

  /**
   * Asks the members what they are again while the kind is unknown (every member was down when
   * the pool opened); once one says, probes switch to that kind's health check. True when known.
   */
  async redetect(): Promise<boolean> {
    await this.open();
    if (this.#kind !== undefined || this.#closed) return this.#kind !== undefined;
    await this.#detect();
    if (this.#kind === undefined || this.#closed) return false;
    const running = this.#health !== undefined;
    this.#startProbes();
    if (running) this.#health?.start();
    return true;
  }

  acquire(options: AcquireOptions): Waiting<PoolLease> {
    if (this.#closed) return settledWaiting(Promise.reject(new ShuttingDownError()));
    if (options.signal.aborted) return settledWaiting(Promise.reject(options.signal.reason));
    const ticket = options.ticket ?? UNTICKETED;
    const served = options.served ?? NOTHING_SERVED;
    const member = this.#pick(options);
    if (member !== undefined) return settledWaiting(Promise.resolve(this.#lease(member, this.#queue.begin(ticket, served))));
    if (!this.#members.some((candidate) => candidate.serves())) return settledWaiting(Promise.reject(this.#unavailable()));
    // Throws, not a rejected promise, when the queue refuses: the engine's `start` must refuse at
    // once, before the caller answers 200 and opens a stream (as the embedded engine's slot queue does).
    return this.#queue.join<PoolLease>(ticket, options.signal, options, served);
  }

  members(): EngineMember[] {
    // The queue is the pool's: counted once (on the first member), so sums over members stay true.
    return this.#members.map((member, index) => ({
      id: member.id,
      busy: member.inFlight,
      capacity: member.capacity,
      waiting: index === 0 ? this.#queue.waiting : 0,
      ...(index === 0 ? { queue: () => this.#queue.snapshot() } : {}),
      healthy: member.health === "healthy",
    }));
  }

  state(): "ready" | "degraded" | "unavailable" {
    const healthy = this.#members.filter((member) => member.health === "healthy").length;
    if (healthy === this.#members.length) return "ready";
    return healthy === 0 ? "unavailable" : "degraded";
  }

  refusals(): Array<{ member: UpstreamMember; status: RefusalStatus }> {
    return this.#members.flatMap((member) => (member.refusal === undefined ? [] : [{ member, status: member.refusal }]));
  }

  stats(): Array<MemberStats & { id: string }> {
    return this.#members.map((member) => ({ id: member.id, ...member.stats() }));
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#health?.stop();
    this.#queue.rejectAll(new ShuttingDownError());
  }

  /** The member for this request now, or none (all full, or none serving). */
  #pick(options: AcquireOptions): PoolMember | undefined {
    const open = this.#members.filter((member) => member.canTake());
    if (open.length === 0) return undefined;
    const untried = options.exclude === undefined ? open : open.filter((member) => !options.exclude!.has(member.id));
    let candidates = untried.length > 0 ? untried : open;
    if (this.#health !== undefined) {
      const healthy = candidates.filter((member) => member.health === "healthy");
      if (healthy.length > 0) candidates = healthy;
    }
    const least = Math.min(...candidates.map((member) => member.inFlight));
    let chosen: PoolMember | undefined;
    if (options.affinity !== undefined) {
      const previous = this.#affinity.get(options.affinity);
      if (previous !== undefined && candidates.includes(previous) && previous.inFlight - least <= affinitySlack(previous.capacity)) chosen = previous;
    }
    if (chosen === undefined) {
      const tied = candidates.filter((member) => member.inFlight === least);
      chosen = tied[this.#rotation++ % tied.length]!;
    }
    if (options.affinity !== undefined) this.#affinity.set(options.affinity, chosen);
    return chosen;
  }

  #lease(member: PoolMember, grant: Grant): PoolLease {
    const trial = member.begin();
    let released = false;
    return {
      member,
      release: (outcome: MemberOutcome) => {
        if (released) return;
        released = true;
        grant.end();
        member.finish(outcome, trial);
        this.#options.onOutcome?.(member, outcome);
        this.#changed(member);
      },
    };
  }

  /** A member's load or health changed: tell whoever listens, and serve the waiters that now can be. */
  #changed(member: PoolMember): void {
    const healthy = member.health === "healthy";
    const now = member.refusal ?? (healthy ? "healthy" : "down");
    if (this.#wasHealthy.get(member) !== now) {
      this.#wasHealthy.set(member, now);
      this.#options.onHealthChange?.(member, healthy, member.refusal);
    }
    this.#queue.serve(
      (options) => this.#pick(options),
      (chosen, grant) => this.#lease(chosen, grant),
    );
    if (this.#queue.waiting > 0 && !this.#members.some((candidate) => candidate.serves())) this.#queue.rejectAll(this.#unavailable());
  }

  #unavailable(): UpstreamUnavailableError {
    const soonestMs = Math.min(...this.#members.map((member) => member.cooldownLeftMs));
    return new UpstreamUnavailableError(undefined, Math.max(1, Math.ceil(soonestMs / 1000)));
  }
}
