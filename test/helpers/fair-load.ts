/**
 * Load that contends for a model's slots, for the fair-share tests and `bench/fairness.ts`:
 * backlogged accounts that keep N streamed requests open each, and a prober that sends one short
 * request every so often and records how long it waited and where the queue first put it.
 * Bounded: every loop stops with its signal, and each request has a timeout.
 */
import { performance } from "node:perf_hooks";

export type StreamOutcome = {
  status: number;
  /** Milliseconds from sending to the first data event (the request had its slot): the queue wait and the prompt. */
  firstDataMs: number | undefined;
  totalMs: number;
  /** `: queued N` comments read before the first data event, in order. */
  queued: number[];
  completionTokens: number;
  promptTokens: number;
  /** The error body of a refusal, parsed. */
  error?: { code?: string; type?: string; message?: string };
  retryAfter: string | null;
  serviceTier?: string;
};

/** One streamed chat completion (usage included), read to its end. */
export async function streamOnce(baseURL: string, key: string, body: Record<string, unknown>, signal?: AbortSignal): Promise<StreamOutcome> {
  const started = performance.now();
  const response = await fetch(`${baseURL}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
    signal: signal === undefined ? AbortSignal.timeout(120_000) : AbortSignal.any([signal, AbortSignal.timeout(120_000)]),
  });
  const outcome: StreamOutcome = { status: response.status, firstDataMs: undefined, totalMs: 0, queued: [], completionTokens: 0, promptTokens: 0, retryAfter: response.headers.get("retry-after") };
  if (response.status !== 200) {
    const text = await response.text();
    try {
      outcome.error = (JSON.parse(text) as { error: StreamOutcome["error"] }).error;
    } catch {
      outcome.error = { message: text };
    }
    outcome.totalMs = performance.now() - started;
    return outcome;
  }
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const piece of response.body!) {
    buffer += decoder.decode(piece as Uint8Array, { stream: true });
    let newline = buffer.indexOf("\n");
    while (newline !== -1) {
      const line = buffer.slice(0, newline).trim();
      buffer = buffer.slice(newline + 1);
      newline = buffer.indexOf("\n");
      if (line.startsWith(": queued ") && outcome.firstDataMs === undefined) outcome.queued.push(Number(line.slice(": queued ".length)));
      if (!line.startsWith("data: {")) continue;
      outcome.firstDataMs ??= performance.now() - started;
      const chunk = JSON.parse(line.slice(6)) as { usage?: { prompt_tokens: number; completion_tokens: number } | null; service_tier?: string; error?: StreamOutcome["error"] };
      if (chunk.usage) {
        outcome.completionTokens = chunk.usage.completion_tokens;
        outcome.promptTokens = chunk.usage.prompt_tokens;
      }
      if (chunk.service_tier !== undefined) outcome.serviceTier = chunk.service_tier;
      if (chunk.error !== undefined) outcome.error = chunk.error;
    }
  }
  outcome.totalMs = performance.now() - started;
  return outcome;
}

export type Backlog = {
  /** Finished requests so far, in order of finishing. */
  readonly done: Array<StreamOutcome & { at: number }>;
  /** Generated tokens so far. */
  tokens(): number;
  /** Stops sending and waits for what is open to end (aborted). */
  stop(): Promise<void>;
};

/** An account that keeps `inFlight` requests open (a new one as each ends) until stopped. */
export function backlog(baseURL: string, key: string, body: Record<string, unknown>, inFlight: number): Backlog {
  const controller = new AbortController();
  const done: Backlog["done"] = [];
  const loop = async () => {
    while (!controller.signal.aborted) {
      try {
        const outcome = await streamOnce(baseURL, key, body, controller.signal);
        if (!controller.signal.aborted) done.push({ ...outcome, at: performance.now() });
        // A refusal (a full queue) is retried after a pause, not in a hot loop.
        if (outcome.status !== 200) await new Promise((resolve) => setTimeout(resolve, 50));
      } catch {
        // Aborted by `stop`, or a transport error: the loop's condition decides.
      }
    }
  };
  const loops = Array.from({ length: inFlight }, loop);
  return {
    done,
    tokens: () => done.reduce((sum, outcome) => sum + outcome.completionTokens, 0),
    stop: async () => {
      controller.abort(new Error("backlog stopped"));
      await Promise.all(loops);
    },
  };
}

/** Jain's fairness index of the shares: 1 when all equal, 1/n when one account got everything. */
export function jainIndex(values: readonly number[]): number {
  const sum = values.reduce((total, value) => total + value, 0);
  const squares = values.reduce((total, value) => total + value * value, 0);
  return squares === 0 ? 1 : (sum * sum) / (values.length * squares);
}

export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/** Waits until `check` holds (polling every 20 ms), at most `timeoutMs`. */
export async function until(check: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
