/**
 * Prometheus metrics (prom-client), one registry per server so tests can run several in a process.
 * Served at `GET /metrics`.
 */
import { Counter, Gauge, Registry, collectDefaultMetrics, type CounterConfiguration } from "prom-client";
import { FastHistogram } from "./fast-histogram.ts";

import type { EngineMember } from "../engines/engine.ts";

export type MetricsSources = {
  /** True while rate limits come from the local fallback because Redis is unreachable. */
  rateLimiterDegraded: () => boolean;
  /** Each model's engine members (the embedded engine is one): busy, capacity, waiting, healthy. */
  members?: () => Array<{ model: string; members: EngineMember[] }>;
  /** Charges waiting for the database to come back. */
  deferredCharges?: () => number;
  /** Credit leases: open on this node, and usage records waiting for the next group commit. */
  leases?: () => { open: number; pendingRecords: number };
  /** PostgreSQL's change feed: whether it proves itself live; absent where there is none (SQLite, `--change-feed false`), and so is its gauge. */
  changeFeedLive?: () => boolean;
};

/** One label set's count, added to on every request and handed to its counter when the counter is read. */
class Tally {
  readonly labels: readonly string[];
  pending = 0;

  constructor(labels: readonly string[]) {
    this.labels = labels;
  }

  inc(value = 1): void {
    // prom-client's own checks, at the call as before: a counter never decreases.
    if (!(value >= 0) || value === Infinity) throw new TypeError(`A counter is incremented by a finite number ≥ 0, not ${value}`);
    this.pending += value;
  }
}

/**
 * The counts of a labelled counter by their label values (in its label names' order), for what is
 * counted on every request. prom-client hashes a label set on every `inc` (a child from `labels()`
 * too: it is `inc` bound to the labels, hashed again each call) and answers with an object; here
 * a request adds to a number, and the sums reach the counter when it is read (`collect`, which
 * prom-client calls before every read: a scrape, `get()`). (Histograms are `FastHistogram`s, which
 * keep their children themselves.)
 */
class Tallies {
  readonly #cache = new Map<string, Tally>();
  readonly #counter: Pick<Counter<string>, "labels">;

  constructor(counter: Pick<Counter<string>, "labels">) {
    this.#counter = counter;
  }

  of(...values: Array<string | number>): Tally {
    const key = values.join("\u0000");
    let tally = this.#cache.get(key);
    if (tally === undefined) {
      // Label values are few (models, members, routes, statuses); the bound is for safety only.
      if (this.#cache.size >= 10_000) {
        this.flush();
        this.#cache.clear();
      }
      tally = new Tally(values.map(String));
      this.#cache.set(key, tally);
    }
    return tally;
  }

  /** Hands what was counted since the last read to the counter. */
  flush(): void {
    for (const tally of this.#cache.values()) {
      if (tally.pending === 0) continue;
      this.#counter.labels(...tally.labels).inc(tally.pending);
      tally.pending = 0;
    }
  }
}

/** A counter counted on every request, and its tallies: it takes their sums whenever it is read. */
function talliedCounter<Label extends string>(configuration: Omit<CounterConfiguration<Label>, "collect">): { counter: Counter<Label>; tallies: Tallies } {
  const counter: Counter<Label> = new Counter({ ...configuration, collect: () => tallies.flush() });
  const tallies = new Tallies(counter);
  return { counter, tallies };
}

export class Metrics {
  readonly registry = new Registry();
  readonly httpRequests: Counter<"method" | "route" | "status">;
  readonly httpDuration: FastHistogram<"route">;
  readonly completions: Counter<"model" | "finish_reason">;
  /** Embeddings requests that ran, by outcome (`ok`, `error`, `cancelled`) and their inputs embedded. */
  readonly embeddings: Counter<"model" | "outcome">;
  readonly embeddingInputs: Counter<"model">;
  readonly tokens: Counter<"model" | "kind">;
  readonly rateLimited: Counter<"reason">;
  /** Requests sent to upstream members, by outcome (`ok`, or the kind of error). */
  readonly upstreamRequests: Counter<"model" | "member" | "outcome">;
  /** Seconds from sending a request upstream to its first token. */
  readonly upstreamTimeToFirstToken: FastHistogram<"model" | "member">;
  /** Seconds requests waited in a model's queue, by band and how the wait ended (`served`, `left`, `refused`). */
  readonly queueWait: FastHistogram<"model" | "tier" | "outcome">;

  readonly #http: Tallies;
  readonly #completions: Tallies;
  readonly #tokens: Tallies;
  readonly #upstream: Tallies;

