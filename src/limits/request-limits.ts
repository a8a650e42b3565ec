/**
 * Rate limits of one chat request: requests and tokens per minute, for the API key (its own
 * limits) and for its account (the plan's). Tokens are charged up front as prompt + the most
 * the request may generate, and what it did not generate is given back when it ends. A caller
 * that knows only a lower bound of the prompt when it admits (before tokenizing) charges that,
 * then raises the charge to the exact count (`raise`). It may also name a likelier count
 * (`likelyTokens`, a guess from the prompts counted before): that is charged first, so that the
 * exact count, once known, usually needs no second charge (one round trip to a shared backend, not
 * two); the part of the guess above it goes back at once. Refusals are those of the lower bound:
 * a guess a limit cannot take is charged as the lower bound instead.
 */
import type { Plan } from "../protocol/plans.ts";
import { RateLimitExceededError } from "../protocol/errors.ts";
import { moreRestrictive, rateLimitHeaders, retryAfterSeconds } from "./headers.ts";
import type { LimitCheck, LimitDecision, LimitState, RateLimiter } from "./rate-limiter.ts";

/**
 * What the limits read of an API key (an `auth/` key record is one, so limits need not import
 * auth, which builds on limits' Redis link): its own limits, its creators', its account.
 */
export type LimitedKey = {
  id: string;
  accountId: string | null;
  /** Requests per minute; null: no limit of its own. */
  rpm: number | null;
  /** Tokens per minute (prompt + completion); null: no limit of its own. */
  tpm: number | null;
  /** The keys above this one that have limits: a key and everything it created share them. */
  ancestorLimits?: readonly { id: string; rpm: number | null; tpm: number | null }[];
};

export type LimitInput = {
  key: LimitedKey;
  /** The account's plan (its limits apply to every key of the account); null when it has none. */
  plan: Plan | null;
  /** Prompt tokens plus the most the request may generate (at least: `raise` may add to it). */
  tokens: number;
  /**
   * What the request will likely be charged once its prompt is counted (≥ `tokens`): charged
   * first when every limit can take it, else `tokens` is (a second charge, only then).
   */
  likelyTokens?: number;
  /** The request was counted already against the requests-per-minute limits (`countRequest`, on its headers): charge its tokens only. */
  requestCounted?: boolean;
};

export type LimitAdmission = {
  /** `x-ratelimit-*` headers for the response (empty when no limit applies); up to date after `raise`. */
  readonly headers: Record<string, string>;
  /**
   * Makes the tokens charged `tokens` (prompt + the most the request may generate, once the
   * prompt is tokenized). More than charged: the difference is charged against every
   * tokens-per-minute limit, or 429 `rate_limit_exceeded` is thrown, having charged nothing more
   * (call `finish(0)` then). Less than a likely count charged at admission: the difference goes
   * back at once, without waiting for the backend (`finish` waits for it). Less than a lower
   * bound charged: nothing changes (`finish` gives back the rest).
   */
  raise(tokens: number): Promise<void>;
  /** Gives back the tokens charged but not used (and waits for a give-back `raise` started); call once, when the request has ended. */
  finish(usedTokens: number): Promise<void>;
};

/** One limit a request is charged against; a `LimitCheck` as it is (its `key`, `limit` and `cost`). */
type Scope = { kind: "requests" | "tokens"; key: string; limit: number; cost: number; who: string };

/** The admission of a request that no limit applies to. */
const NO_LIMITS: LimitAdmission = Object.freeze({ headers: Object.freeze({}) as Record<string, string>, raise: async () => {}, finish: async () => {} });

/** The headers of the most restrictive requests and tokens limits among `states` (one per scope, in order). */
function headersOf(scopes: readonly Scope[], states: readonly LimitState[]): Record<string, string> {
  let requests: LimitState | undefined;
  let tokens: LimitState | undefined;
  for (let index = 0; index < scopes.length; index++) {
    const state = states[index]!;
    if (scopes[index]!.kind === "requests") requests = moreRestrictive(requests, state);
    else tokens = moreRestrictive(tokens, state);
  }
  return rateLimitHeaders({ requests, tokens });
}

export class RequestLimits {
  readonly #limiter: RateLimiter;

  constructor(limiter: RateLimiter) {
    this.#limiter = limiter;
  }

  get degraded(): boolean {
    return this.#limiter.degraded;
  }

