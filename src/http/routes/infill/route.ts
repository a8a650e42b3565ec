/**
 * `POST /infill` (and `POST /v1/infill`): llama-server's native fill-in-the-middle endpoint
 * (`dialect.ts`), where editor plugins post (`{endpoint}/infill`), served by the generation
 * core's shared admission, run and reply (`http/generation/route-kit.ts`).
 */
import type { FastifyInstance } from "fastify";
import { generationServing, type GenerationRouteOptions } from "../../generation/route-kit.ts";
import type { CatalogModel } from "../../../catalog/catalog.ts";
import { infillDialect, parseInfill } from "./dialect.ts";

/** The paths `/infill` answers on: llama-server's, and under `/v1` for a client whose endpoint setting ends there. */
export const INFILL_PATHS = ["/infill", "/v1/infill"] as const;

export function registerInfillRoute(app: FastifyInstance, options: GenerationRouteOptions): void {
  const serving = generationServing(options);
  for (const path of INFILL_PATHS) {
    // As chat: the key and, for large bodies, the quota are checked before the body is read.
    app.post(path, { onRequest: serving.onRequest }, async function infill(request, reply) {
      const body = request.body as { model?: unknown } | null;
      const named = typeof body === "object" && body !== null && typeof body.model === "string" && body.model.trim() !== "";
      if (named) return serving.serve(request, reply, infillDialect);
      // Editor plugins name no model: the one that fills in the middle among those this key and its plan may use.
      const key = request.apiKey!;
      const { plan } = await options.metering.standingOf(key);
      const usable = (model: CatalogModel) => {
        try {
          options.metering.checkModel(key, plan, model);
          return true;
        } catch {
          return false;
        }
      };
      return serving.serve(request, reply, { ...infillDialect, parse: (catalog, parsed) => parseInfill(catalog, parsed, usable) });
    });
  }
}
