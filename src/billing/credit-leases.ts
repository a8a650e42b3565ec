/**
 * Credit leases: metering at gateway speed.
 *
 * A key that sends few requests reserves each request's worst case with a hold of its own, written
 * before it generates; the hold is settled at the request's usage record in the next group
 * commit, off the request path (`finishOwn`; before answering only when the usage cost more than
 * the hold reserved). Until then the hold keeps the whole reservation: the books never show
 * credit the settlement will take.
 *
 * A busy key (at least `hotRequestsPerSecond` in the last second) is served from a lease: one hold
 * sized to about `leaseSeconds` of the key's recent reservations, taken with the same conditional
 * write as any hold. Requests then reserve and settle against it in memory, with no round trip;
 * their usage records, each naming the lease, are written in group commits every
 * `flushIntervalMs`, off the request path. A lease stops taking requests after `leaseMaxAgeMs`
 * (or when it cannot cover the next one) and closes once its requests are done and written,
 * or after `leaseIdleMs` without requests: it is charged the sum of its records and the rest
 * goes back to the account.
 *
 * A quiet key that comes back (a request within `standingIdleMs` of its last) is given a standing
 * lease, taken in the background after its own hold: the same kind of lease, sized the same way,
 * but kept for `standingIdleMs` without requests and up to `standingMaxAgeMs`, so that a key
 * sending a request every few seconds is served from memory like a busy one instead of waiting
 * for a commit each time (on PostgreSQL a durable commit is a WAL flush: milliseconds). It is
 * taken only for an account whose balance, as the request's standing read it, is at least
 * `standingBalanceFactor` times the lease (and a key whose cap leaves as much), so that credit
 * sitting in a standing lease never refuses the account's requests on other nodes. Its hold lives
 * `standingMaxAgeMs` past the request time-out: a dead node's standing leases are swept then.
 *
 * Why no overspend: a request is admitted only against credit a hold already took off the
 * balance, and the in-memory reservations of a lease never exceed its amount (single-threaded:
 * check and reserve are one synchronous step). A node that dies leaves its leases active; the
 * sweeper charges them what was recorded and returns the rest.
 *
 * No record goes uncharged: a lease's hold is closed (by this node, or by a sweeper that took
 * this node for dead during an outage) in a transaction that locks the hold before it sums the
 * records, and a group commit locks the holds its records name before writing them. A record in
 * flight when its lease closes thus either lands before the sum, or sees the lease closed and
 * charges the account directly, what it adds, as far as the balance covers (logged). Writes are
 * idempotent: a record already written (a commit whose answer was lost) counts as written.
 *
 * Checkpoints: while a request generates, its progress (tokens and their cost so far) is written
 * every `checkpointIntervalMs` or `checkpointTokens` completion tokens, whichever comes first, in
 * the same group commits. After a `kill -9`, the sweeper turns checkpoints into usage records, so
 * a crashed stream is billed for what it had generated up to its last checkpoint, never more.
 *
 * The promise is kept by the client's side, not by timers: a stream asks for a checkpoint once
 * its client has been sent half a checkpoint (`checkpointTokens / 2`) past the last durable one,
 * and output that would take it more than `checkpointTokens` past it waits for the group commit
 * that writes one (`beforeDelivery`). A group commit runs as soon as someone waits for it (one at
 * a time; whoever asks meanwhile joins the next), and every `flushIntervalMs` otherwise. However
 * slow the database or the event loop, a killed node's streams are billed at least what their
 * clients received less `checkpointTokens`. A finished request's record joins the next group
 * commit and its client hears the end at once; but while a commit is late (`late`: in flight past
 * `lateAfterMs`), finished requests wait for their record (`written`) before their end, so a kill
 * loses only the records of requests that ended within a flush interval plus `lateAfterMs`. When the writer falls behind (someone has waited `shedAfterMs` for a commit), `lagMs`
 * says so and new requests are refused (503 `metering_behind`, `metering.ts`) rather than served
 * slower and slower. During a database outage (a commit failed) nothing waits: records and
 * checkpoints stay in memory and are retried, as the README's outage rules say.
 */
import type { Kysely } from "kysely";
import type { Database } from "../store/schema.ts";
import { newId } from "../store/ids.ts";
import { placeHold, settleHold } from "./ledger.ts";
import { closeLease, writeUsageBatch, type CheckpointRow, type LateCharge, type UsageRow } from "./lease-store.ts";
import { InsufficientQuotaError } from "../protocol/errors.ts";
import { MAX_CREDIT } from "../protocol/money-bounds.ts";

