/**
 * The lifecycle of one admitted generation request of any dialect, free of Fastify: start the generation, answer with
 * the whole completion or a stream of chunks, then settle once, however it ended: give back the
 * unused rate-limit tokens, charge the hold for what was generated, count metrics, log.
 *
 * How a request ends decides its status and its bill, in one place (`endOf`):
 * - finished: 200, billed;
 * - cut by its client (it left, or stopped reading past the stall timeout): 499, billed for what was generated;
 * - cut by a shutdown: 503, billed for what was generated, the stream ends with the shutdown error;
 * - failed (an engine error, an upstream that broke mid-stream): billed for what the engine counted
 *   (nothing, when it failed before generating), recorded with the error's status; a stream ends
 *   with the dialect's error event after whatever content was already sent, never mixed output.
 * A refusal before anything started (a full queue) is no completion: its hold is released uncharged.
 */
import type { RunningGeneration } from "../../engines/engine.ts";
import type { Metrics } from "../../metrics/metrics.ts";
import type { GenerationOutcome } from "../../protocol/generation.ts";
import { ClientClosedRequestError, ShuttingDownError } from "../../protocol/errors.ts";
import { toApiError } from "../errors.ts";
import type { AdmittedGeneration } from "./admit.ts";
import type { StreamEnding, WireDialect } from "./dialect.ts";
import type { ChunkSink } from "./sink.ts";

export type { ChunkSink } from "./sink.ts";

/** The log methods the run uses (pino's shape). */
export type RunLogger = {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
  error(fields: Record<string, unknown>, message: string): void;
};

export type RunDependencies = {
  metrics: Metrics;
  logger: RunLogger;
  keepAliveIntervalMs: number;
  /** A stream whose client has not read what was sent for this long is cut (billed for what was generated). */
  stallTimeoutMs: number;
};

export type RunInput<Shape> = AdmittedGeneration<Shape> & {
  /**
   * Aborted when the request is cut: by its client (any reason but a `ShuttingDownError`) or by a
   * shutdown (a `ShuttingDownError` reason). The run aborts it too when a stream's client stalls.
   */
  cut: AbortController;
  /** For the completion's log line. */
  keyId: string | undefined;
  /** `performance.now()` when the request arrived. */
  startedAt: number;
  /**
   * The generation runs to its end whatever its stream's client does (a background response
   * streamed): a client that stops reading is dropped, not the generation. Unset: a stalled
   * client cuts the request.
   */
  detached?: boolean;
};

type End = { outcome: GenerationOutcome | undefined; status: number };

/** A cut request's status: 503 when a shutdown stopped it, 499 when its client left. */
function cutStatus(signal: AbortSignal): 499 | 503 {
  return signal.reason instanceof ShuttingDownError ? 503 : 499;
}

/**
 * How a started request ended (see the file's comment): its status and what it is billed. A
 * failure is billed for what the engine counted; a cancelled one for what was generated.
 */
function endOf(signal: AbortSignal, generation: RunningGeneration, outcome: GenerationOutcome | undefined, failure: unknown): End {
  if (failure !== undefined && !signal.aborted) {
    const usage = generation.usage();
    return { outcome: usage.completionTokens > 0 ? { finishReason: "cancelled", usage } : undefined, status: toApiError(failure).status };
  }
  if (signal.aborted) return { outcome: outcome ?? { finishReason: "cancelled", usage: generation.usage() }, status: cutStatus(signal) };
  return { outcome, status: outcome === undefined ? 500 : 200 };
}

/**
 * Gives back the unused rate-limit tokens and settles the hold (nothing billed without usage);
 * resolves once the usage record is queued for the next group commit, which settles a hold of
 * the request's own with it (written first while that commit is late; committed first when the
 * usage cost more than the hold reserved), never waiting through a database outage: the client
 * hears the end after this.
 *
 * The refund is sent now and not waited for (a round trip to Redis off the response path): this
 * node's later charges go to Redis after it on the same connection, which runs a connection's
 * commands in order, so none of them sees the tokens still charged (the in-memory limiter gives
 * them back at once). A refund lost to a crash only leaves the bucket fuller: never more admitted.
 */
async function release(dependencies: RunDependencies, input: RunInput<unknown>, end: End): Promise<void> {
  const { outcome, status } = end;
  const used = outcome === undefined ? 0 : outcome.usage.promptTokens + outcome.usage.completionTokens;
  void input.limited.finish(used).catch((error: unknown) => dependencies.logger.warn({ err: error }, "could not refund rate-limit tokens"));
  // A database outage does not throw here: the charge is retried in the background.
  await input.admission
    .settle({ usage: outcome?.usage ?? null, status, finishReason: outcome?.finishReason ?? null, latencyMs: performance.now() - input.startedAt })
    .catch((error: unknown) => dependencies.logger.error({ err: error }, "could not settle the request's hold; the sweeper will release it uncharged"));
}

