/**
 * Prometheus metrics (prom-client), one registry per server so tests can run several in a process.
 * Served at `GET /metrics`.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";

export type SlotStats = { busy: number; waiting: number; capacity: number };

export type MetricsSources = {
  /** True while rate limits come from the local fallback because Redis is unreachable. */
  rateLimiterDegraded: () => boolean;
  /** Each loaded model's generation slots: busy, total, and requests waiting for one. */
  slots?: () => Array<{ model: string; stats: SlotStats }>;
  /** Charges waiting for the database to come back. */
  deferredCharges?: () => number;
};

export class Metrics {
  readonly registry = new Registry();
  readonly httpRequests: Counter<"method" | "route" | "status">;
  readonly httpDuration: Histogram<"route">;
  readonly completions: Counter<"model" | "finish_reason">;
  readonly tokens: Counter<"model" | "kind">;
  readonly rateLimited: Counter<"reason">;

  constructor(sources: MetricsSources) {
    collectDefaultMetrics({ register: this.registry, prefix: "turnpike_process_" });
    const registers = [this.registry];
    this.httpRequests = new Counter({ name: "turnpike_http_requests_total", help: "HTTP requests answered", labelNames: ["method", "route", "status"], registers });
    this.httpDuration = new Histogram({
      name: "turnpike_http_request_duration_seconds",
      help: "Time to answer an HTTP request (streams: until the last event)",
      labelNames: ["route"],
      buckets: [0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
      registers,
    });
    this.completions = new Counter({ name: "turnpike_chat_completions_total", help: "Chat completions finished", labelNames: ["model", "finish_reason"], registers });
    this.tokens = new Counter({ name: "turnpike_tokens_total", help: "Tokens processed (prompt, cached_prompt, completion)", labelNames: ["model", "kind"], registers });
    this.rateLimited = new Counter({ name: "turnpike_refused_requests_total", help: "Requests refused before generation", labelNames: ["reason"], registers });
    const slotGauge = (name: string, help: string, value: (stats: SlotStats) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ["model"],
        registers,
        collect() {
          this.reset();
          for (const { model, stats } of sources.slots?.() ?? []) this.set({ model }, value(stats));
        },
      });
    slotGauge("turnpike_engine_slots_busy", "Sequences generating now, per model", (stats) => stats.busy);
    slotGauge("turnpike_engine_slots", "Sequences a model can generate at once (--parallel)", (stats) => stats.capacity);
    slotGauge("turnpike_engine_queue_waiting", "Requests waiting for a free sequence, per model", (stats) => stats.waiting);
    new Gauge({
      name: "turnpike_deferred_charges",
      help: "Charges of finished requests waiting for the database to come back (retried in the background)",
      registers,
      collect() {
        this.set(sources.deferredCharges?.() ?? 0);
      },
    });
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