export type LeaseSettings = {
  /** How often the group commit runs. */
  flushIntervalMs: number;
  /** A running request's progress is written at least this often… */
  checkpointIntervalMs: number;
  /** …and every this many completion tokens. */
  checkpointTokens: number;
  /** A key with this many requests in the last second is served from leases. */
  hotRequestsPerSecond: number;
  /** A lease covers about this many seconds of the key's recent reservations. */
  leaseSeconds: number;
  /** A lease takes new requests for this long… */
  leaseMaxAgeMs: number;
  /** …and is closed after this long without one. */
  leaseIdleMs: number;
  /** A quiet key's request within this long of its last takes a standing lease, closed after this long without one (0: never). */
  standingIdleMs: number;
  /** A standing lease takes new requests for this long. */
  standingMaxAgeMs: number;
  /** A standing lease is taken only while the account's balance (and the key's cap) is at least this many times its amount. */
  standingBalanceFactor: number;
  /** New requests are refused while someone has waited this long for a group commit (`lagMs`). */
  shedAfterMs: number;
  /** A group commit in flight for longer than this is late (`late`): finished requests then wait for their record. */
  lateAfterMs: number;
};

export const DEFAULT_LEASE_SETTINGS: LeaseSettings = {
  flushIntervalMs: 100,
  checkpointIntervalMs: 1_000,
  checkpointTokens: 64,
  hotRequestsPerSecond: 20,
  leaseSeconds: 2,
  leaseMaxAgeMs: 5_000,
  leaseIdleMs: 500,
  standingIdleMs: 10_000,
  standingMaxAgeMs: 15_000,
  standingBalanceFactor: 20,
  shedAfterMs: 2_000,
  lateAfterMs: 250,
};

export type CreditLeasesOptions = {
  database: Kysely<Database>;
  nodeId: () => string;
  /** How long one request may run: a hold lives this long (a lease, `leaseMaxAgeMs` more). */
  holdTtlMs: number;
  settings?: Partial<LeaseSettings>;
  /** Hears of group commits the database could not take, and of their recovery. */
  onBatch?: (event: BatchEvent) => void;
};

export type BatchEvent =
  | { kind: "deferred"; records: number; checkpoints: number; error: unknown }
  | { kind: "written"; records: number; attempts: number }
  | { kind: "lease-close-failed"; holdId: string; error: unknown }
  /**
   * Records landed against a lease closed already (the sweeper closed it while this node could
   * not reach the database): charged to the account directly, `charged` of what they add, `short`
   * what the balance could not cover (taken off the records, which say what was charged).
   */
  | { kind: "late"; holdId: string; accountId: string; keyId: string | null; records: number; charged: number; short: number };

type Lease = {
  holdId: string;
  accountId: string;
  keyId: string | null;
  amount: number;
  /** Reserved by running requests. */
  reserved: number;
  /** Charged to finished requests (written or waiting to be). */
  charged: number;
  running: number;
  openedAt: number;
  lastActiveAt: number;
  /** Serves many requests (false: one request's own hold, settled with it). */
  shared: boolean;
  /** Takes requests for this long after it opened… */
  maxAgeMs: number;
  /** …and closes after this long without one (a busy key's lease or a quiet key's standing one). */
  idleMs: number;
  /** Takes no new requests; closes once its requests are done. */
  retired: boolean;
};

/** The progress of a running request, as its checkpoint will record it. */
export type Progress = Omit<CheckpointRow, "id" | "hold_id" | "updated_at">;

type Running = {
  lease: Lease;
  progress?: () => Progress | null;
  lastAt: number;
  /** Completion tokens of its last durable checkpoint. */
  lastTokens: number;
  /**
   * A checkpoint of it went to the store: written, or in a commit in flight or failed (which may
   * have gone through unanswered). Set when the commit starts, so that a request finishing while
   * it runs still has its checkpoint deleted; one that never sent any has nothing to delete.
   */
  checkpointed: boolean;
  /** A checkpoint was asked for (`beforeDelivery`): the next group commit writes one whatever the interval. */
  wanted: boolean;
};

/** A quiet request's own hold, to be settled at its record in the next group commit. */
type OwnSettle = { holdId: string; accountId: string; /** What settling gives back to the account: held less charged. */ gives: number };

/** Those waiting for the next group commit to start (and end): true once it is written, false when it failed. */
type Demand = { since: number; promise: Promise<boolean>; resolve: (written: boolean) => void };

export type ReserveInput = {
  accountId: string;
  keyId: string | null;
  amount: number;
  /** Busy (`hot`): served from leases. */
  hot: boolean;
  /** The account's balance as the request's standing read it: a quiet key gets a standing lease only when it is large (unknown: never). */
  balance?: number | null;
  /** What the key's spend cap leaves (null or absent: no cap). */
  capLeft?: number | null;
};

/** A request's reservation, from a lease or a hold of its own. */
export type Ticket = {
  /** The id its usage record (and its checkpoints) will have. */
  readonly usageId: string;
  readonly amount: number;
  readonly holdId: string;
  /** Settled through its own hold (the exact path) rather than a lease. */
  readonly own: boolean;
};

