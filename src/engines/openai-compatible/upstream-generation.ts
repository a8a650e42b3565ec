/**
 * One generation over a pool of upstreams: acquire a member, post the body, decode its stream
 * into parts. Retries and failover happen only before the client received content (connection
 * refused or reset, 408/429/5xx, a slow connect, no first token in time, an error event or a
 * malformed stream): the lease goes back with the failure and the next member is tried, at most
 * `maxAttempts` in all. Once content is out, a failure ends the stream with a typed error and
 * nothing else is sent: a reply is never stitched from two upstreams. A `buffered` request (its
 * client reads nothing before the reply is whole) holds each attempt's parts until the attempt
 * succeeded, so it is retried even when a member fails mid-answer; what the failed attempt made
 * is dropped, never shown.
 *
 * Cancellation aborts the upstream request at once; `usage()` then says what was counted. One
 * exception, for kinds that report usage only at the end (`readUsageAfterLeave`): a client that
 * leaves once the reply is whole, before the usage came, ends at once for itself (nothing more is
 * sent), but the upstream's stream is read on, for at most `USAGE_AFTER_LEAVE_MS` and
 * `USAGE_AFTER_LEAVE_BYTES`, until its usage arrives: the bill is what the upstream reports, an
 * estimate only when it never does. A shutdown aborts at once, as does a client leaving mid-reply
 * (the upstream would go on generating what nobody reads).
 */
import type { GenerationUsage, QueueTicket, RunningGeneration, StreamPart } from "../engine.ts";
import { ApiError, UpstreamError, UpstreamTimeoutError } from "../../protocol/errors.ts";
import type { MemberOutcome, PoolLease, UpstreamPool } from "./pool-types.ts";
import { chatChunksOf } from "./completion-chunks.ts";
import type { UpstreamWire } from "./completion-request.ts";
import { ChunkReader, readServerSentEvent, UpstreamProtocolError, UpstreamStreamError } from "./chunk-reader.ts";
import { SseDecoder, SseProtocolError, type ServerSentEvent } from "./sse-decoder.ts";
import { abortWith } from "../abort-group.ts";
import { classifyHttpError, classifyStreamError, classifyTransportFailure, midStreamFailure, type UpstreamVerdict } from "./upstream-errors.ts";
import type { UpstreamClient } from "./upstream-client.ts";

/** How long the upstream's stream is read on for its usage after the client left a whole reply (milliseconds). */
export const USAGE_AFTER_LEAVE_MS = 5_000;
/** How many bytes of it are read at most meanwhile (a usage chunk is a few hundred). */
export const USAGE_AFTER_LEAVE_BYTES = 1024 * 1024;

/** Operator-facing events (a member failing, our key refused): message and fields free of credentials. */
export type UpstreamEventSink = (level: "info" | "warn" | "error", message: string, fields: Record<string, unknown>) => void;

export type UpstreamGenerationOptions = {
  pool: UpstreamPool;
  client: UpstreamClient;
  /** The request body as JSON text, written when the request was prepared (see `serializeRequestBody`). */
  body: string;
  /**
   * Where a text completion goes (`completion-request.ts`): its endpoint's URL from the member's
   * base URL, and how its chunks read. Absent: the member's `/chat/completions`.
   */
  endpoint?: { url: (baseUrl: string) => string; wire: UpstreamWire; perTaskUsage?: boolean };
  choices: number;
  /** The prompt bound `prepare` gave (the estimate's prompt when the upstream never says). */
  promptTokens: number;
  logprobs: boolean;
  /** The kind's field naming the stop string that ended a choice (`Dialect.stopSequenceField`); undefined: it says none. */
  stopSequenceField?: "stop_reason" | "matched_stop";
  /** The request's stop strings (the only ones a finish may name). */
  stop?: readonly string[];
  /** The caller sends nothing before the reply is whole: parts are held per attempt, and a failure mid-answer is retried. */
  buffered: boolean;
  /** The pool's affinity key for this request's prefix (none where the pool has one member). */
  affinity?: string;
  /** Members tried at most, the first included. */
  maxAttempts: number;
  /** Milliseconds from sending the request to the first content before the member counts as failed. */
  firstTokenTimeoutMs: number;
  /** Milliseconds between chunks, once content began, before the stream is ended with an error. */
  idleTimeoutMs: number;
  /** A `retry-after` up to this long is waited out before the next attempt; a longer one is not (default 2 s). */
  maxRetryWaitMs?: number;
  /**
   * Whether the upstream reports usage only at the end (no running counts: `openai`, `sglang`,
   * `ollama`), so a client that leaves a whole reply before the usage chunk is worth reading on
   * for (see the file's comment).
   */
  readUsageAfterLeave?: boolean;
  /** Strings never to show (the API key). */
  secrets: readonly string[];
  onEvent: UpstreamEventSink;
  /** Aborted when the engine closes. */
  closing: AbortSignal;
};