/** Resolves when `wait` does or `signal` aborts, whichever comes first. */
function untilAborted(wait: Promise<unknown>, signal: AbortSignal): Promise<unknown> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const onAbort = () => resolve(undefined);
    signal.addEventListener("abort", onAbort, { once: true });
    void wait.then(
      () => resolve(undefined),
      () => resolve(undefined),
    ).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** Bills the request, counts it and logs it as a completion; called once, however a started generation ended. */
async function finish(dependencies: RunDependencies, input: RunInput<unknown>, end: End, dialect: WireDialect<unknown, unknown, unknown>, failure: unknown): Promise<void> {
  await release(dependencies, input, end);
  const logName = dialect.logName;
  if (dialect.settled !== undefined) {
    await dialect.settled(input.job.shape, { outcome: end.outcome, failure, status: end.status }).catch((error: unknown) => dependencies.logger.error({ err: error }, `could not keep the ${logName}`));
  }
  const { job } = input;
  const { outcome } = end;
  const model = job.model.id;
  dependencies.logger.info(
    {
      model,
      stream: job.stream,
      choices: job.prepared.choices,
      key_id: input.keyId,
      status: end.status,
      prompt_tokens: outcome?.usage.promptTokens ?? job.prepared.promptTokens,
      cached_prompt_tokens: outcome?.usage.cachedPromptTokens ?? 0,
      completion_tokens: outcome?.usage.completionTokens ?? 0,
      usage_source: outcome?.usage.source,
      finish_reason: outcome?.finishReason ?? "error",
      latency_ms: Math.round(performance.now() - input.startedAt),
    },
    logName,
  );
  dependencies.metrics.countCompletion(model, outcome?.finishReason ?? "error", outcome?.usage);
}

/** Starts the generation; a refusal before anything started (a full queue: 503) releases the hold uncharged and is rethrown. */
async function start(dependencies: RunDependencies, input: RunInput<unknown>): Promise<RunningGeneration> {
  try {
    const generation = input.job.prepared.start(input.cut.signal, input.ticket);
    // Its progress is checkpointed while it runs: a node killed mid-stream is still billed for it.
    input.admission.track(() => generation.usage());
    return generation;
  } catch (error) {
    await release(dependencies, input, { outcome: undefined, status: toApiError(error).status });
    throw error;
  }
}

/** Waits until the generation has its slot; a refusal meanwhile (no capacity in time, a client gone) releases the hold uncharged and is rethrown. */
async function admittedOrReleased(dependencies: RunDependencies, input: RunInput<unknown>, generation: RunningGeneration): Promise<void> {
  try {
    await generation.admitted;
  } catch (error) {
    const status = input.cut.signal.aborted ? cutStatus(input.cut.signal) : toApiError(error).status;
    await release(dependencies, input, { outcome: undefined, status });
    throw input.cut.signal.aborted && !(input.cut.signal.reason instanceof ShuttingDownError) ? new ClientClosedRequestError() : error;
  }
}

/**
 * Runs a non-streamed request to its end and returns the completion. Throws the typed error of a
 * failure, `ShuttingDownError` for a shutdown and `ClientClosedRequestError` for a client that left
 * (nobody reads that answer; it keeps logs honest).
 */
export async function runCompletion<Shape, Reply>(dependencies: RunDependencies, dialect: WireDialect<Shape, Reply, unknown>, input: RunInput<Shape>): Promise<Reply> {
  const generation = await start(dependencies, input);
  const signal = input.cut.signal;
  let outcome: GenerationOutcome | undefined;
  let failure: unknown;
  try {
    const result = await dialect.complete(input.job.shape, generation);
    outcome = result.outcome;
    if (!signal.aborted) return result.reply;
  } catch (error) {
    failure = error;
    if (!signal.aborted) throw error;
  } finally {
    await finish(dependencies, input, endOf(signal, generation, outcome, failure), dialect as WireDialect<unknown, unknown, unknown>, failure);
  }
  throw signal.reason instanceof ShuttingDownError ? signal.reason : new ClientClosedRequestError();
}

/**
 * Streams a request's chunks into `sink`, following its client: the next part is pulled (and so
 * generated) only once the client has read what was sent, and one that reads nothing for the
 * stall timeout is cut like one that left. `openSink` is called once the generation started: a
 * refusal before (a full queue) throws, and can still be answered as a plain error. After that it
 * never throws: every ending is written to the sink.
 *
 * Billing leads the client: no chunk goes out more than one checkpoint past the last durable one
 * (`Admission.beforeDelivery`), and the ending (`[DONE]`, or the error event) is written only once
 * the request is settled (`release`), so a node killed at any moment has billed every stream at
 * least what its client received less one checkpoint, and recorded every request whose client
 * got `[DONE]` but those of its last group commit.
 */
