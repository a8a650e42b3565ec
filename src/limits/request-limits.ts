/**
 * Rate limits of one chat request: requests and tokens per minute, for the API key (its own
 * limits) and for its account (the plan's). Tokens are charged up front as prompt + the most
 * the request may generate, and what it did not generate is given back when it ends. A caller
 * that knows only a lower bound of the prompt when it admits (before tokenizing) charges that,
 * then raises the charge to the exact count (`raise`).
 */
import type { ApiKeyRecord } from "../auth/api-keys.ts";
import type { Plan } from "../billing/plans.ts";
import { RateLimitExceededError } from "../protocol/errors.ts";
import { mostRestrictive, rateLimitHeaders, retryAfterSeconds } from "./headers.ts";
import type { LimitCheck, LimitDecision, LimitState, RateLimiter } from "./rate-limiter.ts";

export type LimitInput = {
  key: ApiKeyRecord;
  /** The account's plan (its limits apply to every key of the account); null when it has none. */
  plan: Plan | null;
  /** Prompt tokens plus the most the request may generate. */
  tokens: number;
};

export type LimitAdmission = {
  /** `x-ratelimit-*` headers for the response (empty when no limit applies); up to date after `raise`. */
  readonly headers: Record<string, string>;
  /**
   * Raises the tokens charged to `tokens` (prompt + the most the request may generate, once the
   * prompt is tokenized), charging the difference against every tokens-per-minute limit. Throws
   * 429 `rate_limit_exceeded`, having charged nothing more, when a limit cannot take it: call
   * `finish(0)` then. A lower count than charged changes nothing (`finish` gives back the rest).
   */
  raise(tokens: number): Promise<void>;
  /** Gives back the tokens charged but not used; call once, when the request has ended. */
  finish(usedTokens: number): Promise<void>;
};

type Scope = { kind: "requests" | "tokens"; key: string; limit: number; cost: number; who: string };

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
    if (scopes.length === 0) return { headers: {}, raise: async () => {}, finish: async () => {} };
    const first = await this.#consume(scopes);
    if (!first.decision.allowed) throw refusal(scopes, first.decision, first.headers);
    let headers = first.headers;
    /** Tokens charged so far against each tokens-per-minute limit. */
    let charged = scopes.find((scope) => scope.kind === "tokens")?.cost ?? 0;
    let finished = false;
    const tokenScopes = scopes.filter((scope) => scope.kind === "tokens");
    return {
      get headers() {
        return headers;
      },
      raise: async (tokens) => {
        const total = Math.max(0, Math.ceil(tokens));
        const extra = total - charged;
        if (extra <= 0 || tokenScopes.length === 0 || finished) return;
        // The whole request, not just the difference, must fit the limit (else waiting never helps).
        const whole = tokenScopes.map((scope) => ({ ...scope, cost: total }));
        const tooLarge = whole.find((scope) => scope.cost > scope.limit);
        if (tooLarge !== undefined) throw tooLargeError(tooLarge, headers);
        const extraScopes = tokenScopes.map((scope) => ({ ...scope, cost: extra }));
        const more = await this.#consume(extraScopes);
        if (!more.decision.allowed) throw refusal(extraScopes, more.decision, { ...headers, ...more.headers });
        charged = total;
        headers = { ...headers, ...more.headers };
      },
      finish: async (usedTokens) => {
        if (finished) return;
        finished = true;
        const unused = Math.max(0, charged - Math.max(0, Math.floor(usedTokens)));
        if (unused === 0) return;
        await Promise.all(tokenScopes.map((scope) => this.#limiter.refund(scope.key, unused)));
      },
    };
  }

  /** The `x-ratelimit-*` headers of the limits that apply, charging nothing (for responses that use no quota). */
  async peek(input: Omit<LimitInput, "tokens">): Promise<Record<string, string>> {
    const scopes = scopesOf({ ...input, tokens: 0 }).map((scope) => ({ ...scope, cost: 0 }));
    if (scopes.length === 0) return {};
    return (await this.#consume(scopes)).headers;
  }

  /** Charges the scopes' costs (all or none) and gives the headers of the states after it. */
  async #consume(scopes: readonly Scope[]): Promise<{ decision: LimitDecision; headers: Record<string, string> }> {
    const decision = await this.#limiter.consume(scopes.map(({ key, limit, cost }): LimitCheck => ({ key, limit, cost })));
    const states = (kind: Scope["kind"]): LimitState[] => decision.states.filter((_state, index) => scopes[index]!.kind === kind);
    return { decision, headers: rateLimitHeaders({ requests: mostRestrictive(states("requests")), tokens: mostRestrictive(states("tokens")) }) };
  }

  close(): Promise<void> {
    return this.#limiter.close();
  }
}

/**
 * The limits that apply: the key's own, those of the keys above it (a key created by a key shares
 * its creator's buckets, so children together never exceed their parent), and its account's plan.
 */
function scopesOf({ key, plan, tokens }: LimitInput): Scope[] {
  const scopes: Scope[] = [];
  const cost = Math.max(0, Math.ceil(tokens));
  if (key.rpm !== null) scopes.push({ kind: "requests", key: `key:${key.id}:rpm`, limit: key.rpm, cost: 1, who: "API key" });
  if (key.tpm !== null) scopes.push({ kind: "tokens", key: `key:${key.id}:tpm`, limit: key.tpm, cost, who: "API key" });
  for (const ancestor of key.ancestorLimits ?? []) {
    const who = "API key that created this one (its keys share its limits)";
    if (ancestor.rpm !== null) scopes.push({ kind: "requests", key: `key:${ancestor.id}:rpm`, limit: ancestor.rpm, cost: 1, who });
    if (ancestor.tpm !== null) scopes.push({ kind: "tokens", key: `key:${ancestor.id}:tpm`, limit: ancestor.tpm, cost, who });
  }
  if (key.accountId !== null && plan !== null) {
    if (plan.rpm !== null) scopes.push({ kind: "requests", key: `account:${key.accountId}:rpm`, limit: plan.rpm, cost: 1, who: `plan '${plan.id}'` });
    if (plan.tpm !== null) scopes.push({ kind: "tokens", key: `account:${key.accountId}:tpm`, limit: plan.tpm, cost, who: `plan '${plan.id}'` });
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
