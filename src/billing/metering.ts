/**
 * Metering around one request: may this key use this model, reserve the worst case before
 * generating, then charge exactly what was generated (also when the client left), release
 * what a failed request held, and record the usage. A settlement the database could not take
 * (an outage) is retried in the background until it can, so tokens generated meanwhile are
 * still billed once.
 */
import type { Kysely } from "kysely";
import type { ApiKeyRecord } from "../auth/api-keys.ts";
import type { CatalogModel } from "../catalog/catalog.ts";
import type { GenerationUsage } from "../protocol/generation.ts";
import type { Database } from "../store/schema.ts";
import { InsufficientQuotaError, MeteringBehindError, ModelNotAllowedError, ServiceTierNotAllowedError } from "../protocol/errors.ts";
import { CreditLeases, type BatchEvent, type LeaseSettings } from "./credit-leases.ts";
import { costOf, worstCaseCost } from "../protocol/price.ts";
import { findAccountPlan, findAccountStanding } from "./plans-store.ts";
import type { Plan } from "../protocol/plans.ts";
import { DEFAULT_SERVICE_TIER_PRICES, multiplierPercent, servedTier, SERVICE_TIERS, type RequestedServiceTier, type ServiceTier } from "../protocol/service-tiers.ts";
import { isDatabaseUnavailable } from "../store/errors.ts";
import { changeMark, foreignChangesWatched, sameMark, type ChangeMark } from "../store/changes.ts";
import { newId } from "../store/ids.ts";

export type MeteringOptions = {
  database: Kysely<Database>;
  /** This serving node (holds carry it). */
  nodeId: () => string;
  /** How long a hold may live before the sweeper releases it. */
  holdTtlMs: number;
  /** Waits between retries of a settlement the database could not take; the last one repeats. */
  retryDelaysMs?: readonly number[];
  /** How long to go on retrying one settlement. */
  retryForMs?: number;
  /** Hears of deferred settlements: retried, done, or given up. */
  onDeferred?: (event: DeferredSettlementEvent) => void;
  /** Credit leases and group commits (`credit-leases.ts`); defaults otherwise. */
  leases?: Partial<LeaseSettings>;
  /** Hears of group commits the database could not take, and of their recovery. */
  onBatch?: (event: BatchEvent) => void;
  /** Hears of a request whose reported usage cost more than its hold reserved (logged at warn). */
  onOverage?: (event: OverageEvent) => void;
};

/**
 * A request's usage cost more than its hold reserved (an upstream reported more prompt tokens
 * than the prompt bound allowed for): the difference is charged as far as the balance covers.
 */
export type OverageEvent = {
  requestId: string;
  accountId: string;
  keyId: string;
  model: string;
  /** Credit the hold reserved. */
  reserved: number;
  /** What the reported usage costs. */
  cost: number;
  /** What was charged: `cost` unless the balance ran out; null while a deferred settlement or a lease's close is still to charge it. */
  charged: number | null;
};

export type DeferredSettlementEvent =
  | { kind: "deferred"; requestId: string; error: unknown }
  | { kind: "settled"; requestId: string; cost: number; attempts: number }
  | { kind: "abandoned"; requestId: string; error: unknown; attempts: number };

const DEFAULT_RETRY_DELAYS_MS = [500, 1_000, 2_000, 5_000, 10_000, 30_000];
const DEFAULT_RETRY_FOR_MS = 60 * 60 * 1000;
const STANDING_CACHE_MS = 1_000;
/**
 * While the store's change feed proves itself live (PostgreSQL: every plan change and account
 * disable reaches this node as it commits), a busy or leased key's standing is used for up to
 * this long, read again in the background once past `STANDING_CACHE_MS`: a quiet key that comes
 * back pays no query for it. Its balance only feeds the cheap pre-checks, which never refuse on
 * a kept balance without reading it again (`Standing.kept`).
 */
const WATCHED_STANDING_MS = 60_000;

