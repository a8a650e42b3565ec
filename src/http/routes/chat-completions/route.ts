/**
 * `POST /v1/chat/completions`: admit (cheap refusals first, see `admit.ts`), call the serving
 * functions, reply with JSON or SSE. A client that goes away aborts its generation; the freed
 * slot serves the next request. A stream follows its client: generation pauses while the socket's
 * buffer is full, and a client that reads nothing for the stall timeout is cut like one that left.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from "fastify";
import type { RunningGeneration } from "../../../engines/engine.ts";
import type { Catalog } from "../../../catalog/catalog.ts";
import { SseWriter } from "../../sse.ts";
import { errorBody, toApiError } from "../../errors.ts";
import type { Metering } from "../../../billing/metering.ts";
import type { RequestLimits } from "../../../limits/request-limits.ts";
import type { Metrics } from "../../../metrics/metrics.ts";
import { ClientClosedRequestError, ShuttingDownError } from "../../../protocol/errors.ts";
import { admitChatCompletion } from "./admit.ts";
import {
  completeChatCompletion,
  streamChatCompletion,
  type ChatCompletionJob,
  type CompletionOutcome,
} from "./serving.ts";

export type ChatCompletionsRouteOptions = {
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
};

/** The status a cut request is recorded with: 503 when a shutdown stopped it, 499 when its client left. */
function cutStatus(signal: AbortSignal): 499 | 503 | undefined {
  if (!signal.aborted) return undefined;
  return signal.reason instanceof ShuttingDownError ? 503 : 499;
}

/** Aborts when the client closes the connection before the response was finished. */
function abortOnDisconnect(reply: FastifyReply, shutdownSignal: AbortSignal): AbortController {
  const controller = new AbortController();
  const onClose = () => {
    if (!reply.raw.writableFinished) controller.abort(new Error("client disconnected"));
  };
  // The client may have gone already, while the request was being admitted (tokenizing, the hold).
  if (reply.raw.destroyed) onClose();
  else reply.raw.on("close", onClose);
  const onShutdown = () => controller.abort(new ShuttingDownError());
  if (shutdownSignal.aborted) onShutdown();
  else shutdownSignal.addEventListener("abort", onShutdown, { once: true });
  controller.signal.addEventListener("abort", () => shutdownSignal.removeEventListener("abort", onShutdown), { once: true });
  reply.raw.on("finish", () => shutdownSignal.removeEventListener("abort", onShutdown));
  return controller;
}

function logCompletion(request: FastifyRequest, job: ChatCompletionJob, outcome: CompletionOutcome | undefined, startedAt: number): void {
  request.log.info(
    {
      model: job.model.id,
      stream: job.stream,
      choices: job.prepared.choices,
      key_id: request.apiKey?.id,
      prompt_tokens: outcome?.usage.promptTokens ?? job.prepared.promptTokens,
      cached_prompt_tokens: outcome?.usage.cachedPromptTokens ?? 0,
      completion_tokens: outcome?.usage.completionTokens ?? 0,
      finish_reason: outcome?.finishReason ?? "error",
      latency_ms: Math.round(performance.now() - startedAt),
    },
    "chat completion",
  );
}

/**
 * Bodies up to this size are read before any quota check: parsing them costs less than the check.
 * Larger ones (up to `--body-limit`) are read only for a key that can pay for something.
 */
const SMALL_BODY_BYTES = 64 * 1024;

