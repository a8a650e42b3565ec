/**
 * Whether a Redis is reachable, decided by a probe of its own with hysteresis, never by how long the commands of the
 * moment take. Under CPU pressure a command can take seconds while Redis is perfectly healthy; switching every node to
 * limits of its own then would let each node grant a whole limit. So: a probe (a PING) runs every `intervalMs` with a
 * generous timeout of its own; `failuresToUnreachable` failures in a row make Redis unreachable, and only
 * `successesToReachable` successes in a row make it reachable again (one lucky PING does not flip it back).
 *
 * Pure state and timing: the probe and the reaction to a switch are passed in, so a test drives it probe by probe.
 */

/** How often the probe runs, in ms. */
export const REDIS_PROBE_INTERVAL_MS = 1000;
/** How long one probe may take before it counts as failed, in ms. */
export const REDIS_PROBE_TIMEOUT_MS = 2000;
/** Failed probes in a row that make a reachable Redis unreachable (about 3 s refused, 6 s black-holed). */
export const REDIS_FAILURES_TO_UNREACHABLE = 3;
/** Successful probes in a row that make an unreachable Redis reachable again (about 3 s). */
export const REDIS_SUCCESSES_TO_REACHABLE = 3;
/**
 * How long a request waits for its Redis command while Redis is reachable, in ms. A command slower than this (or one
 * that fails) is answered from the node's own counts for that one request; it does not switch the node over.
 */
export const REDIS_COMMAND_TIMEOUT_MS = 2000;

export type RedisHealthSettings = {
  /** ms between the end of one probe and the start of the next (default `REDIS_PROBE_INTERVAL_MS`). */
  intervalMs: number;
  /** ms one probe may take (default `REDIS_PROBE_TIMEOUT_MS`). */
  timeoutMs: number;
  /** Failed probes in a row that make Redis unreachable (default `REDIS_FAILURES_TO_UNREACHABLE`). */
  failuresToUnreachable: number;
  /** Successful probes in a row that make Redis reachable again (default `REDIS_SUCCESSES_TO_REACHABLE`). */
  successesToReachable: number;
  /** Told after every probe (tests record the sequence; nothing in the service needs it). */
  onProbe?: (outcome: ProbeOutcome) => void;
};

/** One probe's result and the state after it. */
export type ProbeOutcome = { ok: boolean; reachable: boolean };

export type RedisHealthOptions = Partial<RedisHealthSettings> & {
  /** One health check (a PING); resolves when Redis answered, rejects otherwise. */
  probe: () => Promise<unknown>;
  /** Called on each switch, synchronously, with the error of the last failed probe when it became unreachable. */
  onChange: (reachable: boolean, error: unknown) => void;
};

export class RedisHealth {
  readonly #probe: () => Promise<unknown>;
  readonly #onChange: (reachable: boolean, error: unknown) => void;
  readonly #onProbe: ((outcome: ProbeOutcome) => void) | undefined;
  readonly #intervalMs: number;
  readonly #timeoutMs: number;
  readonly #failuresToUnreachable: number;
  readonly #successesToReachable: number;
  #reachable = true;
  /** Failed probes in a row (0 after a success). */
  #failures = 0;
  /** Successful probes in a row (0 after a failure). */
  #successes = 0;
  #running: Promise<void> | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #stopped = false;

  constructor(options: RedisHealthOptions) {
    this.#probe = options.probe;
    this.#onChange = options.onChange;
    this.#onProbe = options.onProbe;
    this.#intervalMs = options.intervalMs ?? REDIS_PROBE_INTERVAL_MS;
    this.#timeoutMs = options.timeoutMs ?? REDIS_PROBE_TIMEOUT_MS;
    this.#failuresToUnreachable = Math.max(1, options.failuresToUnreachable ?? REDIS_FAILURES_TO_UNREACHABLE);
    this.#successesToReachable = Math.max(1, options.successesToReachable ?? REDIS_SUCCESSES_TO_REACHABLE);
  }

  get reachable(): boolean {
    return this.#reachable;
  }

  /**
   * Takes the state found by the first connection (no hysteresis at start: there was no earlier state to hold) and
   * probes every interval from then on. Starting unreachable is reported, with `error`; starting reachable is not.
   */
  start(reachable: boolean, error?: unknown): void {
    if (this.#stopped) return;
    this.#reachable = reachable;
    if (!reachable) this.#onChange(false, error);
    this.#schedule();
  }

  /** Runs one probe now (or waits for the one running) and counts it. */
  probeNow(): Promise<void> {
    this.#running ??= this.#probeOnce().finally(() => (this.#running = undefined));
    return this.#running;
  }

  /**
   * Makes Redis unreachable at once, e.g. when the merge after a return failed: it must again earn
   * `successesToReachable` probes in a row.
   */
  markUnreachable(error: unknown): void {
    if (this.#stopped) return;
    this.#successes = 0;
    if (!this.#reachable) return;
    this.#reachable = false;
    this.#onChange(false, error);
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => void this.probeNow().then(() => this.#schedule()), this.#intervalMs);
    this.#timer.unref();
  }

  async #probeOnce(): Promise<void> {
    let error: unknown;
    let ok: boolean;
    try {
      await withTimeout(this.#probe(), this.#timeoutMs, "the Redis health probe");
      ok = true;
    } catch (caught) {
      ok = false;
      error = caught;
    }
    if (this.#stopped) return;
    if (ok) {
      this.#failures = 0;
      this.#successes += 1;
    } else {
      this.#successes = 0;
      this.#failures += 1;
    }
    if (ok && !this.#reachable && this.#successes >= this.#successesToReachable) {
      this.#reachable = true;
      this.#onChange(true, undefined);
    } else if (!ok && this.#reachable && this.#failures >= this.#failuresToUnreachable) {
      this.#reachable = false;
      this.#onChange(false, error);
    }
    this.#onProbe?.({ ok, reachable: this.#reachable });
  }
}

/** `promise`, or a rejection after `timeoutMs` (the promise itself runs on; its late result is ignored). */
export function withTimeout<T>(promise: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${timeoutMs} ms`)), timeoutMs);
    timer.unref();
  });
  promise.catch(() => {});
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