  /** Charges the request against every limit that applies, or throws 429 `rate_limit_exceeded`. */
  async admit(input: LimitInput): Promise<LimitAdmission> {
    const scopes = scopesOf(input);
    if (scopes.length === 0) return NO_LIMITS;
    const lowest = Math.max(0, Math.ceil(input.tokens));
    const likely = input.likelyTokens === undefined ? lowest : Math.max(lowest, Math.ceil(input.likelyTokens));
    const tokenScopes = scopes.filter((scope) => scope.kind === "tokens");
    /** Whether the charge is the guess (`likelyTokens`): `raise` gives back what it charged too much. */
    let guessed = likely > lowest && tokenScopes.length > 0;
    if (guessed) for (const scope of tokenScopes) scope.cost = likely;
    let first = await this.#consume(scopes);
    if (!first.allowed && guessed) {
      // Charged nothing (all or none): the lower bound decides, as it would without a guess.
      guessed = false;
      for (const scope of tokenScopes) scope.cost = lowest;
      first = await this.#consume(scopes);
    }
    if (!first.allowed) throw refusal(scopes, first, headersOf(scopes, first.states));
    // The latest state of every limit, by position in `scopes`; the headers are written from it
    // when asked for (once a request, as a rule), not after every charge.
    const states = first.states;
    let headers: Record<string, string> | undefined;
    /** Tokens charged so far against each tokens-per-minute limit. */
    let charged = 0;
    let finished = false;
    /** A give-back `raise` started (never rejects: its failure is kept for `finish`). */
    let givingBack: Promise<void> | undefined;
    let giveBackError: unknown;
    const tokenIndexes: number[] = [];
    for (let index = 0; index < scopes.length; index++) {
      if (scopes[index]!.kind !== "tokens") continue;
      if (tokenIndexes.length === 0) charged = scopes[index]!.cost;
      tokenIndexes.push(index);
    }
    const refund = (amount: number) => Promise.all(tokenIndexes.map((index) => this.#limiter.refund(scopes[index]!.key, amount))).then(() => undefined);
    return {
      get headers() {
        headers ??= headersOf(scopes, states);
        return headers;
      },
      raise: async (tokens) => {
        const total = Math.max(0, Math.ceil(tokens));
        const extra = total - charged;
        if (tokenIndexes.length === 0 || finished) return;
        if (extra < 0 && guessed) {
          // The guess was above the exact count: the rest goes back now, off the request's path.
          guessed = false;
          charged = total;
          for (const index of tokenIndexes) states[index] = { ...states[index]!, remaining: Math.min(states[index]!.limit, states[index]!.remaining - extra) };
          headers = undefined;
          givingBack = refund(-extra).catch((error: unknown) => {
            giveBackError = error;
          });
          return;
        }
        if (extra <= 0) return;
        // The whole request, not just the difference, must fit the limit (else waiting never helps).
        const tooLarge = tokenIndexes.map((index) => scopes[index]!).find((scope) => total > scope.limit);
        if (tooLarge !== undefined) throw tooLargeError({ ...tooLarge, cost: total }, headersOf(scopes, states));
        const extraScopes = tokenIndexes.map((index) => ({ ...scopes[index]!, cost: extra }));
        const more = await this.#consume(extraScopes);
        if (!more.allowed) {
          const after = states.slice();
          tokenIndexes.forEach((scopeIndex, index) => (after[scopeIndex] = more.states[index]!));
          throw refusal(extraScopes, more, headersOf(scopes, after));
        }
        charged = total;
        guessed = false;
        tokenIndexes.forEach((scopeIndex, index) => (states[scopeIndex] = more.states[index]!));
        headers = undefined;
      },
      finish: async (usedTokens) => {
        if (finished) return;
        finished = true;
        const unused = Math.max(0, charged - Math.max(0, Math.floor(usedTokens)));
        if (unused > 0) await refund(unused);
        if (givingBack !== undefined) {
          await givingBack;
          if (giveBackError !== undefined) throw giveBackError;
        }
      },
    };
  }

  /**
   * Counts the request against every requests-per-minute limit that applies, and nothing else,
   * or throws 429 `rate_limit_exceeded`: for a large body, on its headers, so a key over its limit
   * never has its body read. The later `admit` must then be told (`requestCounted: true`), so the
   * request is counted once.
   */
  async countRequest(input: Omit<LimitInput, "tokens" | "requestCounted">): Promise<void> {
    const scopes = scopesOf({ ...input, tokens: 0 }).filter((scope) => scope.kind === "requests");
    if (scopes.length === 0) return;
    const decision = await this.#consume(scopes);
    if (!decision.allowed) throw refusal(scopes, decision, headersOf(scopes, decision.states));
  }

  /** The `x-ratelimit-*` headers of the limits that apply, charging nothing (for responses that use no quota). */
  async peek(input: Omit<LimitInput, "tokens">): Promise<Record<string, string>> {
    const scopes = scopesOf({ ...input, tokens: 0 }).map((scope) => ({ ...scope, cost: 0 }));
    if (scopes.length === 0) return {};
    return headersOf(scopes, (await this.#consume(scopes)).states);
  }

  /** Charges the scopes' costs (all or none); a scope is its own check. */
  #consume(scopes: readonly Scope[]): Promise<LimitDecision> {
    return this.#limiter.consume(scopes);
  }

  close(): Promise<void> {
    return this.#limiter.close();
  }
}

/** A limit that applies to a key, the request's cost left out. */
type ScopeTemplate = Omit<Scope, "cost">;

/**
 * The limits of a key under a plan, as last built for that key record and plan object: a busy key
 * brings the same two (cached) records with every request, so its limits' bucket names and
 * wording are built once, not per request. Records are never changed in place (an update is a new
 * record), so one kept here is never stale; it goes with its key record.
 */
const templatesByKey = new WeakMap<LimitedKey, { plan: Plan | null; templates: readonly ScopeTemplate[] }>();

/**
 * The limits that apply: the key's own, those of the keys above it (a key created by a key shares
 * its creator's buckets, so children together never exceed their parent), and its account's plan.
 */
function templatesOf(key: LimitedKey, plan: Plan | null): readonly ScopeTemplate[] {
  const kept = templatesByKey.get(key);
  if (kept !== undefined && kept.plan === plan) return kept.templates;
  const templates: ScopeTemplate[] = [];
  if (key.rpm !== null) templates.push({ kind: "requests", key: `key:${key.id}:rpm`, limit: key.rpm, who: "API key" });
  if (key.tpm !== null) templates.push({ kind: "tokens", key: `key:${key.id}:tpm`, limit: key.tpm, who: "API key" });
  for (const ancestor of key.ancestorLimits ?? []) {
    const who = "API key that created this one (its keys share its limits)";
    if (ancestor.rpm !== null) templates.push({ kind: "requests", key: `key:${ancestor.id}:rpm`, limit: ancestor.rpm, who });
    if (ancestor.tpm !== null) templates.push({ kind: "tokens", key: `key:${ancestor.id}:tpm`, limit: ancestor.tpm, who });
  }
  if (key.accountId !== null && plan !== null) {
    if (plan.rpm !== null) templates.push({ kind: "requests", key: `account:${key.accountId}:rpm`, limit: plan.rpm, who: `plan '${plan.id}'` });
    if (plan.tpm !== null) templates.push({ kind: "tokens", key: `account:${key.accountId}:tpm`, limit: plan.tpm, who: `plan '${plan.id}'` });
  }
  templatesByKey.set(key, { plan, templates });
  return templates;
}

/** The limits that apply (`templatesOf`), each with what this request costs it. */
function scopesOf({ key, plan, tokens, requestCounted }: LimitInput): Scope[] {
  const templates = templatesOf(key, plan);
  const cost = Math.max(0, Math.ceil(tokens));
  // Counted already: the requests limits are still read (for the headers), charged nothing more.
  const request = requestCounted === true ? 0 : 1;
  const scopes: Scope[] = new Array(templates.length);
  for (let index = 0; index < templates.length; index++) {
    const template = templates[index]!;
    scopes[index] = { kind: template.kind, key: template.key, limit: template.limit, cost: template.kind === "requests" ? request : cost, who: template.who };
  }
  return scopes;
}

/** The 429 for a refused charge: "too large" when a cost exceeds its limit, else when to retry. */
function refusal(scopes: readonly Scope[], decision: LimitDecision, headers: Record<string, string>): RateLimitExceededError {
  const index = decision.tooLarge.length > 0 ? scopes.findIndex((scope) => scope.key === decision.tooLarge[0]) : refusingIndex(scopes, decision.states);
  const scope = scopes[Math.max(0, index)]!;
  if (decision.retryAfterMs < 0) return tooLargeError(scope, headers);
  const wait = retryAfterSeconds(decision.retryAfterMs);
  return new RateLimitExceededError(`Rate limit reached: the ${scope.who} allows ${scope.limit} ${unitOf(scope)}. Try again in ${wait} s.`, wait, headers);
}

/** OpenAI's "Request too large": the cost exceeds the limit itself, so waiting cannot help. */
function tooLargeError(scope: Scope, headers: Record<string, string>): RateLimitExceededError {
  return new RateLimitExceededError(
    `Request too large: it needs ${scope.cost} tokens (prompt + max_tokens) but the ${scope.who} allows ${scope.limit} ${unitOf(scope)}. Lower max_tokens or shorten the prompt.`,
    60,
    headers,
  );
}

function unitOf(scope: Scope): string {
  return scope.kind === "requests" ? "requests per minute" : "tokens per minute";
}

/** The first limit that could not take its cost. */
function refusingIndex(scopes: readonly Scope[], states: readonly LimitState[]): number {
  return scopes.findIndex((scope, index) => states[index]!.remaining < scope.cost);
}