/** Why this engine aborted an attempt itself. */
class AttemptTimeout extends Error {
  readonly phase: "first-token" | "idle";
  constructor(phase: "first-token" | "idle") {
    super(phase === "first-token" ? "no first token in time" : "the stream went idle");
    this.name = "AttemptTimeout";
    this.phase = phase;
  }
}

type AttemptResult = { kind: "done" } | { kind: "retry"; error: ApiError; retryAfterMs?: number };

const NO_PARTS: readonly StreamPart[] = [];

/** The body of an error answer, read up to 64 KiB (an upstream's error page can be large). */
async function readErrorBody(body: AsyncIterable<Uint8Array>): Promise<string> {
  const pieces: Buffer[] = [];
  let size = 0;
  for await (const piece of body) {
    pieces.push(Buffer.from(piece));
    size += piece.length;
    if (size >= 64 * 1024) break;
  }
  return Buffer.concat(pieces).subarray(0, 64 * 1024).toString("utf8");
}

/** The upstream's own words of a verdict, as a log field. */
function upstreamWords(verdict: UpstreamVerdict): { upstream_message?: string } {
  return verdict.upstreamMessage === undefined ? {} : { upstream_message: verdict.upstreamMessage };
}

/** Waits `milliseconds`, or less when `signal` aborts (never rejects): a retry's pause. */
export function sleep(milliseconds: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, milliseconds);
    signal.addEventListener("abort", done, { once: true });
  });
}

/** A lease whose release is idempotent (the first outcome wins). */
function releasing(lease: PoolLease): (outcome: MemberOutcome) => void {
  let released = false;
  return (outcome) => {
    if (released) return;
    released = true;
    lease.release(outcome);
  };
}

/**
 * Starts a generation: the first member is asked for at once (`admitted` resolves when one is
 * lent). Throws `EngineOverloadedError` here, synchronously, when the pool's queue is full.
 */
