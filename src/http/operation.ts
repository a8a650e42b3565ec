/**
 * An API operation declared once, beside its handler: its method, path, tag, summary, who may
 * call it, its body or query schema (with an example), its answer's status and schema, the error
 * codes it answers itself, and the handler. `registerOperations` turns operations into Fastify
 * routes with the hooks their `auth` asks for; `/openapi.json` is written from the same objects
 * (`routes/operations.ts` lists them, `protocol/openapi.ts` writes the document), so a route and
 * its documentation cannot drift apart.
 *
 * To add a route (say `POST /v1/responses`):
 * 1. In its folder's `route.ts`, declare it with `defineOperation({ method, path, tag, summary,
 *    auth, body, example, success, response, errors, schemas, handler })`. `path` is OpenAPI's
 *    form (`/v1/responses/{id}`); `schemas` names the body and answer schemas (and the parts
 *    they share) as `components.schemas` shows them; the schemas themselves live in `protocol/`.
 * 2. Export the route's operations, and register them in its `register…` function:
 *    `registerOperations(app, operations, { context: options, authenticate })`.
 * 3. Add them to `API_OPERATIONS` in `routes/operations.ts`, where the document's order is.
 * The OpenAPI tests then hold it to its word: every route the server registers must be
 * documented (and nothing else), its example must pass its schema, and its real answers must
 * pass (and declare every field of) its response schema.
 *
 * A route that needs more than this registers itself (`/v1/chat/completions`: hooks that run on
 * the headers, a body parsed in a worker) and exports its documentation as a plain `ApiOperation`
 * for the list.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler, preHandlerHookHandler, RouteOptions } from "fastify";
import type { z } from "zod";
import type { ApiOperation } from "../protocol/openapi.ts";
import { parseWithSchema } from "../protocol/parse.ts";
import { requireAdmin } from "./middleware/account-auth/account-auth.ts";

/** What a handler is given for one request. */
export type OperationCall<Body, Query> = {
  request: FastifyRequest;
  reply: FastifyReply;
  /**
   * The JSON body parsed with the operation's `body` schema (400 naming the field when it does
   * not pass). Parsed when called, so that a handler may refuse on cheaper grounds first.
   */
  body: () => Body;
  /** The query string parsed with the operation's `query` schema, as `body` is. */
  query: () => Query;
  /** The path's parameters by their name in `path` (`{id}`: `params.id`), decoded. */
  params: Record<string, string>;
};

/** An operation: its documentation and its handler. `Context` is what its route's `register…` function hands every handler. */
export type Operation<Context, Body = unknown, Query = unknown, Answer = unknown> = ApiOperation & {
  /**
   * The last path parameter takes the rest of the URL, slashes included (model ids such as
   * `owner/model`): the route is registered as `/…/*`.
   */
  lastParameterTakesRest?: boolean;
  /**
   * Answers the request: the value returned is sent as JSON with `success.status` (set before
   * the handler runs; a handler may set another, `/ready`'s 503), or the handler sends the
   * answer itself and returns `reply` (Fastify's way: a stream, text already serialized).
   * Method syntax on purpose: a list of operations with different bodies is then one type.
   */
  handler(call: OperationCall<Body, Query>, context: Context): Promise<Answer>;
};

/** The type a schema parses to, or `unknown` for a part the operation does not declare. */
type Parsed<Schema> = Schema extends z.ZodType ? z.output<Schema> : unknown;

/**
 * Declares an operation; the types of `body()`, `query()` and of the handler's answer follow
 * from the schemas given (an answer that does not fit `response` does not type-check).
 */
export function defineOperation<Context, BodySchema extends z.ZodType | undefined = undefined, QuerySchema extends z.ZodObject | undefined = undefined, ResponseSchema extends z.ZodType | undefined = undefined>(
  operation: ApiOperation & {
    body?: BodySchema;
    query?: QuerySchema;
    response?: ResponseSchema;
    lastParameterTakesRest?: boolean;
    handler(call: OperationCall<Parsed<BodySchema>, Parsed<QuerySchema>>, context: Context): Promise<(ResponseSchema extends z.ZodType ? z.output<ResponseSchema> : unknown) | FastifyReply>;
  },
): Operation<Context, Parsed<BodySchema>, Parsed<QuerySchema>> {
  return operation as Operation<Context, Parsed<BodySchema>, Parsed<QuerySchema>>;
}

/** The hooks that authenticate: an operation's `auth` picks one. */
export type OperationAuthHooks = {
  /** For `key`: an API key (`apiKeyAuth`), checked on the headers before the body is read. */
  key?: onRequestHookHandler;
  /** For `account` and `admin`: a console session or a key (`accountAuth`); `admin` then requires an admin. */
  account?: preHandlerHookHandler;
};

/** Refuses a caller who is not an admin (after `accountAuth`). */
async function adminOnly(request: FastifyRequest): Promise<void> {
  requireAdmin(request);
}

/** Fastify's hooks for an operation's `auth`. */
function authHooksOf(operation: ApiOperation, authenticate: OperationAuthHooks): Pick<RouteOptions, "onRequest" | "preHandler"> {
  const missing = () => new Error(`${operation.method} ${operation.path}: its auth is '${operation.auth}' but no hook for it was given`);
  switch (operation.auth) {
    case "none":
      return {};
    case "key":
      if (authenticate.key === undefined) throw missing();
      return { onRequest: authenticate.key };
    case "account":
      if (authenticate.account === undefined) throw missing();
      return { preHandler: authenticate.account };
    case "admin":
      if (authenticate.account === undefined) throw missing();
      return { preHandler: [authenticate.account, adminOnly] };
  }
}

/** Fastify's form of an OpenAPI path: `{id}` becomes `:id` (or `*` when it takes the rest of the URL). */
function fastifyPathOf(operation: Pick<Operation<never>, "path" | "lastParameterTakesRest">): string {
  const path = operation.lastParameterTakesRest === true ? operation.path.replace(/\{[a-z_]+\}$/, "*") : operation.path;
  return path.replace(/\{([a-z_]+)\}/g, ":$1");
}

/** The path's parameters by their OpenAPI names (Fastify calls the rest of the URL `*`). */
function paramsOf(operation: Operation<never>, request: FastifyRequest): Record<string, string> {
  const params = { ...(request.params as Record<string, string>) };
  const rest = params["*"];
  if (operation.lastParameterTakesRest === true && rest !== undefined) {
    delete params["*"];
    const name = /\{([a-z_]+)\}$/.exec(operation.path)?.[1];
    if (name !== undefined) params[name] = rest;
  }
  return params;
}

/**
 * Registers `operations` as routes of `app`: each with the hooks of its `auth`, its handler given
 * `context` and its success status.
 */
export function registerOperations<Context>(app: FastifyInstance, operations: ReadonlyArray<Operation<Context>>, options: { context: Context; authenticate?: OperationAuthHooks }): void {
  for (const operation of operations) {
    const { body, query } = operation;
    app.route({
      method: operation.method.toUpperCase() as "GET" | "POST" | "PATCH" | "DELETE",
      url: fastifyPathOf(operation),
      ...authHooksOf(operation, options.authenticate ?? {}),
      handler: async function handleOperation(request, reply) {
        void reply.code(operation.success.status);
        const call: OperationCall<unknown, unknown> = {
          request,
          reply,
          body: () => (body === undefined ? request.body : parseWithSchema(body, request.body)),
          query: () => (query === undefined ? request.query : parseWithSchema(query, request.query ?? {})),
          params: paramsOf(operation as Operation<never>, request),
        };
        return operation.handler(call, options.context);
      },
    });
  }
}
