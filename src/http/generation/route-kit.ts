/**
 * What every generation route shares, over its dialect: the checks on the headers (the key, and
 * for a large body whether it could pay for anything), admission (`admit.ts`, cheap refusals
 * first), the run (`run.ts`: start, answer, settle) and the reply with JSON or SSE. A client that
 * goes away aborts its generation; the freed slot serves the next request. A stream follows its
 * client: generation pauses while the socket's buffer is full, and a client that reads nothing for
 * the stall timeout is cut like one that left.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from "fastify";
import type { Catalog } from "../../catalog/catalog.ts";
import { SseWriter } from "../sse.ts";
import type { Metering } from "../../billing/metering.ts";
import type { LimitAdmission, RequestLimits } from "../../limits/request-limits.ts";
import type { Metrics } from "../../metrics/metrics.ts";
import { abortWith } from "../../engines/abort-group.ts";
import type { ImageUrlGuard } from "../image-urls/image-url-guard.ts";
import { admitGeneration, type AdmitRequest, type AdmittedGeneration } from "./admit.ts";
import type { WireDialect } from "./dialect.ts";
import { runCompletion, runStream, type RunDependencies } from "./run.ts";

export type GenerationRouteOptions = {
  catalog: Catalog;
  /** Runs on the headers alone, before the body is read. */
  authenticate: onRequestHookHandler;
  metering: Metering;
  limits: RequestLimits;
  metrics: Metrics;
  /** Aborted when shutdown's grace period is over: running generations stop. */
  shutdownSignal: AbortSignal;
  keepAliveIntervalMs: number;
  /** A stream whose client has not read what was sent for this long is cut (billed for what was generated). */
  stallTimeoutMs: number;
  /** Which image URLs may go upstream (`--image-urls`); the default policy when absent. */
  imageUrls?: ImageUrlGuard;
  /** How long a `flex` request may wait for capacity (`--flex-max-wait`, in milliseconds); 30 s when absent. */
  flexMaxWaitMs?: number;
};

/** Aborts when the client closes the connection before the response was finished. */
function abortOnDisconnect(reply: FastifyReply, shutdownSignal: AbortSignal): AbortController {
  const controller = new AbortController();
  // Cut by the shutdown (its reason is a `ShuttingDownError`) until the response is over; joined
  // through `abortWith`, one listener for all requests rather than one each.
  const leave = abortWith(shutdownSignal, controller);
  const onClose = () => {
    leave();
    if (!reply.raw.writableFinished) controller.abort(new Error("client disconnected"));
  };
  // The client may have gone already, while the request was being admitted (tokenizing, the hold).
  if (reply.raw.destroyed) onClose();
  else reply.raw.once("close", onClose);
  return controller;
}

/**
 * Bodies up to this size are read before any quota check: parsing them costs less than the check.
 * Larger ones (up to `--body-limit`) are read only for a key that can pay for something.
 */
const SMALL_BODY_BYTES = 64 * 1024;

/** The hooks and the handler every generation route registers. */
export type GenerationServing = {
  /** The key on the headers, then (for a large body) whether it could pay for anything: before the body is read. */
  onRequest: onRequestHookHandler[];
  /** Admits the request under its dialect: a typed API error for a refusal (with the rate-limit headers once they admitted it). */
  admit<Shape>(request: FastifyRequest, reply: FastifyReply, parse: WireDialect<Shape, unknown, unknown>["parse"]): Promise<AdmittedGeneration<Shape>>;
  /**
   * Admits a request of another kind than a generation (embeddings) the same way: `admitting`
   * runs the admission (`admitInOrder`) with the request's key, its count on the headers and the
   * rate-limit headers' hook; the headers are written as `admit` writes them.
   */
  admitWith<Admitted extends { limited: LimitAdmission }>(request: FastifyRequest, reply: FastifyReply, admitting: (input: AdmitRequest) => Promise<Admitted>): Promise<Admitted>;
  /** Aborted when the request's client leaves before its answer was finished, or when shutdown's grace period is over (a `ShuttingDownError` reason). */
  cut(reply: FastifyReply): AbortController;
  /** The run's dependencies, with the request's logger. */
  runDependencies(request: FastifyRequest): RunDependencies;
  /**
   * Runs an admitted request and replies: JSON, or SSE once the generation started (a refusal
   * before is an ordinary error response). A client that goes away cuts it.
   */
  answer<Shape, Reply, Event>(request: FastifyRequest, reply: FastifyReply, dialect: WireDialect<Shape, Reply, Event>, admitted: AdmittedGeneration<Shape>, startedAt: number): Promise<Reply | undefined>;
  /** Admits, runs and replies: JSON, or SSE once the generation started (a refusal before is an ordinary error response). */
  serve<Shape, Reply, Event>(request: FastifyRequest, reply: FastifyReply, dialect: WireDialect<Shape, Reply, Event>): Promise<Reply | undefined>;
};