export function startUpstreamGeneration(options: UpstreamGenerationOptions, signal: AbortSignal, ticket?: QueueTicket): RunningGeneration {
  // Stops on the request's signal or the engine's closing (joined through `abortWith`, not a
  // composite signal: see `abort-group.ts`); unlinked from both once the generation is over.
  const stopper = new AbortController();
  const stop = stopper.signal;
  const onCut = () => stopper.abort(signal.reason);
  if (signal.aborted) onCut();
  else signal.addEventListener("abort", onCut, { once: true });
  const leaveClosing = abortWith(options.closing, stopper);
  let unlinked = false;
  const unlink = () => {
    if (unlinked) return;
    unlinked = true;
    signal.removeEventListener("abort", onCut);
    leaveClosing();
  };
  const tried = new Set<string>();
  const newReader = () =>
    new ChunkReader({
      choices: options.choices,
      promptTokens: options.promptTokens,
      logprobs: options.logprobs,
      ...(options.stopSequenceField !== undefined ? { stopSequenceField: options.stopSequenceField, stop: options.stop ?? [] } : {}),
    });
  let reader = newReader();
  let sent = false;
  let consumed = false;

  // The fair queue charges the account the prompt once a member is lent, then each token as it comes.
  const served = () => options.promptTokens + reader.usage().completionTokens;
  const firstLease = options.pool.acquire({ affinity: options.affinity, exclude: tried, signal: stop, ticket, served });
  // A lease nobody will use (the caller left before reading parts) goes straight back.
  let releaseIfIdle: (() => void) | undefined;
  let releasedIdle = false;
  firstLease.then(
    (lease) => {
      releaseIfIdle = () => {
        if (consumed) return;
        releasedIdle = true;
        lease.release({ kind: "neutral" });
        unlink();
      };
      if (stop.aborted) releaseIfIdle();
      else stop.addEventListener("abort", releaseIfIdle, { once: true });
    },
    // No member was lent (refused, or aborted while waiting): nothing will run.
    unlink,
  );
  const admitted = firstLease.then(() => undefined);
  admitted.catch(() => {});

  async function* attempt(lease: PoolLease, number: number): AsyncGenerator<readonly StreamPart[], AttemptResult> {
    const release = releasing(lease);
    const member = lease.member.id;
    // The first attempt reads with the reader made with the generation; a retry starts afresh.
    if (number > 1) reader = newReader();
    const toChatChunk = options.endpoint === undefined ? undefined : chatChunksOf(options.endpoint.wire, options.choices, options.endpoint.perTaskUsage === true);
    const controller = new AbortController();
    /** Set once the client left a whole reply before its usage came: the stream is read on for the usage only. */
    let draining = false;
    let drainTimer: NodeJS.Timeout | undefined;
    const onClosing = () => controller.abort(options.closing.reason);
    const onStop = () => {
      if (options.readUsageAfterLeave === true && !options.closing.aborted && !done && reader.allFinished && reader.usage().source !== "upstream") {
        draining = true;
        disarm();
        drainTimer = setTimeout(() => controller.abort(new Error("the upstream sent no usage in time after the client left")), USAGE_AFTER_LEAVE_MS);
        options.closing.addEventListener("abort", onClosing, { once: true });
        return;
      }
      controller.abort(stop.reason);
    };
    stop.addEventListener("abort", onStop, { once: true });
    // One timer an attempt, not one an event: `arm` notes the phase and the time, and the timer,
    // when it fires, aborts only if the phase's deadline has passed, else sleeps until it.
    let timer: NodeJS.Timeout | undefined;
    let phase: "first-token" | "idle" = "first-token";
    let since = 0;
    /** When the timer fires (performance.now()); undefined while none is set. */
    let firesAt: number | undefined;
    const deadline = () => since + (phase === "first-token" ? options.firstTokenTimeoutMs : options.idleTimeoutMs);
    const watch = (at: number) => {
      firesAt = at;
      timer = setTimeout(onTimer, Math.max(0, at - performance.now()));
    };
    const onTimer = () => {
      const due = deadline();
      if (performance.now() >= due) controller.abort(new AttemptTimeout(phase));
      else watch(due);
    };
    const disarm = () => {
      clearTimeout(timer);
      firesAt = undefined;
    };
    const arm = (next: "first-token" | "idle") => {
      phase = next;
      since = performance.now();
      const due = deadline();
      // A later deadline is met when the timer fires; an earlier one (a shorter idle timeout) needs it sooner.
      if (firesAt !== undefined && firesAt <= due) return;
      disarm();
      watch(due);
    };
    const startedAt = performance.now();
    /** A buffered request's parts of this attempt, yielded once it succeeded. */
    const held: StreamPart[] | undefined = options.buffered ? [] : undefined;
    /** The reply's last batch: what a buffered attempt held, then each choice's finish. */
    const whole = (): StreamPart[] => (held === undefined ? reader.end() : [...held, ...reader.end()]);
    let firstContentMs: number | undefined;
    let done = false;
    // A refusal thrown from inside the try (an HTTP 4xx) passes the catch untouched.
    let refusal: ApiError | undefined;
    try {
      arm("first-token");
      sent = true;
      const endpoint = options.endpoint;
      const url = endpoint === undefined ? `${lease.member.baseUrl.replace(/\/+$/, "")}/chat/completions` : endpoint.url(lease.member.baseUrl);
      const response = await options.client.streamGeneration(url, options.body, controller.signal);
      if (response.status < 200 || response.status >= 300) {
        const verdict = classifyHttpError(response.status, await readErrorBody(response.body), response.headers, options.secrets);
        release(verdict.outcome);
        // The upstream's own words are for the operator only: the client's error is fixed by the status.
        options.onEvent("warn", `upstream answered HTTP ${response.status}`, { member, status: response.status, ...upstreamWords(verdict) });
        return settle(verdict);
      }
      /** One event read: the parts to give out now, or `stop` (the client left and the usage came). */
      const readEvent = (event: ServerSentEvent): readonly StreamPart[] | "stop" => {
        // What follows [DONE] is drained, not read, so the connection can be kept.
        if (done) return NO_PARTS;
        const read = readServerSentEvent(reader, event, toChatChunk);
        if (read.done) {
          done = true;
          return NO_PARTS;
        }
        // The client left: nobody reads parts any more, only the usage is wanted.
        if (draining) return reader.usage().source === "upstream" ? "stop" : NO_PARTS;
        if (reader.sawContent) {
          firstContentMs ??= performance.now() - startedAt;
          arm("idle");
        }
        if (held === undefined) return read.parts;
        held.push(...read.parts);
        return NO_PARTS;
      };
      // The pieces are decoded as they come, every event of a piece at once (`SseDecoder`), and
      // the parts of a piece's events leave as one batch: an upstream's whole answer often
      // arrives in one piece, and a promise per event (or per part) and layer cost more than
      // reading it. What arrives while draining is bounded.
      const decoder = new SseDecoder();
      let batch: StreamPart[] = [];
      /** Reads events into `batch`; true when reading stops (the usage came after the client left). */
      const readEvents = (events: readonly ServerSentEvent[]): boolean => {
        for (const event of events) {
          const parts = readEvent(event);
          if (parts === "stop") return true;
          for (const part of parts) batch.push(part);
        }
        return false;
      };
      let drained = 0;
      let stopped = false;
      for await (const piece of response.body) {
        if (draining) {
          drained += piece.length;
          if (drained > USAGE_AFTER_LEAVE_BYTES) throw new Error("the upstream sent too much after the client left");
        }
        try {
          stopped = readEvents(decoder.push(piece));
        } finally {
          // What the piece's events before a failure made still goes out, before the failure does.
          if (batch.length > 0) {
            const out = batch;
            batch = [];
            yield out;
          }
        }
        if (stopped) break;
      }
      if (!stopped) {
        try {
          readEvents(decoder.end());
        } finally {
          if (batch.length > 0) yield batch;
        }
      }
      if (draining) {
        // The reply was whole when the client left; the usage came (or the stream ended without it).
        clearTimeout(drainTimer);
        release({ kind: "ok", ...(firstContentMs !== undefined ? { timeToFirstTokenMs: firstContentMs } : {}) });
        const last = reader.cancel();
        if (last.length > 0) yield last;
        return { kind: "done" };
      }
      if (!done && !reader.allFinished) throw new UpstreamProtocolError("The upstream's stream ended before the reply did.");
      done = true;
      disarm();
      release({ kind: "ok", ...(firstContentMs !== undefined ? { timeToFirstTokenMs: firstContentMs } : {}) });
      const last = whole();
      if (last.length > 0) yield last;
      return { kind: "done" };
    } catch (error) {
      disarm();
      if (error === refusal) throw error;
      if (stop.aborted) {
        release({ kind: "neutral" });
        const last = reader.cancel();
        if (last.length > 0) yield last;
        return { kind: "done" };
      }
      if (done) {
        // Only the drain after [DONE] failed: the reply is whole.
        release({ kind: "ok", ...(firstContentMs !== undefined ? { timeToFirstTokenMs: firstContentMs } : {}) });
        const last = whole();
        if (last.length > 0) yield last;
        return { kind: "done" };
      }
      const verdict = classify(error, controller.signal.reason);
      release(verdict.outcome);
      options.onEvent("warn", "upstream attempt failed", {
        member,
        attempt: number,
        failure: verdict.outcome.kind,
        ...("status" in verdict.outcome ? { status: verdict.outcome.status } : {}),
        ...upstreamWords(verdict),
      });
      if (reader.sawContent && held === undefined) {
        // Content is out: no retry, no second voice; the stream ends with the error.
        // An error event says the upstream failed (its words are in the log); a broken connection or stream says so plainly.
        if (error instanceof UpstreamStreamError && verdict.error instanceof UpstreamError) throw verdict.error;
        throw midStreamFailure(controller.signal.reason instanceof AttemptTimeout ? "timeout" : "failure");
      }
      return settle(verdict);
    } finally {
      disarm();
      clearTimeout(drainTimer);
      stop.removeEventListener("abort", onStop);
      options.closing.removeEventListener("abort", onClosing);
      // Closes the upstream request when the consumer stopped early (or anything above threw).
      if (!done) controller.abort(new Error("generation ended"));
      release({ kind: "neutral" });
    }

    function settle(verdict: UpstreamVerdict): AttemptResult {
      if (verdict.action === "refuse") {
        if (verdict.operatorAlert !== undefined) options.onEvent("error", `upstream ${member}: ${verdict.operatorAlert}`, { member });
        refusal = verdict.error;
        throw verdict.error;
      }
      return { kind: "retry", error: verdict.error, ...(verdict.retryAfterMs !== undefined ? { retryAfterMs: verdict.retryAfterMs } : {}) };
    }
  }

  function classify(error: unknown, abortReason: unknown): UpstreamVerdict {
    if (abortReason instanceof AttemptTimeout) {
      return { action: "retry", outcome: { kind: "timeout" }, error: new UpstreamTimeoutError() };
    }
    if (error instanceof UpstreamStreamError) return classifyStreamError(error.payload, options.secrets);
    if (error instanceof UpstreamProtocolError || error instanceof SseProtocolError) {
      return { action: "retry", outcome: { kind: "protocol" }, error: new UpstreamError("The model's upstream server sent a malformed stream. Retry shortly.") };
    }
    if (error instanceof ApiError) return { action: "refuse", outcome: { kind: "neutral" }, error };
    return classifyTransportFailure(error, (message, fields) => options.onEvent("error", message, fields));
  }

  async function* generate(): AsyncGenerator<readonly StreamPart[]> {
    try {
      consumed = true;
      if (releaseIfIdle !== undefined) stop.removeEventListener("abort", releaseIfIdle);
      let lease = await firstLease;
      // Aborted before anyone read: the lease went back already, nothing was sent.
      if (releasedIdle) {
        const last = reader.cancel();
        if (last.length > 0) yield last;
        return;
      }
      const maxWait = options.maxRetryWaitMs ?? 2000;
      for (let number = 1; ; number++) {
        tried.add(lease.member.id);
        const result = yield* attempt(lease, number);
        if (result.kind === "done") return;
        if (number >= options.maxAttempts) throw result.error;
        if (result.retryAfterMs !== undefined && result.retryAfterMs <= maxWait) await sleep(result.retryAfterMs, stop);
        try {
          if (stop.aborted) throw stop.reason;
          lease = await options.pool.acquire({ affinity: options.affinity, exclude: tried, signal: stop, ticket, served });
        } catch (error) {
          if (stop.aborted) {
            const last = reader.cancel();
            if (last.length > 0) yield last;
            return;
          }
          // No member left to try: the failure that brought us here says most.
          throw error instanceof ApiError && error.status === 503 ? result.error : error;
        }
      }
    } finally {
      unlink();
    }
  }

  const usage = (): GenerationUsage => (sent ? reader.usage() : { source: "estimated", promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0 });
  async function* parts(): AsyncGenerator<StreamPart> {
    for await (const batch of generate()) yield* batch;
  }
  return { admitted, parts: { [Symbol.asyncIterator]: parts }, batches: { [Symbol.asyncIterator]: generate }, usage, position: () => firstLease.position?.() ?? 0 };
}