/** An account's plan and balance, as `standingOf` gives them. */
export type Standing = {
  plan: Plan | null;
  balance: number | null;
  /** It came from this node's memory, not a read just now: read it again (`fresh`) before refusing for want of credit. */
  kept?: boolean;
};

export type AdmitInput = {
  key: ApiKeyRecord;
  model: CatalogModel;
  promptTokens: number;
  /** The most completion tokens one choice may use. */
  maxTokens: number;
  /** Choices generated (OpenAI's `n`): the worst case is `choices × maxTokens` completion tokens. */
  choices: number;
  requestId: string;
  stream: boolean;
  /** The account's plan when the caller looked it up already (`planOf`); looked up otherwise. */
  plan?: Plan | null;
  /** The tier it is served in (`serviceTierOf`), recorded with its usage; default `default`. */
  serviceTier?: ServiceTier;
  /** The tier's price multiplier in percent (`serviceTierOf`): the hold, checkpoints and the charge are at it; default 100. */
  multiplierPercent?: number;
  /** The account's balance as `standingOf` read it for this request: a quiet key may get a standing lease when it is large (`credit-leases.ts`). */
  balance?: number | null;
};

/** The tier a request is served in, and its price multiplier in percent (100: the model's prices). */
export type ServedTier = { tier: ServiceTier; multiplierPercent: number };

export type QuotaCheckInput = {
  key: ApiKeyRecord;
  model: CatalogModel;
  /** The account's balance as `standingOf` read it; null for operator keys (never metered). */
  balance: number | null;
  /** The prompt has at least this many tokens (a bound known before tokenizing). */
  promptTokens: number;
  /** Completion tokens (all choices) the hold will reserve at least. */
  completionTokens: number;
  /** The served tier's price multiplier in percent (`serviceTierOf`); default 100. */
  multiplierPercent?: number;
};

export type RequestOutcome = {
  /** Tokens generated, with where the counts came from; null when nothing was generated (nothing is charged). */
  usage: GenerationUsage | null;
  status: number;
  finishReason: string | null;
  latencyMs: number;
};

export type Admission = {
  /** Credit reserved for this request (0 for the operator's keys and free models). */
  readonly reserved: number;
  /** Reports the running request's usage so far: written as its checkpoint every interval. */
  track(progress: () => GenerationUsage): void;
  /**
   * Before output that brings the request to `completionTokens` goes to its client: undefined,
   * or a wait for the group commit that checkpoints it first (`CreditLeases.beforeDelivery`), so
   * that no client is ever more than one checkpoint ahead of what a killed node is billed.
   */
  beforeDelivery(completionTokens: number): Promise<unknown> | undefined;
  /**
   * Charges the exact cost (or releases the hold) and records usage. Call exactly once, before
   * the client hears the end: resolves once the usage record is queued for the next group commit
   * (which settles a hold of the request's own with it: `CreditLeases.finishOwn`), or, while the
   * group commit is late (`CreditLeases.late`), once it is written; never waited for through a
   * database outage. A request whose usage cost more than its own hold reserved resolves once its
   * settlement is committed, so that no later request finds the credit it takes.
   * `cost` is null when the database is unavailable: the settlement goes on in the background.
   */
  settle(outcome: RequestOutcome): Promise<{ cost: number | null }>;
};

export class Metering {
  readonly #options: MeteringOptions;
  /** Timers of the retries waiting to run. */
  readonly #pending = new Set<ReturnType<typeof setTimeout>>();
  /** Settlements deferred and not yet settled or given up (an attempt in flight included). */
  #deferred = 0;
  #stopped = false;

  readonly #leases: CreditLeases;
  /** Busy keys' account standings, read at most once every `STANDING_CACHE_MS` (see `WATCHED_STANDING_MS`). */
  readonly #standings = new Map<string, { at: number; mark: ChangeMark; standing: { plan: Plan | null; balance: number | null } }>();
  /** Accounts whose standing is being read again in the background. */
  readonly #refreshing = new Set<string>();

