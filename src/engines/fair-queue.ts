/**
 * Who gets the next free slot when the engines are saturated: the one queue policy of the
 * embedded engine's slots, its embedding lanes and every upstream pool.
 *
 * - **Bands first.** A waiting `priority` request goes before any `default` one, and a `default`
 *   one before any `flex` one. `flex` so runs only in capacity nobody else wants; one that cannot
 *   start within its wait limit (`maxWaitMs`) is refused with 429 `resource_unavailable`.
 * - **Fair share within a band** by a virtual token counter per account (Sheng et al., "Fairness
 *   in Serving Large Language Models", OSDI 2024): every token an account is served (its prompt
 *   when it starts, each generated token as it comes) adds `1 / weight` to its counter, and the
 *   waiting request of the account with the lowest counter goes next (its oldest one; on equal
 *   counters, the account with fewer requests waiting and running, then the one served less lately,
 *   then the older request). An account that was idle (nothing waiting or running here) is set to
 *   the lowest counter of the active ones when it comes back (the current minimum): it is neither
 *   starved for what it was served before, nor does it bank credit while away.
 * - **Work-conserving.** The queue orders waiters only: a free slot is taken at once by whoever
 *   asks, whatever the band, so one account alone, or spare capacity, waits for nothing.
 * - **Bounded.** `maxWaiting` requests in all (one more: 503 `engine_overloaded`) and
 *   `maxWaitingPerAccount` of one account (one more: 429 `queue_share_exceeded`), so one account
 *   cannot fill the queue. A waiter whose signal aborts leaves at once.
 *
 * The running requests' counters are brought up to date (their `served()` read) whenever the next
 * waiter is picked, so a long generation weighs on its account while it runs, not only when it ends.
 */
import { EngineOverloadedError, QueueShareExceededError, ResourceUnavailableError } from "../protocol/errors.ts";
import type { ServiceTier } from "../protocol/service-tiers.ts";

/** Whose share a request draws on, and in which band it waits: set by admission from the key's account and plan. */
export type QueueTicket = {
  /** The account (an operator key: `key:<id>`); requests of one account share one counter. */
  account: string;
  /** The account's plan weight (> 0): weight 2 is served twice the tokens of weight 1 under contention. */
  weight: number;
  tier: ServiceTier;
  /** How long the request may wait for capacity before it is refused (429); `flex` requests only. */
  maxWaitMs?: number;
};

/** The ticket of a request nobody tagged (tests, internal work): one shared account, the default band. */
export const UNTICKETED: QueueTicket = { account: "", weight: 1, tier: "default" };

/** Tokens a running request has been served so far (its prompt and what it generated). */
export type Served = () => number;

/** What a queue shows: waiting per band, the oldest wait per band, and the accounts that got the most lately. */
export type QueueSnapshot = {
  waiting: Record<ServiceTier, number>;
  /** Milliseconds the oldest waiter of each band has waited; null when none waits. */
  oldestWaitMs: Record<ServiceTier, number | null>;
  running: number;
  /** The accounts served the most tokens lately (an exponentially decayed sum, half-life one minute): at most five, the largest first. */
  topShares: Array<{ account: string; share: number }>;
};

/** What a model's queues share: the per-account cap, and where waits are reported. */
export type QueuingOptions = {
  /** `fair` (bands, then the least served account: this file) or `fifo` (bands, then arrival: what every queue did before). */
  policy?: "fair" | "fifo";
  /** Requests one account may have waiting (default: the whole queue). */
  maxWaitingPerAccount?: number;
  /** Told how long each request waited, in which band, and how the wait ended (metrics). */
  onWaited?: (tier: ServiceTier, waitedMs: number, outcome: "served" | "left" | "refused") => void;
};

export type FairQueueOptions = QueuingOptions & {
  /** Requests that may wait in all; one more is refused with 503. */
  maxWaiting: number;
  /** What the overload message says is running (e.g. "2 requests are running"). */
  describeRunning: () => string;
  now?: () => number;
};

