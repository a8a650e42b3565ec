/**
 * One embeddings request over a pool of upstreams, by pass-through to a member's `/v1/embeddings`
 * (vLLM, SGLang, llama-server, Ollama, OpenAI all serve it): acquire a member, post the body, read
 * the whole JSON answer, and turn it into one L2-normalised `Float32Array` per input. As a
 * generation's (`upstream-generation.ts`): a member that fails (connection refused or reset,
 * 408/429/5xx, no answer in time, an answer that is not a list of vectors) goes back with the
 * failure and the next one is tried, `maxAttempts` in all, honouring a short `retry-after`; a 4xx
 * is the request's own fault and refused at once (a context overflow as `context_length_exceeded`);
 * the client's abort cuts the upstream request. Usage is the upstream's `usage.prompt_tokens`, or
 * the bound the request was held for when it reports none.
 */
import type { EmbeddingsResult, QueueTicket } from "../engine.ts";
import { ApiError, UpstreamError, UpstreamTimeoutError } from "../../protocol/errors.ts";
import type { MemberOutcome, PoolLease, UpstreamPool } from "./pool-types.ts";
import { classifyHttpError, classifyTransportFailure, type UpstreamVerdict } from "./upstream-errors.ts";
import type { UpstreamClient } from "./upstream-client.ts";
import { sleep, type UpstreamEventSink } from "./upstream-generation.ts";

export type UpstreamEmbeddingsOptions = {
  pool: UpstreamPool;
  client: UpstreamClient;
  /** The request body as JSON text. */
  body: string;
  /** Inputs sent: the answer must hold a vector for each. */
  inputs: number;
  /** The bound the request was held for: its usage when the upstream reports none. */
  promptTokens: number;
  /** Members tried at most, the first included. */
  maxAttempts: number;
  /** Milliseconds from sending the request to the whole answer before the member counts as failed. */
  timeoutMs: number;
  /** A `retry-after` up to this long is waited out before the next attempt (default 2 s). */
  maxRetryWaitMs?: number;
  /** Strings never to show (the API key). */
  secrets: readonly string[];
  onEvent: UpstreamEventSink;
  /** Aborted when the engine closes. */
  closing: AbortSignal;
};

/** The most bytes of an answer read: a vector of 4,096 numbers as JSON is about 90 KB. */
export function maxAnswerBytes(inputs: number): number {
  return Math.min(512 * 1024 * 1024, 1024 * 1024 + inputs * 512 * 1024);
}

/** An answer that is not what `/v1/embeddings` answers. */
class MalformedAnswer extends Error {}

/** No whole answer in time. */
class AttemptTimeout extends Error {}

type Attempt = { kind: "done"; result: EmbeddingsResult } | { kind: "retry"; error: ApiError; retryAfterMs?: number };

/** A vector as the upstream wrote it: numbers, or base64 of little-endian float32 bytes. */
function vectorOf(embedding: unknown): Float32Array {
  if (typeof embedding === "string") {
    const bytes = Buffer.from(embedding, "base64");
    if (bytes.length === 0 || bytes.length % 4 !== 0) throw new MalformedAnswer("a base64 vector of no whole float32s");
    const vector = new Float32Array(bytes.length / 4);
    for (let index = 0; index < vector.length; index++) vector[index] = bytes.readFloatLE(index * 4);
    return vector;
  }
  if (!Array.isArray(embedding) || embedding.length === 0) throw new MalformedAnswer("a vector that is not an array of numbers");
  const vector = new Float32Array(embedding.length);
  for (let index = 0; index < embedding.length; index++) {
    const value: unknown = embedding[index];
    if (typeof value !== "number" || !Number.isFinite(value)) throw new MalformedAnswer("a vector holding something other than finite numbers");
    vector[index] = value;
  }
  return vector;
}

/** The vector scaled to unit length (a zero vector stays as it is). */
export function normalized(vector: Float32Array): Float32Array {
  let sum = 0;
  for (const value of vector) sum += value * value;
  const norm = Math.sqrt(sum);
  if (norm === 0 || Math.abs(norm - 1) < 1e-7) return vector;
  for (let index = 0; index < vector.length; index++) vector[index] = vector[index]! / norm;
  return vector;
}

/**
 * The vectors of an answer, in the inputs' order (by each item's `index`), normalised, and its
 * reported tokens. Throws `MalformedAnswer` for anything else than one vector per input, all of one length.
 */
export function readEmbeddingsAnswer(answer: unknown, inputs: number): { vectors: Float32Array[]; promptTokens: number | undefined } {
  const data = (answer as { data?: unknown } | null)?.data;
  if (!Array.isArray(data) || data.length !== inputs) throw new MalformedAnswer(`an answer without ${inputs} vectors`);
  const vectors: Array<Float32Array | undefined> = new Array(inputs);
  for (const [position, item] of data.entries()) {
    const index = (item as { index?: unknown } | null)?.index ?? position;
    if (typeof index !== "number" || !Number.isInteger(index) || index < 0 || index >= inputs || vectors[index] !== undefined) throw new MalformedAnswer("vectors with missing or repeated indexes");
    vectors[index] = normalized(vectorOf((item as { embedding?: unknown }).embedding));
  }
  const length = vectors[0]!.length;
  if (vectors.some((vector) => vector!.length !== length)) throw new MalformedAnswer("vectors of different lengths");
  const reported = (answer as { usage?: { prompt_tokens?: unknown } }).usage?.prompt_tokens;
  return { vectors: vectors as Float32Array[], promptTokens: typeof reported === "number" && Number.isInteger(reported) && reported >= 0 ? reported : undefined };
}