  /** One HTTP request answered (or cut: 499): `httpRequests` and `httpDuration`. */
  countHttp(method: string, route: string, status: number, seconds: number): void {
    this.#http.of(method, route, status).inc();
    this.httpDuration.child(route).observe(seconds);
  }

  /** One completion finished: `completions`, and its tokens when it has usage. */
  countCompletion(model: string, finishReason: string, usage?: { promptTokens: number; cachedPromptTokens: number; completionTokens: number }): void {
    this.#completions.of(model, finishReason).inc();
    if (usage === undefined) return;
    this.countTokens(model, "prompt", usage.promptTokens);
    this.countTokens(model, "cached_prompt", usage.cachedPromptTokens);
    this.countTokens(model, "completion", usage.completionTokens);
  }

  /** Tokens processed: `tokens` by kind (prompt, cached_prompt, completion). */
  countTokens(model: string, kind: "prompt" | "cached_prompt" | "completion", tokens: number): void {
    this.#tokens.of(model, kind).inc(tokens);
  }

  /** One request to an upstream member ended: `upstreamRequests`, and its time to a first token when it had one. */
  countUpstream(model: string, member: string, outcome: string, timeToFirstTokenSeconds?: number): void {
    this.#upstream.of(model, member, outcome).inc();
    if (timeToFirstTokenSeconds !== undefined) this.upstreamTimeToFirstToken.child(model, member).observe(timeToFirstTokenSeconds);
  }