/**
 * Takes the reply over for a stream: called once the generation started, so that a refusal
 * before (a full queue) is still an ordinary error response.
 */
export function openSse(reply: FastifyReply): SseWriter {
  reply.hijack();
  return new SseWriter(reply.raw, reply.getHeaders());
}

export function generationServing(options: GenerationRouteOptions): GenerationServing {
  /** Requests counted against the requests-per-minute limits on their headers: admission counts them no more. */
  const countedOnHeaders = new WeakSet<FastifyRequest>();
  /**
   * Refuses, on the headers alone, a large body from a key that could pay for nothing or is over
   * its requests per minute: reading and parsing it is the work that grows. The request is counted
   * against those limits here, once (admission charges its tokens only).
   */
  // Synchronous (no promise) for a small body, which is most requests.
  const refuseUnpaidLargeBody: onRequestHookHandler = function refuseUnpaidLargeBody(request, _reply, done) {
    const length = Number(request.headers["content-length"]);
    // No length (chunked): as large as the body limit allows.
    if (Number.isFinite(length) && length <= SMALL_BODY_BYTES) return done();
    const key = request.apiKey!;
    const check = async () => {
      await options.metering.checkCanPayAnything(key, options.catalog.list());
      // Charges nothing where no requests-per-minute limit applies (an operator key's plan is null, no query).
      await options.limits.countRequest({ key, plan: await options.metering.planOf(key) });
      countedOnHeaders.add(request);
    };
    check().then(
      () => done(),
      (error: unknown) => done(error as Error),
    );
  };
  const admitWith: GenerationServing["admitWith"] = async (request, reply, admitting) => {
    // Cheap checks first: permission, rate limits and quota before any schema, grammar, template or tokenizer runs.
    let limited: LimitAdmission | undefined;
    try {
      const admitted = await admitting({
        body: request.body,
        key: request.apiKey!,
        requestId: request.id,
        requestCounted: countedOnHeaders.has(request),
        onLimited: (admittedByLimits) => {
          limited = admittedByLimits;
          request.rateLimitsApplied = true;
        },
        onRefundError: (error) => request.log.warn({ err: error }, "could not refund rate-limit tokens"),
      });
      // Written once, after the exact charge: the state the request leaves the limits in.
      void reply.headers(admitted.limited.headers);
      return admitted;
    } catch (error) {
      // A refusal after the limits admitted the request (a 400, no quota) reports their state too.
      if (limited !== undefined) void reply.headers(limited.headers);
      throw error;
    }
  };
  const admit: GenerationServing["admit"] = (request, reply, parse) => admitWith(request, reply, (input) => admitGeneration(options, input, parse));
  const runDependencies = (request: FastifyRequest): RunDependencies => ({
    metrics: options.metrics,
    logger: request.log,
    keepAliveIntervalMs: options.keepAliveIntervalMs,
    stallTimeoutMs: options.stallTimeoutMs,
  });
  const answer: GenerationServing["answer"] = async (request, reply, dialect, admitted, startedAt) => {
    const input = { ...admitted, cut: abortOnDisconnect(reply, options.shutdownSignal), keyId: request.apiKey?.id, startedAt };
    const dependencies = runDependencies(request);
    if (!admitted.job.stream) return runCompletion(dependencies, dialect, input);
    await runStream(dependencies, dialect, input, () => openSse(reply));
    return undefined;
  };
  return {
    onRequest: [options.authenticate, refuseUnpaidLargeBody],
    admit,
    admitWith,
    cut: (reply) => abortOnDisconnect(reply, options.shutdownSignal),
    runDependencies,
    answer,
    async serve(request, reply, dialect) {
      const startedAt = performance.now();
      return answer(request, reply, dialect, await admit(request, reply, dialect.parse), startedAt);
    },
  };
}
