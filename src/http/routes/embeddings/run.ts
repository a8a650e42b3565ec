/**
 * The lifecycle of one admitted embeddings request, free of Fastify: run it on the engine, answer
 * with the vectors (cut to `dimensions` and normalised again where asked, as numbers or base64),
 * then settle once, however it ended: give back the unused rate-limit tokens, charge the hold for
 * the tokens embedded, count metrics, log.
 *
 * How a request ends decides its status and its bill, as a generation's does (`http/generation/run.ts`):
 * - finished: 200, billed for the tokens the engine embedded (recorded with finish reason `stop`);
 * - cut by its client (499) or a shutdown (503): billed for the inputs embedded before the cut
 *   (`embeddedTokens`: the embedded engine stops between inputs; an upstream's answer cut off is
 *   unknown and not billed), as a cut generation is billed for what it generated;
 * - failed (an engine error, an upstream refusal, a full queue): billed for the inputs embedded
 *   before the failure (none, for a refusal), recorded with the error's status;
 * - vectors made but refused (a `dimensions` the model's length, learnt only from them, cannot give): not billed.
 */
import type { EmbeddingsResult } from "../../../engines/engine.ts";
import type { Metrics } from "../../../metrics/metrics.ts";
import { ClientClosedRequestError, ShuttingDownError } from "../../../protocol/errors.ts";
import type { GenerationUsage } from "../../../protocol/generation.ts";
import { base64Vector, floatVector, shortenVector, type EmbeddingsResponse } from "../../../protocol/embeddings/response.ts";
import { toApiError } from "../../errors.ts";
import type { RunLogger } from "../../generation/run.ts";
import { checkDimensions, type AdmittedEmbeddings, type EmbeddingsJob } from "./admit.ts";

export type EmbeddingsRunDependencies = {
  metrics: Metrics;
  logger: RunLogger;
};

export type EmbeddingsRunInput = AdmittedEmbeddings & {
  /** Aborted when the request is cut: by its client (any reason but a `ShuttingDownError`) or by a shutdown. */
  cut: AbortController;
  /** For the log line. */
  keyId: string | undefined;
  /** `performance.now()` when the request arrived. */
  startedAt: number;
};

/** The answer: one `embedding` object per input, in the inputs' order. Throws a 400 naming `dimensions` when the model's length, learnt only now, cannot give it. */
export function embeddingsReply(job: EmbeddingsJob, result: EmbeddingsResult): EmbeddingsResponse {
  const full = result.vectors[0]?.length;
  checkDimensions(job.model, job.dimensions, full);
  const data = result.vectors.map((vector, index) => {
    const shortened = job.dimensions === undefined ? vector : shortenVector(vector, job.dimensions);
    return { object: "embedding" as const, index, embedding: job.encoding === "base64" ? base64Vector(shortened) : floatVector(shortened) };
  });
  const tokens = result.usage.promptTokens;
  return { object: "list", data, model: job.model.id, usage: { prompt_tokens: tokens, total_tokens: tokens } };
}

/**
 * What an embeddings request is billed, however it ended (see the file's comment): its input
 * tokens and nothing else; null when nothing is billed.
 */
function usageAtEnd(job: EmbeddingsJob, result: EmbeddingsResult | undefined, reply: EmbeddingsResponse | undefined): GenerationUsage | null {
  const of = (promptTokens: number, source: GenerationUsage["source"]): GenerationUsage => ({ promptTokens, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0, source });
  if (reply !== undefined && result !== undefined) return of(result.usage.promptTokens, result.usage.source);
  // Vectors made but refused (a length the model cannot give, learnt only from them) are not billed.
  if (result !== undefined) return null;
  const embedded = job.prepared.embeddedTokens();
  return embedded > 0 ? of(embedded, "counted") : null;
}

/**
 * Runs an admitted request and returns its answer. Throws the typed error of a failure,
 * `ShuttingDownError` for a shutdown and `ClientClosedRequestError` for a client that left.
 */
export async function runEmbeddings(dependencies: EmbeddingsRunDependencies, input: EmbeddingsRunInput): Promise<EmbeddingsResponse> {
  const { job, cut } = input;
  const signal = cut.signal;
  let result: EmbeddingsResult | undefined;
  let reply: EmbeddingsResponse | undefined;
  let failure: unknown;
  try {
    result = await job.prepared.run(signal, input.ticket);
    reply = embeddingsReply(job, result);
  } catch (error) {
    failure = error;
  }
  const status = signal.aborted ? (signal.reason instanceof ShuttingDownError ? 503 : 499) : failure !== undefined ? toApiError(failure).status : 200;
  const usage = usageAtEnd(job, result, reply);
  const used = usage?.promptTokens ?? 0;
  // The refund is not waited for, as a generation's (`release` in `http/generation/run.ts` says why).
  void input.limited.finish(used).catch((error: unknown) => dependencies.logger.warn({ err: error }, "could not refund rate-limit tokens"));
  await input.admission
    .settle({ usage, status, finishReason: usage === null ? null : signal.aborted || failure !== undefined ? "cancelled" : "stop", latencyMs: performance.now() - input.startedAt })
    .catch((error: unknown) => dependencies.logger.error({ err: error }, "could not settle the request's hold; the sweeper will release it uncharged"));
  const model = job.model.id;
  const outcome = status === 200 ? "ok" : signal.aborted ? "cancelled" : "error";
  dependencies.logger.info(
    {
      model,
      inputs: job.request.inputs.length,
      key_id: input.keyId,
      status,
      prompt_tokens: usage?.promptTokens ?? job.prepared.promptTokens,
      usage_source: usage?.source,
      dimensions: reply?.data[0] === undefined ? undefined : (job.dimensions ?? result?.vectors[0]?.length),
      encoding_format: job.encoding,
      latency_ms: Math.round(performance.now() - input.startedAt),
    },
    "embeddings",
  );
  dependencies.metrics.embeddings.inc({ model, outcome });
  if (usage !== null) {
    dependencies.metrics.embeddingInputs.inc({ model }, job.request.inputs.length);
    dependencies.metrics.countTokens(model, "prompt", usage.promptTokens);
  }
  if (signal.aborted) throw signal.reason instanceof ShuttingDownError ? signal.reason : new ClientClosedRequestError();
  if (failure !== undefined) throw failure;
  return reply!;
}
