/**
 * `GET /v1/models` and `GET /v1/models/{id}`: the catalog as clients and the console read it. A
 * request carrying `anthropic-version` (Claude Code's model discovery, the Anthropic SDKs'
 * `models.list`) is answered in Anthropic's shape, a page at a time.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from "fastify";
import { z } from "zod";
import { describeModel, type Catalog, type CatalogModel } from "../../../catalog/catalog.ts";
import {
  anthropicModelListSchema,
  anthropicModelSchema,
  modelListSchema,
  modelObjectSchema,
  type AnthropicModel,
  type AnthropicModelList,
  type ModelList,
  type ModelObject,
} from "../../../protocol/models.ts";
import { defineOperation, registerOperations } from "../../operation.ts";

/** Whether the request speaks Anthropic's API (its SDKs and Claude Code always send `anthropic-version`). */
function speaksAnthropic(request: FastifyRequest): boolean {
  return request.headers["anthropic-version"] !== undefined;
}

/** A catalog model as Anthropic lists it. */
function anthropicModelOf(model: CatalogModel): AnthropicModel {
  return { type: "model", id: model.id, display_name: model.id, created_at: new Date(model.created * 1000).toISOString() };
}

/** Anthropic's paging: `limit` (1 to 1000, 20 by default), after or before an id. Ignored in OpenAI's shape. */
const anthropicPageQuery = z.object({
  limit: z
    .string()
    .regex(/^([1-9]\d{0,2}|1000)$/, { error: "Expected a number from 1 to 1000." })
    .optional()
    .describe("With `anthropic-version`: models per page, 1 to 1000 (default 20)."),
  after_id: z.string().max(256).optional().describe("With `anthropic-version`: the page after this model id."),
  before_id: z.string().max(256).optional().describe("With `anthropic-version`: the page before this model id."),
});

/** One page of the catalog in Anthropic's shape (an id not in the catalog pages from the start or the end). */
function anthropicPage(models: readonly CatalogModel[], query: z.output<typeof anthropicPageQuery>): AnthropicModelList {
  const limit = query.limit === undefined ? 20 : Number(query.limit);
  let start = 0;
  let end = models.length;
  if (query.after_id !== undefined) start = models.findIndex((model) => model.id === query.after_id) + 1;
  else if (query.before_id !== undefined) {
    const before = models.findIndex((model) => model.id === query.before_id);
    end = before === -1 ? models.length : before;
    start = Math.max(0, end - limit);
  }
  const data = models.slice(start, Math.min(end, start + limit)).map(anthropicModelOf);
  const hasMore = query.before_id !== undefined ? start > 0 : start + data.length < end;
  return { data, has_more: hasMore, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null };
}

export type ModelsRouteOptions = { catalog: Catalog; authenticate: onRequestHookHandler };

export const listModelsOperation = defineOperation({
  method: "get",
  path: "/v1/models",
  tag: "Models",
  summary:
    "List the models on offer: context length, modalities, pricing, supported parameters, endpoints, status. With an `anthropic-version` header (Claude Code, the Anthropic SDKs; the key may come as `x-api-key`), Anthropic's list instead, a page at a time.",
  auth: "key",
  query: anthropicPageQuery,
  example: { limit: "20" },
  success: { status: 200, description: "A list of `model` objects (with `anthropic-version`: Anthropic's page of models)." },
  // OpenAI's list; Anthropic's (`AnthropicModelList`) to `anthropic-version`.
  response: modelListSchema,
  errors: [],
  schemas: { Model: modelObjectSchema, ModelList: modelListSchema, AnthropicModel: anthropicModelSchema, AnthropicModelList: anthropicModelListSchema },
  async handler(call, options: ModelsRouteOptions): Promise<ModelList | FastifyReply> {
    if (speaksAnthropic(call.request)) return call.reply.send(anthropicPage(options.catalog.list(), call.query()));
    return { object: "list", data: options.catalog.list().map(describeModel) };
  },
});

export const retrieveModelOperation = defineOperation({
  method: "get",
  path: "/v1/models/{id}",
  // Ids may hold slashes (`owner/model`), so the rest of the path is the id.
  lastParameterTakesRest: true,
  tag: "Models",
  summary: "One model of the catalog (in Anthropic's shape with an `anthropic-version` header).",
  auth: "key",
  success: { status: 200, description: "A `model` object." },
  response: modelObjectSchema,
  errors: ["model_not_found"],
  schemas: { Model: modelObjectSchema, AnthropicModel: anthropicModelSchema },
  async handler({ params, request, reply }, options: ModelsRouteOptions): Promise<ModelObject | FastifyReply> {
    // Fastify has decoded the path already (`%2F` included): decoding again broke ids holding `%`.
    const model = options.catalog.get(params.id);
    return speaksAnthropic(request) ? reply.send(anthropicModelOf(model)) : describeModel(model);
  },
});

export function registerModelsRoutes(app: FastifyInstance, options: ModelsRouteOptions): void {
  registerOperations(app, [listModelsOperation, retrieveModelOperation], { context: options, authenticate: { key: options.authenticate } });
}
