/** `GET /api/models`: the catalog of `/v1/models` for the console, with a session or a key. */
import type { FastifyInstance, preHandlerHookHandler } from "fastify";
import { describeModel, type Catalog } from "../../../catalog/catalog.ts";
import type { ModelList } from "../../../protocol/models.ts";

export type ApiModelsRouteOptions = { catalog: Catalog; authenticate: preHandlerHookHandler };

export function registerApiModelsRoute(app: FastifyInstance, options: ApiModelsRouteOptions): void {
  app.get("/api/models", { preHandler: options.authenticate }, async function listModelsForConsole(): Promise<ModelList> {
    return { object: "list", data: options.catalog.list().map(describeModel) };
  });
}
