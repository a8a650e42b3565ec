/** `GET /v1/models` and `GET /v1/models/{id}`: the catalog as clients and the console read it. */
import type { FastifyInstance, onRequestHookHandler } from "fastify";
import { describeModel, type Catalog } from "../../../catalog/catalog.ts";
import type { ModelList, ModelObject } from "../../../protocol/models.ts";

export type ModelsRouteOptions = { catalog: Catalog; authenticate: onRequestHookHandler };

export function registerModelsRoutes(app: FastifyInstance, options: ModelsRouteOptions): void {
  app.get("/v1/models", { onRequest: options.authenticate }, async function listModels(): Promise<ModelList> {
    return { object: "list", data: options.catalog.list().map(describeModel) };
  });
  // Ids may hold slashes (`owner/model`), so the rest of the path is the id.
  app.get("/v1/models/*", { onRequest: options.authenticate }, async function retrieveModel(request): Promise<ModelObject> {
    // Fastify has decoded the path already (`%2F` included): decoding again broke ids holding `%`.
    const id = (request.params as { "*": string })["*"];
    return describeModel(options.catalog.get(id));
  });
}