  constructor(sources: MetricsSources) {
    collectDefaultMetrics({ register: this.registry, prefix: "turnpike_process_" });
    const registers = [this.registry];
    const http = talliedCounter({ name: "turnpike_http_requests_total", help: "HTTP requests answered", labelNames: ["method", "route", "status"], registers });
    this.httpRequests = http.counter;
    this.#http = http.tallies;
    this.httpDuration = new FastHistogram({
      name: "turnpike_http_request_duration_seconds",
      help: "Time to answer an HTTP request (streams: until the last event)",
      labelNames: ["route"],
      buckets: [0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
      registers,
    });
    const completions = talliedCounter({ name: "turnpike_chat_completions_total", help: "Chat completions finished", labelNames: ["model", "finish_reason"], registers });
    this.completions = completions.counter;
    this.#completions = completions.tallies;
    this.embeddings = new Counter({ name: "turnpike_embeddings_total", help: "Embeddings requests that ran, by outcome (ok, error, cancelled)", labelNames: ["model", "outcome"], registers });
    this.embeddingInputs = new Counter({ name: "turnpike_embedding_inputs_total", help: "Inputs embedded (one vector each)", labelNames: ["model"], registers });
    const tokens = talliedCounter({ name: "turnpike_tokens_total", help: "Tokens processed (prompt, cached_prompt, completion)", labelNames: ["model", "kind"], registers });
    this.tokens = tokens.counter;
    this.#tokens = tokens.tallies;
    this.rateLimited = new Counter({ name: "turnpike_refused_requests_total", help: "Requests refused before generation", labelNames: ["reason"], registers });
    const upstream = talliedCounter({
      name: "turnpike_upstream_requests_total",
      help: "Requests sent to upstream members, by outcome (ok, or the kind of error)",
      labelNames: ["model", "member", "outcome"],
      registers,
    });
    this.upstreamRequests = upstream.counter;
    this.#upstream = upstream.tallies;
    this.upstreamTimeToFirstToken = new FastHistogram({
      name: "turnpike_upstream_time_to_first_token_seconds",
      help: "Time from sending a request to an upstream member to its first token",
      labelNames: ["model", "member"],
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    });
    this.queueWait = new FastHistogram({
      name: "turnpike_queue_wait_seconds",
      help: "Time requests waited in a model's queue for a slot or a member, by service tier and outcome (served, left, refused)",
      labelNames: ["model", "tier", "outcome"],
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
      registers,
    });
    /** The queues' snapshots, per model (the member that holds each queue carries it). */
    const queues = function* () {
      for (const { model, members } of sources.members?.() ?? []) {
        for (const member of members) if (member.queue !== undefined) yield { model, queue: member.queue() };
      }
    };
    new Gauge({
      name: "turnpike_queue_waiting",
      help: "Requests waiting in a model's queue, by service tier (priority, default, flex)",
      labelNames: ["model", "tier"],
      registers,
      collect() {
        this.reset();
        for (const { model, queue } of queues()) for (const [tier, waiting] of Object.entries(queue.waiting)) this.inc({ model, tier }, waiting);
      },
    });
    new Gauge({
      name: "turnpike_queue_oldest_wait_seconds",
      help: "How long the oldest request waiting in a model's queue has waited, by service tier (0: none waits)",
      labelNames: ["model", "tier"],
      registers,
      collect() {
        this.reset();
        for (const { model, queue } of queues()) for (const [tier, waited] of Object.entries(queue.oldestWaitMs)) this.set({ model, tier }, (waited ?? 0) / 1000);
      },
    });
    new Gauge({
      name: "turnpike_queue_account_share",
      help: "Share of a model's tokens served lately (decayed, half-life one minute) to each of its top five accounts",
      labelNames: ["model", "account"],
      registers,
      collect() {
        this.reset();
        for (const { model, queue } of queues()) for (const { account, share } of queue.topShares) this.set({ model, account }, share);
      },
    });
    /** A gauge per model, summed over its members (the embedded engine has one). */
    const modelGauge = (name: string, help: string, value: (member: EngineMember) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ["model"],
        registers,
        collect() {
          this.reset();
          for (const { model, members } of sources.members?.() ?? []) this.set({ model }, members.reduce((sum, member) => sum + value(member), 0));
        },
      });
    modelGauge("turnpike_engine_slots_busy", "Requests generating now, per model (all members)", (member) => member.busy);
    modelGauge("turnpike_engine_slots", "Requests a model can generate at once (--parallel, or the members' max_in_flight)", (member) => member.capacity);
    modelGauge("turnpike_engine_queue_waiting", "Requests waiting for a free slot, per model", (member) => member.waiting);
    /** A gauge per member of each model's pool. */
    const memberGauge = (name: string, help: string, value: (member: EngineMember) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ["model", "member"],
        registers,
        collect() {
          this.reset();
          for (const { model, members } of sources.members?.() ?? []) for (const member of members) this.set({ model, member: member.id }, value(member));
        },
      });
    /** Cumulative batching counts an engine keeps itself (the embedded one), per model. */
    const batchCounter = (name: string, help: string, value: (batching: NonNullable<EngineMember["batching"]>) => number) =>
      new Counter({
        name,
        help,
        labelNames: ["model"],
        registers,
        collect() {
          this.reset();
          for (const { model, members } of sources.members?.() ?? []) {
            const counted = members.filter((member) => member.batching !== undefined);
            if (counted.length > 0) this.inc({ model }, counted.reduce((sum, member) => sum + value(member.batching!), 0));
          }
        },
      });
    batchCounter("turnpike_engine_batches_total", "Batches (llama_decode calls) of the embedded engine, per model", (batching) => batching.batches);
    batchCounter(
      "turnpike_engine_batch_sequences_total",
      "Sequences in those batches (÷ batches: how many streams share one decode)",
      (batching) => batching.sequences,
    );
    batchCounter("turnpike_engine_batch_tokens_total", "Tokens decoded in those batches, prompt tokens included", (batching) => batching.tokens);
    memberGauge("turnpike_engine_member_in_flight", "Requests running on each member of a model's pool", (member) => member.busy);
    memberGauge("turnpike_engine_member_healthy", "1 while a member of a model's pool is healthy", (member) => (member.healthy ? 1 : 0));
    new Gauge({
      name: "turnpike_deferred_charges",
      help: "Charges of finished requests waiting for the database to come back (retried in the background)",
      registers,
      collect() {
        this.set(sources.deferredCharges?.() ?? 0);
      },
    });
    new Gauge({
      name: "turnpike_credit_leases_open",
      help: "Credit leases this node holds: holds that busy keys' requests reserve from in memory",
      registers,
      collect() {
        this.set(sources.leases?.().open ?? 0);
      },
    });
    new Gauge({
      name: "turnpike_usage_records_pending",
      help: "Usage records of finished requests waiting for the next group commit",
      registers,
      collect() {
        this.set(sources.leases?.().pendingRecords ?? 0);
      },
    });
    const changeFeedLive = sources.changeFeedLive;
    if (changeFeedLive !== undefined) {
      new Gauge({
        name: "turnpike_change_feed_live",
        help: "PostgreSQL: 1 while the change feed proves it heard every change committed over a second ago (keys are then kept up to a minute), 0 while it does not (keys are read again after 1 s)",
        registers,
        collect() {
          this.set(changeFeedLive() ? 1 : 0);
        },
      });
    }
    new Gauge({
      name: "turnpike_rate_limiter_degraded",
      help: "1 while Redis is unreachable and rate limits are enforced per node only",
      registers,
      collect() {
        this.set(sources.rateLimiterDegraded() ? 1 : 0);
      },
    });
  }
}