export function registerChatCompletionsRoute(app: FastifyInstance, options: ChatCompletionsRouteOptions): void {
  /** Refuses, on the headers alone, a large body from a key that could pay for nothing: reading and parsing it is the work that grows. */
  const refuseUnpaidLargeBody: onRequestHookHandler = async function refuseUnpaidLargeBody(request) {
    const length = Number(request.headers["content-length"]);
    // No length (chunked): as large as the body limit allows.
    if (Number.isFinite(length) && length <= SMALL_BODY_BYTES) return;
    await options.metering.checkCanPayAnything(request.apiKey!, options.catalog.list());
  };
  // The key and, for large bodies, the quota are checked before the body is read: an unknown key
  // or an account without credit never costs the server a parse of megabytes.
  app.post("/v1/chat/completions", { onRequest: [options.authenticate, refuseUnpaidLargeBody] }, async function chatCompletions(request, reply) {
    const startedAt = performance.now();
    // Cheap checks first: permission, rate limits and quota before any schema, grammar, template or tokenizer runs.
    const { job, limited, admission } = await admitChatCompletion(options, {
      body: request.body,
      key: request.apiKey!,
      requestId: request.id,
      onLimited: (admitted) => {
        void reply.headers(admitted.headers);
        request.rateLimitsApplied = true;
      },
      onRefundError: (error) => request.log.warn({ err: error }, "could not refund rate-limit tokens"),
    });
    // The exact charge may have changed the limits' state since they admitted the request.
    void reply.headers(limited.headers);
    /** Gives back the unused rate-limit tokens and settles the hold (nothing billed without usage). */
    const release = async (outcome: CompletionOutcome | undefined, status: number) => {
      const used = outcome === undefined ? 0 : outcome.usage.promptTokens + outcome.usage.completionTokens;
      await limited.finish(used).catch((error: unknown) => request.log.warn({ err: error }, "could not refund rate-limit tokens"));
      // A database outage does not throw here: the charge is retried in the background.
      await admission
        .settle({ usage: outcome?.usage ?? null, status, finishReason: outcome?.finishReason ?? null, latencyMs: performance.now() - startedAt })
        .catch((error: unknown) => request.log.error({ err: error }, "could not settle the request's hold; the sweeper will release it uncharged"));
    };
    /** Bills the request and logs it as a completion; called once, however a started generation ended. */
    const finish = async (outcome: CompletionOutcome | undefined, status: number) => {
      await release(outcome, status);
      logCompletion(request, job, outcome, startedAt);
      const model = job.model.id;
      options.metrics.completions.inc({ model, finish_reason: outcome?.finishReason ?? "error" });
      if (outcome !== undefined) {
        options.metrics.tokens.inc({ model, kind: "prompt" }, outcome.usage.promptTokens);
        options.metrics.tokens.inc({ model, kind: "cached_prompt" }, outcome.usage.cachedPromptTokens);
        options.metrics.tokens.inc({ model, kind: "completion" }, outcome.usage.completionTokens);
      }
    };
    const controller = abortOnDisconnect(reply, options.shutdownSignal);
    let generation: RunningGeneration;
    try {
      // Throws 503 (queue full) before anything is sent: a refusal, counted as one, not a completion.
      generation = job.prepared.start(controller.signal);
    } catch (error) {
      await release(undefined, toApiError(error).status);
      throw error;
    }

    if (!job.stream) {
      let outcome: CompletionOutcome | undefined;
      try {
        const result = await completeChatCompletion(job, generation);
        outcome = result.outcome;
        if (controller.signal.aborted) {
          const reason: unknown = controller.signal.reason;
          if (reason instanceof ShuttingDownError) throw reason;
        }
        return result.completion;
      } catch (error) {
        // Tokens generated before a shutdown are still billed; an engine failure is not.
        if (!controller.signal.aborted) throw error;
        outcome ??= { finishReason: "cancelled", usage: generation.usage() };
        const reason: unknown = controller.signal.reason;
        throw reason instanceof ShuttingDownError ? reason : new ClientClosedRequestError();
      } finally {
        await finish(outcome, outcome === undefined ? 500 : cutStatus(controller.signal) ?? 200);
      }
    }

    reply.hijack();
    const sse = new SseWriter(reply.raw, reply.getHeaders());
    let admitted = false;
    const stopKeepAlive = sse.keepAlive(options.keepAliveIntervalMs, () => (admitted ? "generating" : "waiting for a slot"));
    const outcome: { value?: CompletionOutcome } = {};
    let failed = false;
    let stalled = false;
    try {
      await generation.admitted;
      admitted = true;
      for await (const chunk of streamChatCompletion(job, generation, outcome)) {
        sse.data(chunk);
        // Backpressure: the next part is pulled (and so generated) only once the client has
        // read what was sent; one that stops reading is cut after the stall timeout.
        if (!sse.congested) continue;
        if ((await sse.waitForRoom(options.stallTimeoutMs, controller.signal)) !== "stalled") continue;
        stalled = true;
        controller.abort(new Error("the client stopped reading"));
        break;
      }
      const reason: unknown = controller.signal.reason;
      if (stalled) {
        request.log.warn({ stall_timeout_s: options.stallTimeoutMs / 1000, buffered_bytes: sse.buffered }, "stream cut: the client stopped reading");
        sse.destroy();
      } else if (controller.signal.aborted && reason instanceof ShuttingDownError) {
        sse.data(reason.toBody());
        sse.end();
      } else {
        sse.done();
      }
    } catch (error) {
      failed = !controller.signal.aborted;
      if (failed) request.log.error({ err: error }, "stream failed");
      const reason: unknown = controller.signal.reason;
      sse.data(errorBody(controller.signal.aborted && reason instanceof ShuttingDownError ? reason : error));
      sse.end();
    } finally {
      stopKeepAlive();
      // A failed stream is not billed; one cut by the client or a shutdown pays for what was generated.
      const final = failed ? undefined : (outcome.value ?? (controller.signal.aborted ? { finishReason: "cancelled" as const, usage: generation.usage() } : undefined));
      await finish(final, failed ? 500 : cutStatus(controller.signal) ?? 200);
    }
  });
}