  constructor(options: MeteringOptions) {
    this.#options = options;
    this.#leases = new CreditLeases({ database: options.database, nodeId: options.nodeId, holdTtlMs: options.holdTtlMs, settings: options.leases, onBatch: options.onBatch });
  }

  /** Settlements waiting for the database to come back, and usage records whose group commit it refused. */
  get deferred(): number {
    return this.#deferred + this.#leases.deferred;
  }

  /** Stops retrying (at shutdown); returns how many settlements were still waiting. */
  stop(): number {
    this.#stopped = true;
    this.#leases.abandon();
    const left = this.#deferred;
    for (const timer of this.#pending) clearTimeout(timer);
    this.#pending.clear();
    return left;
  }

  /**
   * Runs `attempt` now; while the database is unavailable, again after each delay until it
   * succeeds or `retryForMs` has passed. Settling is idempotent (a settled hold is not charged
   * twice, and its usage record is not written twice), so an attempt whose commit went through
   * unanswered is safe to repeat.
   */
  async #settleOrDefer(requestId: string, attempt: () => Promise<number>): Promise<{ cost: number | null }> {
    try {
      return { cost: await attempt() };
    } catch (error) {
      if (!isDatabaseUnavailable(error)) throw error;
      const delays = this.#options.retryDelaysMs ?? DEFAULT_RETRY_DELAYS_MS;
      const giveUpAt = Date.now() + (this.#options.retryForMs ?? DEFAULT_RETRY_FOR_MS);
      this.#options.onDeferred?.({ kind: "deferred", requestId, error });
      this.#deferred++;
      const retry = (attempts: number): void => {
        if (this.#stopped) return;
        const timer = setTimeout(() => {
          this.#pending.delete(timer);
          attempt().then(
            (cost) => {
              this.#deferred--;
              this.#options.onDeferred?.({ kind: "settled", requestId, cost, attempts: attempts + 1 });
            },
            (failure: unknown) => {
              if (isDatabaseUnavailable(failure) && Date.now() < giveUpAt && !this.#stopped) return retry(attempts + 1);
              this.#deferred--;
              this.#options.onDeferred?.({ kind: "abandoned", requestId, error: failure, attempts: attempts + 1 });
            },
          );
        }, delays[Math.min(attempts - 1, delays.length - 1)]);
        timer.unref();
        this.#pending.add(timer);
      };
      retry(1);
      return { cost: null };
    }
  }

  /** The plan of the key's account (its limits and models apply); null for operator keys and accounts without one. */
  async planOf(key: ApiKeyRecord): Promise<Plan | null> {
    if (key.accountId === null) return null;
    return (await findAccountPlan(this.#options.database, key.accountId)) ?? null;
  }

  /** Throws 403 `model_not_allowed` unless the key and its plan may use the model. */
  checkModel(key: ApiKeyRecord, plan: Plan | null, model: CatalogModel): void {
    if (key.models !== null && !key.models.includes(model.id)) throw new ModelNotAllowedError(model.id, "it is not among the key's allowed models");
    if (plan?.models != null && !plan.models.includes(model.id)) throw new ModelNotAllowedError(model.id, `the plan '${plan.id}' does not include it`);
  }

  /**
   * The tier a request asking for `requested` is served in (`auto`: `default`) and its price
   * multiplier: the plan's (an account without a plan: `default` alone at 1); the operator's keys
   * may use every tier at 1. Throws 403 `service_tier_not_allowed`, listing the plan's tiers,
   * when the plan does not offer it.
   */
  serviceTierOf(key: ApiKeyRecord, plan: Plan | null, requested: RequestedServiceTier | undefined): ServedTier {
    const tier = servedTier(requested);
    if (key.accountId === null) return { tier, multiplierPercent: 100 };
    const prices = plan?.service_tiers ?? DEFAULT_SERVICE_TIER_PRICES;
    const multiplier = prices[tier];
    if (multiplier === undefined) {
      const offered = SERVICE_TIERS.filter((name) => prices[name] !== undefined).map((name) => `'${name}'`);
      const whose = plan === null ? "The account has no plan, which allows" : `The plan '${plan.id}' allows`;
      throw new ServiceTierNotAllowedError(`The service tier '${tier}' is not available to this account. ${whose} only ${offered.join(", ")}: send one of those, or 'auto'.`);
    }
    return { tier, multiplierPercent: multiplierPercent(multiplier) };
  }

  /**
   * The key's plan and its account's balance, in one query (operator keys: no plan, no balance).
   * The plan is what `planOf` gives; the balance feeds the cheap quota checks below. A busy or
   * leased key's is kept a second, or a minute while the change feed is live (`WATCHED_STANDING_MS`);
   * `fresh` reads it regardless (before a refusal for want of credit).
   */
  async standingOf(key: ApiKeyRecord, options: { fresh?: boolean } = {}): Promise<Standing> {
    if (key.accountId === null) return { plan: null, balance: null };
    const accountId = key.accountId;
    // A busy key's standing is read at most once a second: it feeds the cheap pre-checks only
    // (the hold or the lease decides), and an account without credit is read every time.
    const now = Date.now();
    const database = this.#options.database;
    const cached = this.#standings.get(accountId);
    if (options.fresh !== true && cached !== undefined && (this.#leases.busy(key.id, now) || this.#leases.leased(key.id))) {
      const age = now - cached.at;
      if (age < STANDING_CACHE_MS) return this.#counting(accountId, cached.standing, true);
      // Past the second, only while every change committed since is known to have reached here, and none did.
      if (age < WATCHED_STANDING_MS && foreignChangesWatched(database, STANDING_CACHE_MS) && sameMark(changeMark(database), cached.mark)) {
        if (!this.#refreshing.has(accountId)) {
          this.#refreshing.add(accountId);
          void this.#readStanding(accountId)
            .catch(() => undefined)
            .finally(() => this.#refreshing.delete(accountId));
        }
        return this.#counting(accountId, cached.standing, true);
      }
    }
    return this.#counting(accountId, await this.#readStanding(accountId));
  }

  /** Reads the account's standing and keeps it while it has credit (not over a change made meanwhile). */
  async #readStanding(accountId: string): Promise<{ plan: Plan | null; balance: number | null }> {
    const database = this.#options.database;
    const before = changeMark(database);
    const at = Date.now();
    const found = await findAccountStanding(database, accountId);
    // A missing account is left to the hold, which says so.
    const standing = { plan: found?.plan ?? null, balance: found?.balance ?? null };
    if (standing.balance !== null && standing.balance > 0) {
      if (this.#standings.size >= 10_000) this.#standings.clear();
      // Kept with where the store stood before the read: a change meanwhile ends its second life.
      this.#standings.set(accountId, { at, mark: before, standing });
    } else this.#standings.delete(accountId);
    return standing;
  }

  /**
   * Whether `checkQuota` would refuse for want of credit alone (not the key's spend cap): where the
   * balance was kept (`Standing.kept`), it is read again first, as it may be behind a top-up.
   */
  shortOfCredit(input: QuotaCheckInput): boolean {
    return this.#shortfall(input)?.of === "credit";
  }

  /** What the pre-check refuses the request for, if anything: the key's spend cap first, then the balance; with the least it costs. */
  #shortfall(input: QuotaCheckInput): { of: "cap" | "credit"; least: number; balance: number } | undefined {
    const { key, model, balance } = input;
    if (key.accountId === null) return undefined;
    const least = worstCaseCost(model.pricing, input.promptTokens, input.completionTokens, input.multiplierPercent);
    if (least <= 0) return undefined;
    if (key.spendCap !== null && key.spendCap - key.spent < least) return { of: "cap", least, balance: balance ?? 0 };
    if (balance !== null && balance < least) return { of: "credit", least, balance };
    return undefined;
  }

  /**
   * The standing with what this node's queued settlements of the account's own holds give back
   * (`CreditLeases.finishOwn`): until their group commit lands, those holds keep their requests'
   * whole reservations, and the pre-checks would refuse on credit that is the account's.
   */
  #counting(accountId: string, standing: { plan: Plan | null; balance: number | null }, kept = false): Standing {
    const returning = this.#leases.returning(accountId);
    const balance = returning === 0 || standing.balance === null ? standing.balance : standing.balance + returning;
    return kept ? { plan: standing.plan, balance, kept } : { plan: standing.plan, balance };
  }

  /**
   * A cheap quota pre-check, before the prompt is rendered or tokenized: throws the same 429
   * `insufficient_quota` the hold would when the account's balance (or the key's spend cap)
   * cannot cover even the least the hold will reserve (`worstCaseCost` of the lower bounds).
   * Reads and writes nothing: the balance comes from `standingOf`. Passing it proves nothing; the
   * hold decides. Balance counts credit due to expire, which only lowers what the hold finds:
   * never a wrong refusal.
   */
  checkQuota(input: QuotaCheckInput): void {
    const short = this.#shortfall(input);
    if (short === undefined) return;
    if (short.of === "cap") throw new InsufficientQuotaError("This API key reached its spend cap. Raise the cap or use another key.");
    throw new InsufficientQuotaError(
      `You exceeded your current quota: this request costs at least ${short.least} credits and the account has ${Math.max(0, short.balance)}. ` +
        "Buy a plan, redeem a code, or shorten the request.",
    );
  }

  /**
   * Whether the key can pay for anything at all, asked before a large body is read and parsed
   * (work that grows with what the client sent): throws 429 `insufficient_quota` when every model
   * the key and its plan may use is priced and the account has no credit left or the key's spend
   * cap is spent. Writes nothing; one query (`standingOf`).
   */
  async checkCanPayAnything(key: ApiKeyRecord, models: readonly CatalogModel[]): Promise<void> {
    if (key.accountId === null) return;
    const { plan, balance } = await this.standingOf(key);
    const usable = models.filter((model) => {
      try {
        this.checkModel(key, plan, model);
        return true;
      } catch {
        return false;
      }
    });
    // A free model (or none usable: the parse names the model, and permission says why) is not ours to refuse.
    if (usable.length === 0 || usable.some((model) => worstCaseCost(model.pricing, 1, 1) <= 0)) return;
    if (key.spendCap !== null && key.spendCap - key.spent <= 0) {
      throw new InsufficientQuotaError("This API key reached its spend cap. Raise the cap or use another key.");
    }
    if (balance !== null && balance <= 0) {
      throw new InsufficientQuotaError("You exceeded your current quota: the account has no credit left. Buy a plan or redeem a code.");
    }
  }

  /** Checks the key may use the model and reserves the request's worst case. Throws 403/429. */
  async admit(input: AdmitInput): Promise<Admission> {
    const { key, model } = input;
    // Usage this node could not record in time is never served: while its group commits keep
    // someone waiting past `shedAfterMs`, new requests go elsewhere (or come back shortly).
    if (this.#leases.behind) throw new MeteringBehindError();
    const plan = input.plan !== undefined ? input.plan : await this.planOf(key);
    this.checkModel(key, plan, model);
    const metered = key.accountId !== null;
    const percent = input.multiplierPercent ?? 100;
    const reserved = metered ? worstCaseCost(model.pricing, input.promptTokens, input.maxTokens * input.choices, percent) : 0;
    // A busy key is served from a credit lease; a quiet one from a hold of each request's own,
    // settled in the group commit that writes its record (`credit-leases.ts`).
    const hot = this.#leases.hot(key.id, reserved);
    const ticket =
      metered && reserved > 0
        ? await this.#leases.reserve({ accountId: key.accountId!, keyId: key.id, amount: reserved, hot, balance: input.balance, capLeft: key.spendCap === null ? null : key.spendCap - key.spent })
        : null;
    const createdAt = Date.now();
    const row = (usage: GenerationUsage | null) => ({
      request_id: input.requestId,
      account_id: key.accountId,
      key_id: key.id,
      model: model.id,
      prompt_tokens: usage?.promptTokens ?? input.promptTokens,
      cached_prompt_tokens: usage?.cachedPromptTokens ?? 0,
      completion_tokens: usage?.completionTokens ?? 0,
      reasoning_tokens: usage?.reasoningTokens ?? 0,
      usage_source: usage?.source ?? null,
      stream: input.stream ? 1 : 0,
      service_tier: input.serviceTier ?? "default",
    });
    let settled = false;
    return {
      reserved,
      track: (progress) => {
        if (ticket === null) return;
        this.#leases.track(ticket, () => {
          const usage = progress();
          return { ...row(usage), cost: Math.min(reserved, costOf(model.pricing, usage, percent)), created_at: createdAt };
        });
      },
      beforeDelivery: (completionTokens) => (ticket === null ? undefined : this.#leases.beforeDelivery(ticket, completionTokens)),
      settle: async (outcome) => {
        if (settled) return { cost: 0 };
        settled = true;
        const cost = outcome.usage === null || !metered ? 0 : costOf(model.pricing, outcome.usage, percent);
        const record = (charged: number) => ({
          ...row(outcome.usage),
          cost: charged,
          latency_ms: Math.round(outcome.latencyMs),
          status: outcome.status,
          finish_reason: outcome.finishReason,
          created_at: Date.now(),
        });
        if (ticket === null) {
          // Nothing reserved (an operator key, a free model): nothing to settle, and the record
          // joins the next group commit whether the key is busy or quiet.
          this.#leases.queue({ ...record(0), id: newId("use"), hold_id: null });
          if (this.#leases.late) await this.#leases.written();
          return { cost: 0 };
        }
        const overage = (charged: number | null) => {
          if (cost <= reserved) return;
          this.#options.onOverage?.({ requestId: input.requestId, accountId: key.accountId!, keyId: key.id, model: model.id, reserved, cost, charged });
        };
        if (!ticket.own) {
          const charged = this.#leases.finishShared(ticket, { ...record(cost), id: ticket.usageId, hold_id: ticket.holdId });
          // Past its own reservation, the rest is charged when the lease closes, as far as the balance covers.
          overage(null);
          // The record joins the next group commit (at most `flushIntervalMs` away): the client is
          // not kept waiting for it, unless the writer is late, when the client hears the end only
          // once it is durable (not waited for through an outage).
          if (this.#leases.late) await this.#leases.written();
          return { cost: charged };
        }
        if (cost <= reserved) {
          // Settled in the next group commit, the record with the charge (`finishOwn` says why
          // there and why nothing exact is traded), waited for only while the writer is late.
          const charged = this.#leases.finishOwn(ticket, { ...record(cost), id: ticket.usageId, hold_id: ticket.holdId });
          if (this.#leases.late) await this.#leases.written();
          return { cost: charged };
        }
        // Past its reservation: the settlement takes credit beyond the hold, before the client
        // hears the end, so that no later request can find that credit first. The usage record
        // commits with the charge, so the two never disagree.
        const result = await this.#settleOrDefer(input.requestId, () => this.#leases.settleOwn(ticket, cost, record));
        overage(result.cost);
        return result;
      },
    };
  }

  /** At shutdown: writes the usage records waiting for their group commit and closes this node's leases. */
  drain(): Promise<number> {
    return this.#leases.drain();
  }

  /** The credit leases (for tests and benchmarks: flush, open leases). */
  get leases(): CreditLeases {
    return this.#leases;
  }
}
