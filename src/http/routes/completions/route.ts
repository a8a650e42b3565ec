/**
 * `POST /v1/completions`: the text completions dialect (`dialect.ts`) served by the generation
 * core's shared admission, run and reply (`http/generation/route-kit.ts`).
 */
import type { FastifyInstance } from "fastify";
import { generationServing, type GenerationRouteOptions } from "../../generation/route-kit.ts";
import { completionsDialect } from "./dialect.ts";

export function registerCompletionsRoute(app: FastifyInstance, options: GenerationRouteOptions): void {
  const serving = generationServing(options);
  // As chat: the key and, for large bodies, the quota are checked before the body is read.
  app.post("/v1/completions", { onRequest: serving.onRequest }, async function completions(request, reply) {
    return serving.serve(request, reply, completionsDialect);
  });
}
