/** `GET /api/models`: the catalog of `/v1/models` for the console, with a session or a key. */
import type { FastifyInstance, preHandlerHookHandler } from "fastify";
import { describeModel, type Catalog } from "../../../catalog/catalog.ts";
import { modelListSchema, type ModelList } from "../../../protocol/models.ts";
import { defineOperation, registerOperations } from "../../operation.ts";

export type ApiModelsRouteOptions = { catalog: Catalog; authenticate: preHandlerHookHandler };

export const listModelsForConsoleOperation = defineOperation({
  method: "get",
  path: "/api/models",
  tag: "Models",
  summary: "The catalog of `/v1/models`, for a console session.",
  auth: "account",
  success: { status: 200, description: "A list of `model` objects." },
  response: modelListSchema,
  errors: [],
  schemas: { ModelList: modelListSchema },
  async handler(_call, options: ApiModelsRouteOptions): Promise<ModelList> {
    return { object: "list", data: options.catalog.list().map(describeModel) };
  },
});

export function registerApiModelsRoute(app: FastifyInstance, options: ApiModelsRouteOptions): void {
  registerOperations(app, [listModelsForConsoleOperation], { context: options, authenticate: { account: options.authenticate } });
}
