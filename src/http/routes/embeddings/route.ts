/**
 * `POST /v1/embeddings`: OpenAI's embeddings endpoint over the generation routes' shared hooks
 * and admission (`http/generation/`): the key and, for a large body, whether it could pay for
 * anything, on the headers; then `admit.ts` (cheap refusals first, the hold) and `run.ts` (the
 * vectors, the settlement). A client that goes away aborts the work.
 */
import type { FastifyInstance } from "fastify";
import { generationServing, type GenerationRouteOptions } from "../../generation/route-kit.ts";
import { admitEmbeddings } from "./admit.ts";
import { runEmbeddings } from "./run.ts";

export type EmbeddingsRouteOptions = GenerationRouteOptions;

export function registerEmbeddingsRoute(app: FastifyInstance, options: EmbeddingsRouteOptions): void {
  const serving = generationServing(options);
  app.post("/v1/embeddings", { onRequest: serving.onRequest }, async function createEmbeddings(request, reply) {
    const startedAt = performance.now();
    const admitted = await serving.admitWith(request, reply, (input) => admitEmbeddings(options, input));
    return runEmbeddings({ metrics: options.metrics, logger: request.log }, { ...admitted, cut: serving.cut(reply), keyId: request.apiKey?.id, startedAt });
  });
}
