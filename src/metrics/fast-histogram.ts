/**
 * A Prometheus histogram observed through children kept by label values: an observation adds to a
 * `Float64Array` of bucket counts, nothing else. prom-client's `Histogram.observe` builds a closure,
 * validates and sorts the labels, hashes them and reads buckets keyed by their bounds as strings on
 * every call: with three histograms observed on every request it was the largest part of what
 * metrics cost a proxied request (the gateway bench's profile). This one registers with a
 * prom-client `Registry` like any metric (its `get()` has the `Histogram`'s shape), so `/metrics`
 * renders it as the same text; `fast-histogram.test.ts` holds the two side by side.
 */
import type { Registry } from "prom-client";

type Child = { labels: Record<string, string>; buckets: Float64Array; sum: number; count: number };

/** One label set's observer. */
export type HistogramChild = { observe(value: number): void };

/** A value as prom-client's `Histogram` exports it (buckets carry `exemplar: null`: exemplars are off). */
type ExportedValue = { labels: Record<string, string | number>; sharedLabels?: Record<string, string>; value: number; metricName: string; exemplar?: null };

export class FastHistogram<Label extends string> {
  readonly name: string;
  readonly help: string;
  readonly type = "histogram";
  readonly aggregator = "sum";
  readonly #labelNames: readonly Label[];
  readonly #bounds: readonly number[];
  #children = new Map<string, Child>();
  /** The observers handed out, by label values: they follow `reset()` (a new child each). */
  readonly #observers = new Map<string, { child: Child } & HistogramChild>();

  constructor(config: { name: string; help: string; labelNames: readonly Label[]; buckets: readonly number[]; registers: Registry[] }) {
    this.name = config.name;
    this.help = config.help;
    this.#labelNames = config.labelNames;
    this.#bounds = [...config.buckets].sort((one, other) => one - other);
    for (const registry of config.registers) registry.registerMetric(this as never);
  }

  /** The observer of one label set, values in the label names' order (kept: call it once per set, or on every request). */
  child(...values: string[]): HistogramChild {
    const key = values.join("\u0000");
    let observer = this.#observers.get(key);
    if (observer === undefined) {
      // Label values are few (routes, models, members, tiers); the bound is for safety only.
      if (this.#observers.size >= 10_000) this.#observers.clear();
      const bounds = this.#bounds;
      const histogram = this;
      const made = {
        child: this.#childOf(key, values),
        observe(value: number): void {
          if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
          // Reset since: observe into a fresh child.
          if (histogram.#children.get(key) !== made.child) made.child = histogram.#childOf(key, values);
          const child = made.child;
          let index = 0;
          while (index < bounds.length && value > bounds[index]!) index++;
          if (index < bounds.length) child.buckets[index]! += 1;
          child.sum += value;
          child.count += 1;
        },
      };
      observer = made;
      this.#observers.set(key, observer);
    }
    return observer;
  }

  /** prom-client's form: `observe({ label: value, … }, seconds)`. */
  observe(labels: Record<Label, string>, value: number): void {
    this.child(...this.#labelNames.map((name) => String(labels[name]))).observe(value);
  }

  #childOf(key: string, values: readonly string[]): Child {
    let child = this.#children.get(key);
    if (child === undefined) {
      const labels: Record<string, string> = {};
      this.#labelNames.forEach((name, index) => (labels[name] = values[index]!));
      child = { labels, buckets: new Float64Array(this.#bounds.length), sum: 0, count: 0 };
      this.#children.set(key, child);
    }
    return child;
  }

  reset(): void {
    this.#children = new Map();
  }

  /** What the registry renders: cumulative buckets, `+Inf`, sum and count per label set (prom-client's `Histogram` shape). */
  getForPromString(): { name: string; help: string; type: string; values: ExportedValue[]; aggregator: string } {
    const values: ExportedValue[] = [];
    const bucketName = `${this.name}_bucket`;
    for (const child of this.#children.values()) {
      let cumulative = 0;
      this.#bounds.forEach((bound, index) => {
        cumulative += child.buckets[index]!;
        values.push({ labels: { le: bound }, sharedLabels: child.labels, value: cumulative, metricName: bucketName, exemplar: null });
      });
      values.push({ labels: { le: "+Inf" }, sharedLabels: child.labels, value: child.count, metricName: bucketName, exemplar: null });
      values.push({ labels: {}, sharedLabels: child.labels, value: child.sum, metricName: `${this.name}_sum` });
      values.push({ labels: {}, sharedLabels: child.labels, value: child.count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  /** The same with each value's labels whole (prom-client's `get()`: JSON output, cluster aggregation). */
  get(): { name: string; help: string; type: string; values: ExportedValue[]; aggregator: string } {
    const data = this.getForPromString();
    data.values = data.values.map(({ labels, sharedLabels, ...rest }) => ({ ...rest, labels: { ...sharedLabels, ...labels } }));
    return data;
  }
}
