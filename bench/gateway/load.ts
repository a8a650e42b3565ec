/**
 * The gateway benchmark's load: a closed loop of `connections` clients over a keep-alive undici
 * `Pool`, each sending its next request as soon as the last one's body has arrived in full
 * (autocannon's model). Bounded by time and by count. Each response is checked: status 200, and
 * the completion's text (JSON) or its end (`[DONE]`, or `message_stop` for messages) (SSE), in
 * the target's dialect.
 */
import { performance } from "node:perf_hooks";
import { Pool } from "undici";

export type LoadTarget = {
  /** `http://127.0.0.1:PORT` */
  origin: string;
  path: string;
  headers: Record<string, string>;
  body: string;
  stream: boolean;
  /** Which API the path speaks, for the check of its answers: chat completions (the default), responses or messages. */
  dialect?: Dialect;
};

/** The wire dialects the load can check: `/v1/chat/completions`, `/v1/responses` and Anthropic's `/v1/messages`. */
export type Dialect = "chat" | "responses" | "messages";

export type LoadOptions = {
  connections: number;
  /** Requests sent before measuring (connections opened, JIT warm), not counted. */
  warmupMs: number;
  durationMs: number;
  /** A bound on the measured requests, whatever the duration. */
  maxRequests: number;
  /** Called right before and after the measured phase (to read CPU counters). */
  onMeasureStart?: () => void;
  onMeasureEnd?: () => void;
};

export type LoadResult = {
  /** Measured requests that succeeded. */
  requests: number;
  errors: number;
  /** Up to 3 distinct error descriptions. */
  errorSamples: string[];
  /** Wall time of the measured phase. */
  seconds: number;
  /** Per successful request, from sending to the last byte of the body. */
  latenciesMs: number[];
};

/** What the upstream's completion says, checked in every JSON response. */
const EXPECTED_TEXT = "lazy dog.";
const REQUEST_TIMEOUT_MS = 10_000;

/**
 * Checks one response; returns a description of what is wrong, or undefined. A response of the
 * Responses API must also be `completed` (JSON), or hold the `response.completed` event (SSE); a
 * message of the Messages API must be `type` `message` (JSON), or a stream that stops at
 * `end_turn` and ends with the `message_stop` event (Anthropic's streams have no `[DONE]`).
 */
export function checkResponse(status: number, body: string, stream: boolean, dialect: Dialect = "chat"): string | undefined {
  if (status !== 200) return `status ${status}: ${body.slice(0, 200)}`;
  if (!stream) {
    if (!body.includes(EXPECTED_TEXT)) return `unexpected body: ${body.slice(0, 200)}`;
    if (dialect === "responses" && !/"status":\s*"completed"/.test(body)) return `response not completed: ${body.slice(0, 200)}`;
    if (dialect === "messages" && !/"type":\s*"message"/.test(body)) return `not a message: ${body.slice(0, 200)}`;
    return undefined;
  }
  if (dialect === "messages") {
    if (!/"stop_reason":\s*"end_turn"/.test(body)) return `stream without stop_reason "end_turn": ${body.slice(-300)}`;
    const trimmed = body.trimEnd();
    const lastEvent = trimmed.slice(trimmed.lastIndexOf("\n\n") + 1).trimStart();
    if (!lastEvent.startsWith("event: message_stop\n")) return `stream not ended by message_stop: ${body.slice(-200)}`;
    return undefined;
  }
  if (dialect === "responses") {
    if (!body.includes('"type":"response.completed"')) return `stream without response.completed: ${body.slice(-200)}`;
  } else if (!/"finish_reason":\s*"stop"/.test(body)) return `stream without finish_reason "stop": ${body.slice(0, 200)}`;
  if (!body.trimEnd().endsWith("data: [DONE]")) return `stream not ended by [DONE]: ${body.slice(-200)}`;
  return undefined;
}

/** Sends one request and reads its body whole. */
async function sendOne(pool: Pool, target: LoadTarget): Promise<string | undefined> {
  try {
    const response = await pool.request({ path: target.path, method: "POST", headers: target.headers, body: target.body });
    const body = await response.body.text();
    return checkResponse(response.statusCode, body, target.stream, target.dialect);
  } catch (error) {
    return `${(error as Error).name}: ${(error as Error).message}`;
  }
}

/** Runs warm-up then the measured phase against one target, and closes its connections. */
export async function runLoad(target: LoadTarget, options: LoadOptions): Promise<LoadResult> {
  const pool = new Pool(target.origin, {
    connections: options.connections,
    pipelining: 1,
    keepAliveTimeout: 30_000,
    headersTimeout: REQUEST_TIMEOUT_MS,
    bodyTimeout: REQUEST_TIMEOUT_MS,
  });
  const result: LoadResult = { requests: 0, errors: 0, errorSamples: [], seconds: 0, latenciesMs: [] };
  const recordError = (problem: string) => {
    result.errors++;
    if (result.errorSamples.length < 3 && !result.errorSamples.includes(problem)) result.errorSamples.push(problem);
  };
  try {
    // Warm-up: every connection opened and used; errors here are counted too (they would repeat).
    const warmupEnd = performance.now() + options.warmupMs;
    let warmupSent = 0;
    await Promise.all(
      Array.from({ length: options.connections }, async () => {
        while (performance.now() < warmupEnd && warmupSent < options.maxRequests) {
          warmupSent++;
          const problem = await sendOne(pool, target);
          if (problem !== undefined) return recordError(problem);
        }
      }),
    );
    options.onMeasureStart?.();
    const started = performance.now();
    const end = started + options.durationMs;
    let sent = 0;
    await Promise.all(
      Array.from({ length: options.connections }, async () => {
        while (performance.now() < end && sent < options.maxRequests) {
          sent++;
          const requestStarted = performance.now();
          const problem = await sendOne(pool, target);
          if (problem !== undefined) {
            recordError(problem);
            // A failing target fails fast: stop this client rather than spin.
            if (result.errors > 100) return;
            continue;
          }
          result.latenciesMs.push(performance.now() - requestStarted);
        }
      }),
    );
    result.seconds = (performance.now() - started) / 1000;
    options.onMeasureEnd?.();
    result.requests = result.latenciesMs.length;
  } finally {
    await pool.close().catch(() => undefined);
  }
  return result;
}