const BAND_RANK: Record<ServiceTier, number> = { priority: 0, default: 1, flex: 2 };
const SHARE_HALF_LIFE_MS = 60_000;
const TOP_SHARES = 5;
/** Idle accounts kept (their counters matter only when they come back above the active minimum). */
const IDLE_ACCOUNTS_KEPT = 4_096;

type Account = {
  /** Virtual tokens served: tokens ÷ weight, summed. */
  counter: number;
  waiting: number;
  running: number;
  /** Tokens served lately, decayed (for the shares). */
  recent: number;
  recentAt: number;
};

type Run = { account: Account; ticket: QueueTicket; served: Served; charged: number };

type Entry<Meta, Grant> = {
  seq: number;
  ticket: QueueTicket;
  account: Account;
  meta: Meta;
  served: Served;
  joinedAt: number;
  resolve: (grant: Grant) => void;
  reject: (error: unknown) => void;
  signal: AbortSignal;
  onAbort: () => void;
  timer: ReturnType<typeof setTimeout> | undefined;
};

/** A place in the queue: a promise of the grant, and where it stands meanwhile. */
export type Waiting<Grant> = Promise<Grant> & {
  /** 1 for the next to be served; 0 once granted or gone. */
  position(): number;
};

/** What a request given capacity without a `served` of its own is charged: nothing (its first lease's counts). */
export const NOTHING_SERVED: Served = () => 0;

/** A promise already settled (capacity free at once, or a refusal): nowhere in the queue. */
export function settledWaiting<T>(promise: Promise<T>): Waiting<T> {
  return Object.assign(promise, { position: () => 0 });
}

/** A granted request's account bookkeeping: `end` once its slot is given back (safe to call twice). */
export type Grant = { end(): void };

export class FairQueue<Meta> {
  readonly #options: FairQueueOptions;
  readonly #entries: Entry<Meta, unknown>[] = [];
  readonly #accounts = new Map<string, Account>();
  readonly #runs = new Set<Run>();
  /** Accounts with requests waiting or running here: the ones a newcomer is set level with. */
  readonly #active = new Set<Account>();
  readonly #now: () => number;
  #seq = 0;
  /** Where an account arriving while nobody is active starts (see `#lift`). */
  #floor = 0;

  constructor(options: FairQueueOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
  }

  get waiting(): number {
    return this.#entries.length;
  }

  /**
   * A request got capacity without waiting (or was handed it by `serve`): its account counts as
   * active, and is charged what it is served until `end`.
   */
  begin(ticket: QueueTicket, served: Served): Grant {
    const account = this.#account(ticket.account);
    if (account.waiting === 0 && account.running === 0) this.#lift(account);
    account.running++;
    this.#active.add(account);
    const run: Run = { account, ticket, served, charged: 0 };
    this.#runs.add(run);
    this.#charge(run);
    let ended = false;
    return {
      end: () => {
        if (ended) return;
        ended = true;
        this.#charge(run);
        this.#runs.delete(run);
        account.running--;
        this.#idled(account);
        this.#forgetIdle();
      },
    };
  }