export async function runStream<Shape, Event>(
  dependencies: RunDependencies,
  dialect: WireDialect<Shape, unknown, Event>,
  input: RunInput<Shape>,
  openSink: () => ChunkSink,
): Promise<void> {
  const generation = await start(dependencies, input);
  // A flex request may yet be refused for want of capacity (429): its stream opens only once it
  // has a slot, so that refusal is still a plain error answer, not an error event after a 200.
  if (input.ticket.tier === "flex") await admittedOrReleased(dependencies, input, generation);
  const sink = openSink();
  const { cut } = input;
  let admitted = false;
  /** While it waits: `queued N`, its place in the model's queue (SSE comments, so proxies keep the stream open). */
  const waitingText = () => {
    const position = generation.position?.() ?? 0;
    return position > 0 ? `queued ${position}` : "waiting for a slot";
  };
  if ((generation.position?.() ?? 0) > 0) sink.comment(waitingText());
  /** The first event went out: a dialect's keep-alive event (Anthropic's `ping`) may follow it. */
  let delivered = false;
  const keepAliveEvent = dialect.keepAliveEvent;
  const stopKeepAlive = sink.keepAlive(
    dependencies.keepAliveIntervalMs,
    () => (admitted ? "generating" : waitingText()),
    keepAliveEvent === undefined ? undefined : () => (delivered ? [keepAliveEvent.name, keepAliveEvent.payload] : undefined),
  );
  const outcome: { value?: GenerationOutcome } = {};
  let failure: unknown;
  let stalled = false;
  /** The stream's last words, written once the request is settled. */
  let ending: StreamEnding | undefined;
  try {
    await generation.admitted;
    admitted = true;
    /** A detached run's client was dropped: the generation goes on, writing nothing. */
    let dropped = false;
    for await (const batch of dialect.stream(input.job.shape, generation, outcome)) {
      if (dropped) continue;
      const checkpoint = input.admission.beforeDelivery(generation.usage().completionTokens);
      if (checkpoint !== undefined) await untilAborted(checkpoint, cut.signal);
      if (Array.isArray(batch)) sink.many((batch as readonly unknown[]).map((event) => [dialect.eventName?.(event as never), event] as const));
      else {
        const name = dialect.eventName?.(batch as never);
        if (name === undefined) sink.data(batch);
        else sink.event(name, batch);
      }
      delivered = true;
      if (!sink.congested) continue;
      if ((await sink.waitForRoom(dependencies.stallTimeoutMs, cut.signal)) !== "stalled") continue;
      if (input.detached === true) {
        // Its client stopped reading: drop it, and generate on (nothing is written to a dropped sink).
        dependencies.logger.warn({ stall_timeout_s: dependencies.stallTimeoutMs / 1000 }, "stream client dropped: it stopped reading; the generation goes on");
        sink.destroy();
        dropped = true;
        continue;
      }
      stalled = true;
      cut.abort(new Error("the client stopped reading"));
      break;
    }
    const reason: unknown = cut.signal.reason;
    if (stalled) {
      dependencies.logger.warn({ stall_timeout_s: dependencies.stallTimeoutMs / 1000, buffered_bytes: sink.buffered }, "stream cut: the client stopped reading");
      sink.destroy();
    } else if (dropped) {
      // Its client was dropped: nobody to hear the last words (the settled hook still keeps the answer).
    } else if (cut.signal.aborted && reason instanceof ShuttingDownError) {
      ending = { kind: "failed", error: reason, outcome: outcome.value };
    } else {
      ending = { kind: "done", outcome: outcome.value };
    }
  } catch (error) {
    failure = error;
    const reason: unknown = cut.signal.reason;
    if (!cut.signal.aborted) dependencies.logger.error({ err: error }, "stream failed");
    ending = { kind: "failed", error: cut.signal.aborted && reason instanceof ShuttingDownError ? reason : error, outcome: outcome.value };
  } finally {
    try {
      await finish(dependencies, input, endOf(cut.signal, generation, outcome.value, failure), dialect as WireDialect<unknown, unknown, unknown>, failure);
    } finally {
      stopKeepAlive();
      if (ending !== undefined) {
        try {
          await dialect.endStream(input.job.shape, sink, ending);
        } catch (error) {
          // The request is settled already; a failure of the dialect's own last step (storing the response) only ends the stream.
          dependencies.logger.error({ err: error }, "could not end the stream");
          sink.end();
        }
      }
    }
  }
}
