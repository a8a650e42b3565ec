/** `GET /v1/models` and `GET /v1/models/{id}`: the catalog as clients and the console read it. */
import type { FastifyInstance, onRequestHookHandler } from "fastify";
import { describeModel, type Catalog } from "../../../catalog/catalog.ts";
import { modelListSchema, modelObjectSchema, type ModelList, type ModelObject } from "../../../protocol/models.ts";
import { defineOperation, registerOperations } from "../../operation.ts";

export type ModelsRouteOptions = { catalog: Catalog; authenticate: onRequestHookHandler };

export const listModelsOperation = defineOperation({
  method: "get",
  path: "/v1/models",
  tag: "Models",
  summary: "List the models on offer: context length, modalities, pricing, supported parameters, status.",
  auth: "key",
  success: { status: 200, description: "A list of `model` objects." },
  response: modelListSchema,
  errors: [],
  schemas: { Model: modelObjectSchema, ModelList: modelListSchema },
  async handler(_call, options: ModelsRouteOptions): Promise<ModelList> {
    return { object: "list", data: options.catalog.list().map(describeModel) };
  },
});

export const retrieveModelOperation = defineOperation({
  method: "get",
  path: "/v1/models/{id}",
  // Ids may hold slashes (`owner/model`), so the rest of the path is the id.
  lastParameterTakesRest: true,
  tag: "Models",
  summary: "One model of the catalog.",
  auth: "key",
  success: { status: 200, description: "A `model` object." },
  response: modelObjectSchema,
  errors: ["model_not_found"],
  schemas: { Model: modelObjectSchema },
  async handler({ params }, options: ModelsRouteOptions): Promise<ModelObject> {
    // Fastify has decoded the path already (`%2F` included): decoding again broke ids holding `%`.
    return describeModel(options.catalog.get(params.id));
  },
});

export function registerModelsRoutes(app: FastifyInstance, options: ModelsRouteOptions): void {
  registerOperations(app, [listModelsOperation, retrieveModelOperation], { context: options, authenticate: { key: options.authenticate } });
}
