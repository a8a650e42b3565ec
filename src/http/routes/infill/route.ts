/**
 * `POST /infill` (and `POST /v1/infill`): llama-server's native fill-in-the-middle endpoint
 * (`dialect.ts`), where editor plugins post (`{endpoint}/infill`), served by the generation
 * core's shared admission, run and reply (`http/generation/route-kit.ts`).
 */
import type { FastifyInstance } from "fastify";
import { generationServing, type GenerationRouteOptions } from "../../generation/route-kit.ts";
import { infillDialect } from "./dialect.ts";

/** The paths `/infill` answers on: llama-server's, and under `/v1` for a client whose endpoint setting ends there. */
export const INFILL_PATHS = ["/infill", "/v1/infill"] as const;

export function registerInfillRoute(app: FastifyInstance, options: GenerationRouteOptions): void {
  const serving = generationServing(options);
  for (const path of INFILL_PATHS) {
    // As chat: the key and, for large bodies, the quota are checked before the body is read.
    app.post(path, { onRequest: serving.onRequest }, async function infill(request, reply) {
      return serving.serve(request, reply, infillDialect);
    });
  }
}