  /**
   * Joins the queue. Throws at once (never a rejected promise, so the caller refuses before it
   * answers anything): `EngineOverloadedError` when the queue is full, `QueueShareExceededError`
   * when the account has its most waiting. The promise resolves with what `serve` grants; rejects
   * with the signal's reason when aborted, with `ResourceUnavailableError` when the ticket's wait
   * limit passes, and with `rejectAll`'s error.
   */
  join<Granted>(ticket: QueueTicket, signal: AbortSignal, meta: Meta, served: Served): Waiting<Granted> {
    const perAccount = this.#options.maxWaitingPerAccount ?? this.#options.maxWaiting;
    if ((this.#accounts.get(ticket.account)?.waiting ?? 0) >= perAccount && perAccount < this.#options.maxWaiting) throw new QueueShareExceededError(perAccount);
    if (this.#entries.length >= this.#options.maxWaiting) {
      throw new EngineOverloadedError(`The model is busy: ${this.#options.describeRunning()} and ${this.#entries.length} are waiting. Retry shortly.`);
    }
    const account = this.#account(ticket.account);
    if (account.waiting === 0 && account.running === 0) this.#lift(account);
    let entry!: Entry<Meta, Granted>;
    const promise = new Promise<Granted>((resolve, reject) => {
      entry = {
        seq: this.#seq++,
        ticket,
        account,
        meta,
        served,
        joinedAt: this.#now(),
        resolve,
        reject,
        signal,
        timer: undefined,
        onAbort: () => {
          if (this.#remove(entry as Entry<Meta, unknown>, "left")) reject(signal.reason);
        },
      };
    });
    signal.addEventListener("abort", entry.onAbort, { once: true });
    if (ticket.maxWaitMs !== undefined) {
      entry.timer = setTimeout(() => {
        if (this.#remove(entry as Entry<Meta, unknown>, "refused")) entry.reject(new ResourceUnavailableError(ticket.tier, ticket.maxWaitMs!));
      }, ticket.maxWaitMs);
      entry.timer.unref?.();
    }
    account.waiting++;
    this.#active.add(account);
    this.#entries.push(entry as Entry<Meta, unknown>);
    return Object.assign(promise, { position: () => this.#position(entry as Entry<Meta, unknown>) });
  }

  /**
   * Hands capacity to waiters in the queue's order while `find` finds some for the next one
   * (undefined: none for it now; the queue stops there). `give` makes what the waiter's promise
   * resolves with, from that capacity and the waiter's account bookkeeping (`end` it when the
   * capacity is given back).
   */
  serve<Capacity, Granted>(find: (meta: Meta) => Capacity | undefined, give: (capacity: Capacity, grant: Grant, meta: Meta) => Granted): void {
    for (;;) {
      const next = this.#next();
      if (next === undefined) return;
      const capacity = find(next.meta);
      if (capacity === undefined) return;
      // Running before it stops waiting: its account never looks idle in between (which would lift it).
      const grant = this.begin(next.ticket, next.served);
      this.#remove(next, "served");
      next.resolve(give(capacity, grant, next.meta));
    }
  }

  /** Rejects every waiter (a shutdown, no capacity left at all). */
  rejectAll(error: unknown): void {
    for (const entry of [...this.#entries]) {
      if (this.#remove(entry, "refused")) entry.reject(error);
    }
  }

  snapshot(): QueueSnapshot {
    const now = this.#now();
    const waiting = { priority: 0, default: 0, flex: 0 } as Record<ServiceTier, number>;
    const oldestWaitMs = { priority: null, default: null, flex: null } as Record<ServiceTier, number | null>;
    for (const entry of this.#entries) {
      const tier = entry.ticket.tier;
      waiting[tier]++;
      oldestWaitMs[tier] = Math.max(oldestWaitMs[tier] ?? 0, now - entry.joinedAt);
    }
    this.#syncRunning();
    let total = 0;
    const shares: Array<{ account: string; recent: number }> = [];
    for (const [name, account] of this.#accounts) {
      const recent = this.#decayed(account, now);
      if (recent <= 0) continue;
      total += recent;
      shares.push({ account: name, recent });
    }
    shares.sort((a, b) => b.recent - a.recent);
    return {
      waiting,
      oldestWaitMs,
      running: this.#runs.size,
      topShares: shares.slice(0, TOP_SHARES).map(({ account, recent }) => ({ account, share: total > 0 ? recent / total : 0 })),
    };
  }

  /** An account's virtual counter (tests and benchmarks). */
  counterOf(account: string): number | undefined {
    this.#syncRunning();
    return this.#accounts.get(account)?.counter;
  }

  #account(name: string): Account {
    let account = this.#accounts.get(name);
    if (account === undefined) {
      account = { counter: 0, waiting: 0, running: 0, recent: 0, recentAt: this.#now() };
      this.#accounts.set(name, account);
    }
    return account;
  }

  /**
   * An account that comes back after being idle (or arrives) starts at the current minimum: the
   * least counter of the active accounts, or, with none active, where the last one left off. Not
   * lower, so it banks no credit while away; not higher, so it is not starved for what it was
   * served before it went idle.
   */
  #lift(account: Account): void {
    this.#syncRunning();
    let least = Infinity;
    for (const other of this.#active) if (other !== account) least = Math.min(least, other.counter);
    if (least !== Infinity) this.#floor = least;
    account.counter = this.#floor;
  }

  /** An account went idle: the floor a newcomer starts at when nobody is active is at least where it left off. */
  #idled(account: Account): void {
    if (account.waiting > 0 || account.running > 0) return;
    this.#active.delete(account);
    this.#floor = Math.max(this.#floor, account.counter);
  }

  #syncRunning(): void {
    for (const run of this.#runs) this.#charge(run);
  }

  #charge(run: Run): void {
    const served = run.served();
    const delta = served - run.charged;
    if (!(delta > 0)) return;
    run.charged = served;
    run.account.counter += delta / run.ticket.weight;
    const now = this.#now();
    run.account.recent = this.#decayed(run.account, now) + delta;
    run.account.recentAt = now;
  }

  #decayed(account: Account, now: number): number {
    return account.recent * Math.pow(0.5, Math.max(0, now - account.recentAt) / SHARE_HALF_LIFE_MS);
  }

  /** The waiter to serve next: the highest band, then the account with the lowest counter, then the oldest. */
  #next(): Entry<Meta, unknown> | undefined {
    if (this.#entries.length <= 1) return this.#entries[0];
    this.#syncRunning();
    let best: Entry<Meta, unknown> | undefined;
    for (const entry of this.#entries) if (best === undefined || this.#before(entry, best)) best = entry;
    return best;
  }

  #before(a: Entry<Meta, unknown>, b: Entry<Meta, unknown>): boolean {
    const band = BAND_RANK[a.ticket.tier] - BAND_RANK[b.ticket.tier];
    if (band !== 0) return band < 0;
    if (a.account !== b.account && this.#options.policy !== "fifo") {
      if (a.account.counter !== b.account.counter) return a.account.counter < b.account.counter;
      // Equal counters (an account just set to the current minimum): the one with fewer requests
      // waiting and running first (a newcomer's one request before a backlog), then the one served less lately.
      const outstandingA = a.account.waiting + a.account.running;
      const outstandingB = b.account.waiting + b.account.running;
      if (outstandingA !== outstandingB) return outstandingA < outstandingB;
      const now = this.#now();
      const recentA = this.#decayed(a.account, now);
      const recentB = this.#decayed(b.account, now);
      if (recentA !== recentB) return recentA < recentB;
    }
    return a.seq < b.seq;
  }

  /** Where an entry stands: 1 + the waiters that would be served before it as things are now; 0 when gone. */
  #position(entry: Entry<Meta, unknown>): number {
    if (!this.#entries.includes(entry)) return 0;
    this.#syncRunning();
    let ahead = 0;
    for (const other of this.#entries) if (other !== entry && this.#before(other, entry)) ahead++;
    return ahead + 1;
  }

  #remove(entry: Entry<Meta, unknown>, outcome: "served" | "left" | "refused"): boolean {
    const index = this.#entries.indexOf(entry);
    if (index === -1) return false;
    this.#entries.splice(index, 1);
    entry.account.waiting--;
    this.#idled(entry.account);
    entry.signal.removeEventListener("abort", entry.onAbort);
    if (entry.timer !== undefined) clearTimeout(entry.timer);
    this.#options.onWaited?.(entry.ticket.tier, this.#now() - entry.joinedAt, outcome);
    if (outcome !== "served") this.#forgetIdle();
    return true;
  }

  /** Keeps the map of accounts bounded: past the limit, idle accounts are forgotten (they are lifted anyway when they return). */
  #forgetIdle(): void {
    if (this.#accounts.size <= IDLE_ACCOUNTS_KEPT) return;
    for (const [name, account] of this.#accounts) if (!this.#active.has(account)) this.#accounts.delete(name);
  }
}