class RateWindow {
  #start = 0;
  #count = 0;
  #credit = 0;
  #previousCount = 0;
  #previousCredit = 0;

  add(now: number, credit: number): void {
    this.#roll(now);
    this.#count++;
    this.#credit += credit;
  }

  /** Requests and credit reserved over about the last second. */
  read(now: number): { requests: number; credit: number } {
    this.#roll(now);
    const weight = Math.max(0, 1 - (now - this.#start) / 1000);
    return { requests: this.#count + this.#previousCount * weight, credit: this.#credit + this.#previousCredit * weight };
  }

  #roll(now: number): void {
    if (now - this.#start < 1000) return;
    const fresh = now - this.#start >= 2000;
    this.#previousCount = fresh ? 0 : this.#count;
    this.#previousCredit = fresh ? 0 : this.#credit;
    this.#count = 0;
    this.#credit = 0;
    this.#start = fresh ? now : this.#start + 1000;
  }
}

export class CreditLeases {
  readonly #options: CreditLeasesOptions;
  readonly #settings: LeaseSettings;
  /** The lease each key draws from now. */
  readonly #open = new Map<string, Lease>();
  /** Every shared lease not yet closed (open or retired). */
  readonly #leases = new Set<Lease>();
  /** Leases being taken, per key: concurrent requests wait for it instead of taking their own. */
  readonly #taking = new Map<string, Promise<Lease | undefined>>();
  readonly #rates = new Map<string, RateWindow>();
  /** When a quiet key last sent a request (within about `standingIdleMs`). */
  readonly #lastSeen = new Map<string, number>();
  /** When a lease was last refused, per key. */
  readonly #refused = new Map<string, number>();
  readonly #running = new Map<string, Running>();
  #records: UsageRow[] = [];
  /**
   * Ids of records among `#records` (or retried from a failed commit) whose request never sent a
   * checkpoint; each leaves once its record is written. A set of ids, not a WeakSet of the rows:
   * V8's weak collections cost a few microseconds a request, in the add and in the collector.
   */
  readonly #uncheckpointed = new Set<string>();
  /** Own holds whose record is among `#records` (or the group commit's in flight, until it lands). */
  #settles: OwnSettle[] = [];
  /** Per account, the own holds waiting to be settled and the credit their settling gives back. */
  readonly #returning = new Map<string, { holds: number; credit: number }>();
  /** The records of the group commit in flight. */
  #writing: readonly UsageRow[] = [];
  #ticking = false;
  #drops: string[] = [];
  #flushing: Promise<void> = Promise.resolve();
  #failedAttempts = 0;
  /** Waiting for the next group commit (it takes them when it starts). */
  #demand: Demand | undefined;
  /** Taken by the group commit in flight. */
  #committing: Demand | undefined;
  /** When the group commit in flight started (`performance.now()`); undefined when none is. */
  #batchStartedAt: number | undefined;
  #closing = false;
  readonly #timer: ReturnType<typeof setInterval>;
  #stopped = false;

  constructor(options: CreditLeasesOptions) {
    this.#options = options;
    this.#settings = { ...DEFAULT_LEASE_SETTINGS, ...options.settings };
    this.#timer = setInterval(() => this.#tick(), this.#settings.flushIntervalMs);
    this.#timer.unref();
  }

  get settings(): LeaseSettings {
    return this.#settings;
  }

  /** Usage records waiting for the database (written in the next group commit, or retried). */
  get pending(): number {
    return this.#records.length;
  }

  /** Usage records the database refused (an outage): written once it is back. */
  get deferred(): number {
    return this.#failedAttempts > 0 ? this.#records.length : 0;
  }

  /** Shared leases not yet closed. */
  get openLeases(): number {
    return this.#leases.size;
  }

  /** Whether the key is busy now (as `hot` last counted it), without counting a request. */
  busy(rateKey: string, now = Date.now()): boolean {
    const window = this.#rates.get(rateKey);
    return window !== undefined && window.read(now).requests >= this.#settings.hotRequestsPerSecond;
  }

  /** Whether the key has a lease open (a busy key's or a quiet key's standing one). */
  leased(keyId: string): boolean {
    return this.#open.has(keyId);
  }

  /** Queues the usage record of a request that reserved nothing (an operator key, a free model) for the next group commit. */
  queue(record: UsageRow): void {
    this.#records.push(record);
  }

  /** Counts a request of the key: whether it is busy enough to be served from leases. */
  hot(rateKey: string, credit: number, now = Date.now()): boolean {
    let window = this.#rates.get(rateKey);
    if (window === undefined) {
      // Forget quiet keys now and then, so that the map stays as small as the set of busy ones.
      if (this.#rates.size >= 10_000) for (const [key, old] of this.#rates) if (old.read(now).requests === 0) this.#rates.delete(key);
      this.#rates.set(rateKey, (window = new RateWindow()));
    }
    window.add(now, credit);
    return window.read(now).requests >= this.#settings.hotRequestsPerSecond;
  }

  /**
   * Reserves `amount` for one request: from the key's lease when the key is busy (taking a new
   * lease when it has none that covers the amount); for a quiet key, from its standing lease when
   * it has one that covers the amount, else from a hold of its own (and a quiet key that came
   * back takes a standing lease in the background). Throws `InsufficientQuotaError` when the
   * account (or the key's cap) cannot cover it.
   */
  async reserve(input: ReserveInput): Promise<Ticket> {
    const usageId = newId("use");
    const leaseKey = input.keyId ?? `account:${input.accountId}`;
    if (!input.hot) {
      const now = Date.now();
      const cameBack = this.#cameBack(leaseKey, now);
      const open = this.#open.get(leaseKey);
      if (open !== undefined) {
        if (this.#serves(open, input.amount, now)) return this.#fromLease(open, input, leaseKey, usageId, now, true);
        if (now - open.openedAt >= open.maxAgeMs) this.#retire(open, leaseKey);
      }
      const ticket = this.#admit(await this.#takeOwn(input), input.amount, usageId);
      if (cameBack && this.#standingAllowed(input, leaseKey)) this.#renew(input, leaseKey, true);
      return ticket;
    }
    // An account (or key cap) that could not cover a lease a moment ago is not asked again for
    // a second: its requests take their own holds meanwhile, one write each instead of two.
    if (this.#refusedLately(leaseKey)) return this.#admit(await this.#takeOwn(input), input.amount, usageId);
    for (let attempt = 0; attempt < 3; attempt++) {
      const now = Date.now();
      const open = this.#open.get(leaseKey);
      if (open !== undefined) {
        if (this.#serves(open, input.amount, now)) return this.#fromLease(open, input, leaseKey, usageId, now, false);
        this.#retire(open, leaseKey);
      }
      const taking = this.#taking.get(leaseKey);
      if (taking !== undefined) {
        await taking.catch(() => undefined);
        continue;
      }
      const take = this.#takeShared(input, leaseKey, false);
      this.#taking.set(leaseKey, take);
      try {
        const lease = await take;
        if (lease !== undefined && lease.amount - lease.reserved - lease.charged >= input.amount) return this.#admit(lease, input.amount, usageId);
      } finally {
        this.#taking.delete(leaseKey);
      }
    }
    // Leases kept missing this request (others took them first, or the balance is low): its own hold.
    return this.#admit(await this.#takeOwn(input), input.amount, usageId);
  }

  /** Whether the open lease still takes requests and has `amount` left. */
  #serves(lease: Lease, amount: number, now: number): boolean {
    return now - lease.openedAt < lease.maxAgeMs && lease.amount - lease.reserved - lease.charged >= amount;
  }

  /**
   * Admits the request to the key's open lease. Half its credit or three quarters of its time
   * gone: the next lease is taken in the background, so that no request waits for a take while
   * the key stays busy (a take contending with other nodes' for the account's row can take tens
   * of milliseconds). A standing lease is renewed only while the account may still have one.
   */
  #fromLease(open: Lease, input: ReserveInput, leaseKey: string, usageId: string, now: number, standing: boolean): Ticket {
    const ticket = this.#admit(open, input.amount, usageId);
    const left = open.amount - open.reserved - open.charged;
    if ((left < open.amount / 2 || now - open.openedAt > (open.maxAgeMs * 3) / 4) && (!standing || this.#standingAllowed(input, leaseKey))) this.#renew(input, leaseKey, standing);
    return ticket;
  }

  /** Takes the key's next lease in the background (none when one is being taken already). */
  #renew(input: ReserveInput, leaseKey: string, standing: boolean): void {
    if (this.#taking.has(leaseKey)) return;
    const renewal = this.#takeShared(input, leaseKey, standing).catch(() => undefined);
    this.#taking.set(leaseKey, renewal);
    void renewal.finally(() => {
      if (this.#taking.get(leaseKey) === renewal) this.#taking.delete(leaseKey);
    });
  }

  /** Notes a quiet key's request: whether its last one was within `standingIdleMs`. */
  #cameBack(leaseKey: string, now: number): boolean {
    const idleMs = this.#settings.standingIdleMs;
    if (idleMs <= 0) return false;
    const last = this.#lastSeen.get(leaseKey);
    if (last === undefined && this.#lastSeen.size >= 10_000) {
      for (const [key, at] of this.#lastSeen) if (now - at >= idleMs) this.#lastSeen.delete(key);
      if (this.#lastSeen.size >= 10_000) this.#lastSeen.clear();
    }
    this.#lastSeen.set(leaseKey, now);
    return last !== undefined && now - last < idleMs;
  }

  /**
   * Whether a standing lease may be taken for the request's key: the request's standing showed a
   * balance (and the key a cap) of at least `standingBalanceFactor` leases, and no lease was
   * refused to the key in the last second.
   */
  #standingAllowed(input: ReserveInput, leaseKey: string): boolean {
    if (this.#settings.standingIdleMs <= 0 || input.balance === undefined || input.balance === null) return false;
    if (this.#refusedLately(leaseKey)) return false;
    const floor = this.#leaseSize(input) * this.#settings.standingBalanceFactor;
    return input.balance >= floor && (input.capLeft === undefined || input.capLeft === null || input.capLeft >= floor);
  }

  /** Whether a lease was refused to the key (its account or cap could not cover it) in the last second. */
  #refusedLately(leaseKey: string): boolean {
    const refusedAt = this.#refused.get(leaseKey);
    return refusedAt !== undefined && Date.now() - refusedAt < 1_000;
  }

  /** A lease's amount: about `leaseSeconds` of the key's recent reservations, at least four of this request's. */
  #leaseSize(input: ReserveInput): number {
    const rate = this.#rates.get(input.keyId ?? `account:${input.accountId}`)?.read(Date.now()).credit ?? 0;
    return Math.min(MAX_CREDIT, Math.max(input.amount * 4, Math.ceil(rate * this.#settings.leaseSeconds)));
  }

  /**
   * A hold of the request's own. Refused while this node still has settlements of the account's
   * own holds to write (`finishOwn`: each still holds its request's whole reservation, of which
   * it gives back what was not charged), it is asked again once they are written: a quiet
   * client's next request is refused only where it would have been had its last one settled
   * before answering. Never waited for during an outage (the refusal stands, as it would have).
   */
  async #takeOwn(input: { accountId: string; keyId: string | null; amount: number }): Promise<Lease> {
    try {
      return await this.#take(input, input.amount, false);
    } catch (error) {
      if (!(error instanceof InsufficientQuotaError) || !this.#returning.has(input.accountId)) throw error;
      if (!(await this.written())) throw error;
      return this.#take(input, input.amount, false);
    }
  }

  /** Credit this node's queued settlements of the account's own holds will give back (`finishOwn`): 0 when none wait. */
  returning(accountId: string): number {
    return this.#returning.get(accountId)?.credit ?? 0;
  }

  /**
   * Takes a lease sized to the key's recent rate (a busy key's, or a quiet key's standing one);
   * undefined when the account cannot cover more than this request (then it gets its own hold).
   */
  async #takeShared(input: ReserveInput, leaseKey: string, standing: boolean): Promise<Lease | undefined> {
    const size = this.#leaseSize(input);
    try {
      const lease = standing
        ? await this.#take(input, size, true, this.#settings.standingMaxAgeMs, this.#settings.standingIdleMs)
        : await this.#take(input, size, true, this.#settings.leaseMaxAgeMs, this.#settings.leaseIdleMs);
      // It replaces the key's lease, which takes no more requests and closes once they are done.
      const previous = this.#open.get(leaseKey);
      if (previous !== undefined) this.#retire(previous, leaseKey);
      this.#open.set(leaseKey, lease);
      this.#leases.add(lease);
      return lease;
    } catch (error) {
      if (!(error instanceof InsufficientQuotaError)) throw error;
      if (this.#refused.size >= 10_000) this.#refused.clear();
      this.#refused.set(leaseKey, Date.now());
      return undefined;
    }
  }

  /** Places the hold: a lease's lives `maxAgeMs` past the request time-out. */
  async #take(input: { accountId: string; keyId: string | null }, amount: number, shared: boolean, maxAgeMs = 0, idleMs = 0): Promise<Lease> {
    const now = Date.now();
    const ttlMs = this.#options.holdTtlMs + (shared ? maxAgeMs : 0);
    const holdId = await placeHold(this.#options.database, { accountId: input.accountId, keyId: input.keyId, amount, nodeId: this.#options.nodeId(), ttlMs, now });
    return { holdId, accountId: input.accountId, keyId: input.keyId, amount, reserved: 0, charged: 0, running: 0, openedAt: now, lastActiveAt: now, shared, maxAgeMs, idleMs, retired: false };
  }

  #admit(lease: Lease, amount: number, usageId: string): Ticket {
    lease.reserved += amount;
    lease.running++;
    lease.lastActiveAt = Date.now();
    this.#running.set(usageId, { lease, lastAt: Date.now(), lastTokens: 0, checkpointed: false, wanted: false });
    return { usageId, amount, holdId: lease.holdId, own: !lease.shared };
  }

  #retire(lease: Lease, leaseKey: string): void {
    lease.retired = true;
    if (this.#open.get(leaseKey) === lease) this.#open.delete(leaseKey);
  }

  /** Reports the request's progress for its checkpoints, while it runs. */
  track(ticket: Ticket, progress: () => Progress | null): void {
    const running = this.#running.get(ticket.usageId);
    if (running !== undefined) running.progress = progress;
  }

  /**
   * Before output that brings the request to `tokens` completion tokens goes to its client:
   * undefined when its last durable checkpoint is within `checkpointTokens` of that (one is asked
   * for from half-way), else the group commit that writes one, to wait for. Nothing waits during
   * a database outage.
   */
  beforeDelivery(ticket: Ticket, tokens: number): Promise<unknown> | undefined {
    const running = this.#running.get(ticket.usageId);
    if (running === undefined || running.progress === undefined) return undefined;
    const ahead = tokens - running.lastTokens;
    if (ahead < this.#settings.checkpointTokens / 2 || this.#failedAttempts > 0) return undefined;
    running.wanted = true;
    const commit = this.#commitSoon();
    return ahead > this.#settings.checkpointTokens ? commit : undefined;
  }

  /**
   * Resolves once what was queued so far (the records of finished requests) is written: true, or
   * false when the database did not take it (an outage: they are retried, nobody waits for that).
   */
  written(): Promise<boolean> {
    if (this.#failedAttempts > 0) return Promise.resolve(false);
    return this.#commitSoon();
  }

  /**
   * How long the oldest wait for a group commit has lasted (0 when nobody waits, and during a
   * database outage, whose rules differ): past `shedAfterMs`, this node cannot record usage as
   * fast as it serves it.
   */
  get lagMs(): number {
    if (this.#failedAttempts > 0) return 0;
    const since = this.#committing?.since ?? this.#demand?.since;
    return since === undefined ? 0 : Math.max(0, Date.now() - since);
  }

  /**
   * Whether the writer is late: a group commit has been in flight for longer than `lateAfterMs`
   * (a stuck or contended database, a saturated event loop). While it is, a finished
   * request waits for its record to be durable before its client hears the end (`written`); while
   * it is not, the record joins the next group commit and the client is answered at once, so a
   * `kill -9` loses at most the records of requests that ended within one flush interval plus
   * `lateAfterMs` of it (about 350 ms by default). Never during a database outage (its rules differ: records wait in memory).
   */
  get late(): boolean {
    if (this.#failedAttempts > 0 || this.#batchStartedAt === undefined) return false;
    return performance.now() - this.#batchStartedAt > this.#settings.lateAfterMs;
  }

  /** Whether new requests should be refused: the writer has kept someone waiting past `shedAfterMs`. */
  get behind(): boolean {
    return this.lagMs > this.#settings.shedAfterMs;
  }

  /** The next group commit, started as soon as none is in flight (whoever asks meanwhile joins it). */
  #commitSoon(): Promise<boolean> {
    if (this.#demand !== undefined) return this.#demand.promise;
    let resolve!: (written: boolean) => void;
    const promise = new Promise<boolean>((done) => (resolve = done));
    this.#demand = { since: Date.now(), promise, resolve };
    // Queued behind the commit in flight, if any: it takes every demand made until it starts.
    setImmediate(() => void this.flush().catch(() => undefined));
    return promise;
  }

  /**
   * A request served from a lease finished: its charge is counted in memory and its record joins
   * the next group commit. Returns at once. A charge past what it reserved (usage reported beyond
   * the prompt bound) is recorded whole: the lease then takes no more requests, and closing it
   * charges its records' sum, past its amount as far as the balance covers (`settleHold`).
   * Returns what it counts against the lease now: at most what the request reserved.
   */
  finishShared(ticket: Ticket, record: UsageRow): number {
    const running = this.#running.get(ticket.usageId);
    if (running === undefined) return 0;
    this.#running.delete(ticket.usageId);
    const cost = Math.max(0, record.cost);
    const charge = Math.min(ticket.amount, cost);
    const { lease } = running;
    lease.reserved -= ticket.amount;
    lease.charged += cost;
    lease.running--;
    lease.lastActiveAt = Date.now();
    if (cost > ticket.amount) this.#retire(lease, lease.keyId ?? `account:${lease.accountId}`);
    this.#queueRecord({ ...record, id: ticket.usageId, hold_id: lease.holdId, cost }, running);
    return charge;
  }

  /**
   * A request on a hold of its own finished, its cost within what it reserved: its record joins
   * the next group commit, which settles the hold at it in the same transaction (the charge and
   * the record never apart, as `settleOwn`). Returns at once, with what it charges.
   *
   * Why the group commit and not a settlement of its own after the answer: the group commit is
   * already the place where finished requests' records wait, with everything a deferred write
   * needs, kept as they are for leases: written at most a flush interval later, retried through
   * an outage (records are kept in memory and their writes are idempotent), waited for by
   * clients while the writer is late (`late`), counted in `lagMs` and shed when behind, flushed
   * by `drain`. A `kill -9` before it lands leaves the hold active with the request's last
   * checkpoint, which the sweeper bills (`chargeStaleHolds`), exactly as it does a lease's
   * request that ended in the same moment; a hold with no checkpoint is released uncharged,
   * as such a lease's record is lost. And many quiet keys' settlements share one commit.
   *
   * Why nothing exact is traded: until it lands, the hold keeps the request's whole reservation
   * off the balance and off the key's cap, so a later request can only find less credit than
   * there will be, never credit this settlement is about to take (a cost past the reservation,
   * which would take more, is settled before answering: `settleOwn`). A refusal that only these
   * pending settlements cause is asked again once they are written (`#takeOwn`), and the quota
   * pre-check counts what they give back (`returning`).
   */
  finishOwn(ticket: Ticket, record: UsageRow): number {
    const running = this.#running.get(ticket.usageId);
    if (running === undefined) return 0;
    this.#running.delete(ticket.usageId);
    const cost = Math.max(0, Math.min(ticket.amount, record.cost));
    // Its checkpoint, if it sent one, is replaced by the record (same id) in the same commit.
    this.#queueRecord({ ...record, id: ticket.usageId, hold_id: ticket.holdId, cost }, running);
    const { accountId } = running.lease;
    this.#settles.push({ holdId: ticket.holdId, accountId, gives: ticket.amount - cost });
    const returning = this.#returning.get(accountId) ?? { holds: 0, credit: 0 };
    returning.holds++;
    returning.credit += ticket.amount - cost;
    this.#returning.set(accountId, returning);
    return cost;
  }

  /**
   * Settles a request's own hold with its record, in one transaction, before answering (the
   * path of a cost past its reservation: see `finishOwn`). Safe to call again after a failure
   * (settling is idempotent); its checkpoint, if it wrote one, is dropped in the next group commit.
   */
  async settleOwn(ticket: Ticket, cost: number, record: (charged: number) => Omit<UsageRow, "id" | "hold_id">): Promise<number> {
    const running = this.#running.get(ticket.usageId);
    if (running !== undefined) {
      this.#running.delete(ticket.usageId);
      if (running.checkpointed) this.#drops.push(ticket.usageId);
    }
    return settleHold(this.#options.database, ticket.holdId, cost, Date.now(), (charged) => ({ ...record(charged), id: ticket.usageId, hold_id: ticket.holdId }));
  }

  /** Queues a finished request's record; a request that never sent a checkpoint has none for the commit to delete. */
  #queueRecord(record: UsageRow, running: Running): void {
    this.#records.push(record);
    if (!running.checkpointed) this.#uncheckpointed.add(record.id);
  }

  /** Runs the group commit now (waiting for one in flight first); resolves when it is written. */
  flush(): Promise<void> {
    const run = this.#flushing.then(() => this.#writeBatch());
    this.#flushing = run.catch(() => undefined);
    return run;
  }

  async #writeBatch(): Promise<void> {
    // Everyone who asked until now is answered by this commit; who asks from here on, by the next.
    const demand = this.#demand;
    this.#demand = undefined;
    this.#committing = demand;
    this.#batchStartedAt = performance.now();
    try {
      await this.#writeBatchFor();
      demand?.resolve(true);
    } catch (error) {
      demand?.resolve(false);
      throw error;
    } finally {
      this.#committing = undefined;
      this.#batchStartedAt = undefined;
    }
  }

  async #writeBatchFor(): Promise<void> {
    const now = Date.now();
    const checkpoints: CheckpointRow[] = [];
    const checkpointed: Array<[Running, number]> = [];
    for (const [usageId, running] of this.#running) {
      const progress = running.progress?.();
      if (progress == null || progress.completion_tokens <= running.lastTokens) continue;
      const due = running.wanted || now - running.lastAt >= this.#settings.checkpointIntervalMs || progress.completion_tokens - running.lastTokens >= this.#settings.checkpointTokens;
      if (!due) continue;
      checkpoints.push({ ...progress, id: usageId, hold_id: running.lease.holdId, updated_at: now });
      checkpointed.push([running, progress.completion_tokens]);
      running.checkpointed = true;
      // Asked for again while this commit runs: the next one writes it.
      running.wanted = false;
    }
    const records = this.#records;
    const drops = this.#drops;
    const settles = this.#settles;
    if (records.length === 0 && checkpoints.length === 0 && drops.length === 0) return;
    this.#records = [];
    this.#drops = [];
    this.#settles = [];
    this.#writing = records;
    let late: LateCharge[];
    try {
      late = await writeUsageBatch(this.#options.database, { records, checkpoints, dropCheckpoints: drops, withoutCheckpoint: this.#uncheckpointed, settleHolds: settles.map((settle) => settle.holdId) }, now);
    } catch (error) {
      this.#writing = [];
      // Kept for the next attempt, ahead of what came since (checkpoints are taken afresh).
      this.#records = [...records, ...this.#records];
      this.#drops = [...drops, ...this.#drops];
      this.#settles = [...settles, ...this.#settles];
      if (this.#failedAttempts++ === 0) this.#options.onBatch?.({ kind: "deferred", records: records.length, checkpoints: checkpoints.length, error });
      throw error;
    }
    this.#writing = [];
    if (this.#uncheckpointed.size > 0) for (const record of records) this.#uncheckpointed.delete(record.id);
    for (const settle of settles) {
      const returning = this.#returning.get(settle.accountId);
      if (returning === undefined) continue;
      returning.credit -= settle.gives;
      if (--returning.holds === 0) this.#returning.delete(settle.accountId);
    }
    for (const [running, tokens] of checkpointed) {
      running.lastAt = now;
      running.lastTokens = Math.max(running.lastTokens, tokens);
    }
    if (this.#failedAttempts > 0) this.#options.onBatch?.({ kind: "written", records: records.length, attempts: this.#failedAttempts + 1 });
    this.#failedAttempts = 0;
    for (const charge of late) {
      // Its hold is closed: the lease takes no more requests (those running are charged as they land).
      for (const lease of this.#leases) if (lease.holdId === charge.holdId) this.#retire(lease, lease.keyId ?? `account:${lease.accountId}`);
      this.#options.onBatch?.({ kind: "late", ...charge });
    }
  }

  /**
   * The group commit, and the leases due to close. The two go apart: a slow close (a lease's
   * account row contended by other nodes) never holds back the next commit, nor a commit a close.
   */
  #tick(): void {
    if (this.#stopped) return;
    if (!this.#ticking) {
      this.#ticking = true;
      this.flush()
        .catch(() => undefined) // Retried at the next tick.
        .finally(() => (this.#ticking = false));
    }
    if (!this.#closing) {
      this.#closing = true;
      this.#flushing
        .then(() => this.#closeDue(false))
        .catch(() => undefined)
        .finally(() => (this.#closing = false));
    }
  }

  /** Closes the leases that are done: retired or idle, with no request running. All of them at `drain`. */
  async #closeDue(all: boolean): Promise<number> {
    const now = Date.now();
    let failed = 0;
    for (const lease of [...this.#leases]) {
      if (lease.running > 0) {
        if (now - lease.openedAt >= lease.maxAgeMs) this.#retire(lease, lease.keyId ?? `account:${lease.accountId}`);
        continue;
      }
      const due = all || lease.retired || now - lease.lastActiveAt >= lease.idleMs || now - lease.openedAt >= lease.maxAgeMs;
      // A record that finished after the last group commit waits for the next: a lease is charged
      // the sum of its written records, so it closes only when all of them are written.
      const unwritten = (record: UsageRow) => record.hold_id === lease.holdId;
      if (!due || this.#records.some(unwritten) || this.#writing.some(unwritten)) continue;
      this.#retire(lease, lease.keyId ?? `account:${lease.accountId}`);
      try {
        // Its records were written by the flush before this (a lease with none running has none pending past it).
        await closeLease(this.#options.database, lease.holdId);
        this.#leases.delete(lease);
      } catch (error) {
        failed++;
        this.#options.onBatch?.({ kind: "lease-close-failed", holdId: lease.holdId, error });
      }
    }
    return failed;
  }

  /**
   * At shutdown, once no request runs: writes what is pending and closes every lease. Returns
   * the records and leases the database did not take (their holds are closed by the sweeper of
   * another node, or of this one's next start, for what was written).
   */
  async drain(): Promise<number> {
    this.#stopped = true;
    clearInterval(this.#timer);
    // A lease taken in the background (a renewal that no request waits for) may still be in
    // flight: its hold is placed whether or not anyone waits. Closing only the leases known now
    // would leave that one active, its whole amount off the balance with no record to charge.
    for (let taking = [...this.#taking.values()]; taking.length > 0; taking = [...this.#taking.values()].filter((take) => !taking.includes(take))) {
      await Promise.allSettled(taking);
    }
    try {
      await this.flush();
    } catch {
      return this.#records.length + this.#leases.size;
    }
    return this.#closeDue(true);
  }

  /** Stops without writing anything (a test's stand-in for a killed process). */
  abandon(): void {
    this.#stopped = true;
    clearInterval(this.#timer);
  }
}