/** Reads a body up to `limit` bytes; throws `MalformedAnswer` past it. */
async function readBounded(body: AsyncIterable<Uint8Array>, limit: number): Promise<string> {
  const pieces: Buffer[] = [];
  let size = 0;
  for await (const piece of body) {
    size += piece.length;
    if (size > limit) throw new MalformedAnswer(`an answer of more than ${limit} bytes`);
    pieces.push(Buffer.from(piece));
  }
  return Buffer.concat(pieces).toString("utf8");
}


/**
 * Runs the request (see the file's comment). Rejects with `EngineOverloadedError` at once when the
 * pool's queue is full, with `signal`'s reason when aborted, and with the typed error of the last
 * failure when no member answered.
 */
export async function runUpstreamEmbeddings(options: UpstreamEmbeddingsOptions, signal: AbortSignal, ticket?: QueueTicket): Promise<EmbeddingsResult> {
  const stop = AbortSignal.any([signal, options.closing]);
  const tried = new Set<string>();
  const maxWait = options.maxRetryWaitMs ?? 2000;
  let last: Attempt | undefined;
  for (let number = 1; ; number++) {
    let lease: PoolLease;
    try {
      if (stop.aborted) throw stop.reason;
      lease = await options.pool.acquire({ exclude: tried, signal: stop, ...(ticket === undefined ? {} : { ticket, served: () => options.promptTokens }) });
    } catch (error) {
      if (stop.aborted) throw stop.reason;
      // No member left to try: the failure that brought us here says most.
      if (last?.kind === "retry" && error instanceof ApiError && error.status === 503) throw last.error;
      throw error;
    }
    tried.add(lease.member.id);
    last = await attempt(options, lease, number, stop);
    if (last.kind === "done") return last.result;
    if (number >= options.maxAttempts) throw last.error;
    if (last.retryAfterMs !== undefined && last.retryAfterMs <= maxWait) await sleep(last.retryAfterMs, stop);
  }
}

async function attempt(options: UpstreamEmbeddingsOptions, lease: PoolLease, number: number, stop: AbortSignal): Promise<Attempt> {
  let released = false;
  const release = (outcome: MemberOutcome) => {
    if (released) return;
    released = true;
    lease.release(outcome);
  };
  const member = lease.member.id;
  const controller = new AbortController();
  const onStop = () => controller.abort(stop.reason);
  stop.addEventListener("abort", onStop, { once: true });
  const timer = setTimeout(() => controller.abort(new AttemptTimeout()), options.timeoutMs);
  const startedAt = performance.now();
  try {
    const response = await options.client.postEmbeddings(lease.member.baseUrl, options.body, controller.signal);
    if (response.status < 200 || response.status >= 300) {
      const verdict = classifyHttpError(response.status, await readBounded(response.body, 64 * 1024).catch(() => ""), response.headers, options.secrets);
      release(verdict.outcome);
      options.onEvent("warn", `upstream answered HTTP ${response.status}`, { member, status: response.status, ...(verdict.upstreamMessage === undefined ? {} : { upstream_message: verdict.upstreamMessage }) });
      return settle(verdict);
    }
    const text = await readBounded(response.body, maxAnswerBytes(options.inputs));
    let answer: unknown;
    try {
      answer = JSON.parse(text);
    } catch {
      throw new MalformedAnswer("an answer that is not JSON");
    }
    const read = readEmbeddingsAnswer(answer, options.inputs);
    release({ kind: "ok", timeToFirstTokenMs: performance.now() - startedAt });
    const usage = read.promptTokens === undefined ? { promptTokens: options.promptTokens, source: "estimated" as const } : { promptTokens: read.promptTokens, source: "upstream" as const };
    return { kind: "done", result: { vectors: read.vectors, usage } };
  } catch (error) {
    if (error instanceof ApiError) throw error;
    if (stop.aborted) {
      release({ kind: "neutral" });
      throw stop.reason;
    }
    const verdict = classify(error, controller.signal.reason, options);
    release(verdict.outcome);
    options.onEvent("warn", "upstream attempt failed", { member, attempt: number, failure: verdict.outcome.kind, ...(verdict.upstreamMessage === undefined ? {} : { upstream_message: verdict.upstreamMessage }) });
    return settle(verdict);
  } finally {
    clearTimeout(timer);
    stop.removeEventListener("abort", onStop);
    // Closes the upstream request when anything above ended it early.
    controller.abort(new Error("embeddings request ended"));
    release({ kind: "neutral" });
  }

  function settle(verdict: UpstreamVerdict): Attempt {
    if (verdict.action === "refuse") {
      if (verdict.operatorAlert !== undefined) options.onEvent("error", `upstream ${member}: ${verdict.operatorAlert}`, { member });
      throw verdict.error;
    }
    return { kind: "retry", error: verdict.error, ...(verdict.retryAfterMs !== undefined ? { retryAfterMs: verdict.retryAfterMs } : {}) };
  }
}

/** The verdict on a failure that is no HTTP answer: a timeout, a malformed answer, a connection, or our own request. */
function classify(error: unknown, abortReason: unknown, options: UpstreamEmbeddingsOptions): UpstreamVerdict {
  if (abortReason instanceof AttemptTimeout) return { action: "retry", outcome: { kind: "timeout" }, error: new UpstreamTimeoutError() };
  if (error instanceof MalformedAnswer) {
    return { action: "retry", outcome: { kind: "protocol" }, error: new UpstreamError("The model's upstream server sent a malformed answer. Retry shortly."), upstreamMessage: error.message };
  }
  return classifyTransportFailure(error, (message, fields) => options.onEvent("error", message, fields));
}
