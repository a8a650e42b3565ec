/**
 * The OpenAPI 3.1 document of `/v1` and `/api` (`GET /openapi.json`), written from a list of
 * operations (each route declares its own, beside its handler: `http/operation.ts`), the zod
 * schemas of each request (through zod's `z.toJSONSchema`, input side) and of each answer (output
 * side), and the error catalog: every operation lists, per status, the error codes it can answer,
 * its own and those its authentication, body and transport bring. The schemas the operations name
 * (`ApiOperation.schemas`) are written once, in `components.schemas`, and referred to with `$ref`
 * (`#/components/schemas/ChatCompletion`). This file knows nothing of HTTP servers: it takes the
 * operations as plain data.
 */
import { z } from "zod";
import { ERROR_CATALOG, ERROR_CODES, type ErrorCode } from "./error-catalog.ts";

/**
 * Who may call an operation:
 * - `none`: anyone (the service routes, sign-in and sign-up);
 * - `key`: an API key of any scope (`/v1`);
 * - `account`: a console session or a key with scope `account` or `admin`;
 * - `admin`: an admin's session, or an admin's key with scope `admin` (or an operator key).
 */
export type OperationAuth = "none" | "key" | "account" | "admin";

/** What the document says of one operation: everything but its handler. */
export type ApiOperation = {
  method: "get" | "post" | "patch" | "delete";
  /** OpenAPI's path form: `/api/keys/{id}`. */
  path: string;
  tag: "Chat" | "Completions" | "Responses" | "Anthropic Messages" | "Embeddings" | "Models" | "Auth" | "Account" | "Keys" | "Usage" | "Billing" | "Admin" | "Service";
  summary: string;
  auth: OperationAuth;
  /** The JSON body's schema, when the route takes one. */
  body?: z.ZodType;
  /** The query string's schema (every value a string on the wire). */
  query?: z.ZodObject;
  /** An example request body (or query), valid against `body` (or `query`). */
  example?: Record<string, unknown>;
  /**
   * The answer when it works. `alsoAnswered`: other statuses that carry the same body (`/ready`'s
   * 503 while a model is not ready); at those statuses the body is this one, not an error.
   */
  success: { status: number; description: string; contentType?: string; alsoAnswered?: Array<{ status: number; description: string }> };
  /** The JSON body of that answer (its output side); absent for text answers (`contentType`). */
  response?: z.ZodType;
  /** For a route that can stream: the JSON `data` of each `text/event-stream` event before `[DONE]`. */
  streamEvent?: z.ZodType;
  /** Codes this operation answers itself, beyond those of its auth and its body. */
  errors: ErrorCode[];
  /**
   * Errors in another shape than OpenAI's (Anthropic's on `/v1/messages`): the component schema
   * of their body (named in `schemas`), and the status each code is answered with there.
   */
  errorShape?: { schema: string; statusOf: (code: ErrorCode) => number };
  /**
   * The names `components.schemas` gives its schemas: its body, its answer (and stream event),
   * and the parts inside them that other schemas share (a plan, a model, a key). The body's name
   * is written from its input side (what a request may send), every other from its output side.
   * Several operations may name the same schema alike; one name for two schemas is refused.
   */
  schemas?: Record<string, z.ZodType>;
};

/** Every path parameter in Turnpike's paths is an id. */
export const PATH_PARAMETER_DESCRIPTION = "The object's id.";

/** A JSON object of the document; OpenAPI is open-ended, so its parts are plain records. */
type Json = Record<string, unknown>;

/** What any request can meet before or around its route: the connection, the host check, shutdown, a crash. */
const TRANSPORT_ERRORS: readonly ErrorCode[] = ["malformed_request", "invalid_url", "request_timeout", "headers_too_large", "host_not_allowed", "shutting_down", "internal_error"];

/** What a JSON body can meet: parsing and the schema. */
const BODY_ERRORS: readonly ErrorCode[] = ["invalid_request_error", "invalid_json", "json_too_deep", "unsupported_media_type", "request_too_large", "server_busy"];

/** What each kind of authentication can answer. */
const AUTH_ERRORS: Record<OperationAuth, readonly ErrorCode[]> = {
  none: [],
  key: ["invalid_api_key", "account_disabled", "database_unavailable"],
  account: ["authentication_required", "invalid_api_key", "account_disabled", "key_scope_exceeded", "database_unavailable"],
  admin: ["authentication_required", "invalid_api_key", "account_disabled", "key_scope_exceeded", "admin_required", "admin_scope_required", "database_unavailable"],
};

/** Every error code `operation` can answer, in the catalog's order. */
export function errorCodesOf(operation: ApiOperation): ErrorCode[] {
  const codes = new Set<ErrorCode>([...TRANSPORT_ERRORS, ...AUTH_ERRORS[operation.auth], ...operation.errors]);
  if (operation.body !== undefined) for (const code of BODY_ERRORS) codes.add(code);
  if (operation.query !== undefined) codes.add("invalid_request_error");
  // A session's state-changing calls must pass the CSRF check.
  if (operation.auth !== "none" && operation.auth !== "key" && operation.method !== "get") codes.add("csrf_failed");
  if (operation.auth === "none" && operation.tag !== "Service") codes.add("database_unavailable");
  // A status the operation answers with its own body is not an error there (`/ready` answers 503 even while stopping).
  const ownStatuses = new Set((operation.success.alsoAnswered ?? []).map((answer) => answer.status));
  return ERROR_CODES.filter((code) => codes.has(code) && !ownStatuses.has(ERROR_CATALOG[code].status));
}

/**
 * A zod schema as JSON Schema 2020-12 (OpenAPI 3.1's dialect), without `$schema`: its input side
 * (what a request may send) or its output side (what an answer holds). Answers are documented
 * as open objects, as OpenAI's are: zod's `additionalProperties: false` for the output side is
 * dropped (clients must ignore fields they do not know), as are the safe-integer bounds of `.int()`.
 */
export function jsonSchemaOf(schema: z.ZodType, io: "input" | "output" = "input"): Json {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, {
    io,
    unrepresentable: "any",
    target: "draft-2020-12",
    override: io === "input" ? undefined : openOutputObject,
  }) as Json;
  return rest;
}

/** The named schemas of one side as `components.schemas` entries, and the name of each zod schema. */
type Components = { schemas: Record<string, Json>; names: Map<z.ZodType, string> };

const COMPONENT_PREFIX = "#/components/schemas/";

/**
 * `table`'s schemas written through one zod registry, so that a named schema inside another is a
 * `$ref` to its component rather than a copy. Cycles would land in zod's `__shared` entry; none
 * of the wire schemas has one, and this refuses to write a document that would need it.
 */
function componentsOf(table: Record<string, z.ZodType>, io: "input" | "output"): Components {
  const registry = z.registry<{ id: string }>();
  const names = new Map<z.ZodType, string>();
  for (const [id, schema] of Object.entries(table)) {
    registry.add(schema, { id });
    names.set(schema, id);
  }
  const { schemas } = z.toJSONSchema(registry, {
    io,
    unrepresentable: "any",
    target: "draft-2020-12",
    uri: (id) => COMPONENT_PREFIX + id,
    override: io === "input" ? undefined : openOutputObject,
  }) as { schemas: Record<string, Json> };
  if (schemas.__shared !== undefined) throw new Error("a component schema refers to itself; name the cycle's schema in its operation's `schemas`");
  // `$id` would make each component its own document (and a fragment-only `$id` is not allowed).
  for (const schema of Object.values(schemas)) {
    delete schema.$schema;
    delete schema.$id;
  }
  return { schemas, names };
}

/** `schema` as a `$ref` to its component when it has one, else written in full. */
function schemaOf(schema: z.ZodType, io: "input" | "output", components: Components): Json {
  const name = components.names.get(schema);
  return name !== undefined ? { $ref: COMPONENT_PREFIX + name } : jsonSchemaOf(schema, io);
}

function openOutputObject(context: { jsonSchema: Json }): void {
  const { jsonSchema } = context;
  if (jsonSchema.additionalProperties === false) delete jsonSchema.additionalProperties;
  if (jsonSchema.minimum === Number.MIN_SAFE_INTEGER) delete jsonSchema.minimum;
  if (jsonSchema.maximum === Number.MAX_SAFE_INTEGER) delete jsonSchema.maximum;
}

/** A stable operationId: the method and the path's words, camel-cased (`postV1ChatCompletions`). */
export function operationIdOf(operation: Pick<ApiOperation, "method" | "path">): string {
  const words = operation.path.split(/[^A-Za-z0-9]+/).filter((word) => word !== "");
  return operation.method + words.map((word) => word[0]!.toUpperCase() + word.slice(1)).join("");
}

function securityOf(auth: OperationAuth): Json[] {
  if (auth === "none") return [];
  if (auth === "key") return [{ apiKey: [] }];
  return [{ apiKey: [] }, { session: [] }];
}

function parametersOf(operation: ApiOperation): Json[] {
  const parameters: Json[] = [];
  for (const match of operation.path.matchAll(/\{([a-z_]+)\}/g)) {
    parameters.push({ name: match[1], in: "path", required: true, description: PATH_PARAMETER_DESCRIPTION, schema: { type: "string" } });
  }
  if (operation.query === undefined) return parameters;
  const schema = jsonSchemaOf(operation.query);
  const properties = (schema.properties ?? {}) as Record<string, Json>;
  const required = new Set((schema.required ?? []) as string[]);
  for (const [name, property] of Object.entries(properties)) {
    const example = operation.example?.[name];
    parameters.push({ name, in: "query", required: required.has(name), schema: property, ...(example !== undefined ? { example } : {}) });
  }
  return parameters;
}

/** The success answer's content: its JSON schema (and a stream's per-event schema), or a string for text. */
function successContentOf(operation: ApiOperation, answers: Components): Json {
  const { success, response, streamEvent } = operation;
  if (success.contentType !== undefined) return { [success.contentType]: { schema: { type: "string" } } };
  return {
    "application/json": { schema: response === undefined ? {} : schemaOf(response, "output", answers) },
    // OpenAPI 3.1 has no schema for one event of a stream; this is the schema of each event's `data`.
    ...(streamEvent !== undefined ? { "text/event-stream": { schema: schemaOf(streamEvent, "output", answers) } } : {}),
  };
}

function responsesOf(operation: ApiOperation, answers: Components): Json {
  const { success } = operation;
  const responses: Json = {
    [String(success.status)]: { description: success.description, content: successContentOf(operation, answers) },
  };
  for (const answer of success.alsoAnswered ?? []) responses[String(answer.status)] = { description: answer.description, content: successContentOf(operation, answers) };
  const byStatus = new Map<number, ErrorCode[]>();
  const shape = operation.errorShape;
  for (const code of errorCodesOf(operation)) {
    const status = shape?.statusOf(code) ?? ERROR_CATALOG[code].status;
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  for (const [status, codes] of [...byStatus].sort(([first], [second]) => first - second)) {
    responses[String(status)] = {
      description: codes.map((code) => `\`${code}\`: ${ERROR_CATALOG[code].meaning}`).join("\n\n"),
      content: {
        "application/json": {
          schema:
            shape !== undefined
              ? { $ref: COMPONENT_PREFIX + shape.schema }
              : { allOf: [{ $ref: "#/components/schemas/ErrorResponse" }, { type: "object", properties: { error: { type: "object", properties: { code: { enum: codes } } } } }] },
        },
      },
      "x-error-codes": codes,
      ...(shape !== undefined ? { "x-error-shape": shape.schema } : {}),
    };
  }
  return responses;
}

/**
 * Moves each error response that several operations give alike (same status, same codes) into
 * `components.responses`, named by its status and codes (`Error401.invalid_api_key`), and leaves
 * a `$ref` in its place; returns those components.
 */
function shareErrorResponses(paths: Record<string, Json>): Record<string, Json> {
  const uses = new Map<string, number>();
  const nameOf = (status: string, response: Json): string | undefined => {
    const codes = response["x-error-codes"] as string[] | undefined;
    const shape = (response["x-error-shape"] as string | undefined) ?? "Error";
    return codes === undefined ? undefined : `${shape}${status}.${codes.join(".")}`;
  };
  const everyResponse = Object.values(paths).flatMap((item) => Object.values(item).flatMap((operation) => Object.entries((operation as Json).responses as Record<string, Json>).map(([status, response]) => ({ responses: (operation as Json).responses as Json, status, response }))));
  for (const { status, response } of everyResponse) {
    const name = nameOf(status, response);
    if (name !== undefined) uses.set(name, (uses.get(name) ?? 0) + 1);
  }
  const shared: Record<string, Json> = {};
  for (const { responses, status, response } of everyResponse) {
    const name = nameOf(status, response);
    if (name === undefined || uses.get(name)! < 2) continue;
    shared[name] = response;
    responses[status] = { $ref: `#/components/responses/${name}` };
  }
  return Object.fromEntries(Object.entries(shared).sort(([first], [second]) => first.localeCompare(second)));
}

function operationObject(operation: ApiOperation, requests: Components, answers: Components): Json {
  const parameters = parametersOf(operation);
  return {
    operationId: operationIdOf(operation),
    tags: [operation.tag],
    summary: operation.summary,
    security: securityOf(operation.auth),
    "x-auth": operation.auth,
    ...(parameters.length > 0 ? { parameters } : {}),
    ...(operation.body !== undefined
      ? {
          requestBody: {
            required: true,
            content: { "application/json": { schema: schemaOf(operation.body, "input", requests), ...(operation.example !== undefined ? { example: operation.example } : {}) } },
          },
        }
      : {}),
    responses: responsesOf(operation, answers),
  };
}

const TAG_DESCRIPTIONS: Record<ApiOperation["tag"], string> = {
  Chat: "OpenAI's Chat Completions.",
  Completions: "OpenAI's legacy text completions, with fill-in-the-middle (`suffix`) on models that have FIM tokens.",
  Responses: "The Responses API (Open Responses): create responses, and read, continue, cancel and delete the stored ones.",
  "Anthropic Messages": "Anthropic's Messages API, for Claude Code and the Anthropic SDKs: the key as `x-api-key` (or `Authorization: Bearer`), errors in Anthropic's shape.",
  Embeddings: "OpenAI's Embeddings: vectors of text or token ids, for the models that serve them.",
  Models: "The catalog.",
  Auth: "Console accounts and sessions.",
  Account: "The signed-in account.",
  Keys: "The account's API keys.",
  Usage: "What the account's requests used and cost. Times are seconds since the epoch.",
  Billing: "Plans, redemption codes and payments.",
  Admin: "For administrators.",
  Service: "Health, readiness, metrics and this document.",
};

/** The schemas `operations` name, by name: bodies (written from their input side) and the rest (output side). */
export type ComponentSchemas = { requests: Record<string, z.ZodType>; answers: Record<string, z.ZodType> };

/**
 * Gathers the names every operation gives its schemas (`ApiOperation.schemas`), in the order they
 * first appear; refuses one name for two schemas, or one schema named on both sides.
 */
export function componentSchemasOf(operations: readonly ApiOperation[]): ComponentSchemas {
  const requests: Record<string, z.ZodType> = {};
  const answers: Record<string, z.ZodType> = {};
  for (const operation of operations) {
    for (const [name, schema] of Object.entries(operation.schemas ?? {})) {
      const side = schema === operation.body ? requests : answers;
      const other = side === requests ? answers : requests;
      const named = side[name] ?? other[name];
      if (named !== undefined && named !== schema) throw new Error(`${operation.method} ${operation.path}: the name '${name}' is given to another schema already`);
      if (other[name] !== undefined) throw new Error(`${operation.method} ${operation.path}: '${name}' is named as a request and as an answer`);
      side[name] = schema;
    }
  }
  return { requests, answers };
}

/** The whole document of `operations`, in their order. `version` is the server's (package.json's). */
export function openApiDocumentOf(operations: readonly ApiOperation[], version: string): Json {
  const paths: Record<string, Json> = {};
  const named = componentSchemasOf(operations);
  const requests = componentsOf(named.requests, "input");
  const answers = componentsOf(named.answers, "output");
  for (const operation of operations) (paths[operation.path] ??= {})[operation.method] = operationObject(operation, requests, answers);
  const errorResponses = shareErrorResponses(paths);
  const tags = [...new Set(operations.map((operation) => operation.tag))].map((name) => ({ name, description: TAG_DESCRIPTIONS[name] }));
  return {
    openapi: "3.1.0",
    info: {
      title: "Turnpike",
      version,
      description:
        "A self-hostable, OpenAI-compatible chat completion service: `/v1` for inference, `/api` for accounts, keys, usage and billing. Every error is `{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`; every time on `/api` is seconds since the epoch.",
    },
    jsonSchemaDialect: "https://json-schema.org/draft/2020-12/schema",
    tags,
    paths,
    components: {
      responses: errorResponses,
      securitySchemes: {
        apiKey: { type: "http", scheme: "bearer", description: "`Authorization: Bearer <key>`." },
        session: { type: "apiKey", in: "cookie", name: "turnpike_session", description: "The console's session; state-changing calls also send `x-csrf-token`." },
      },
      schemas: {
        ...requests.schemas,
        ...answers.schemas,
        ErrorResponse: {
          type: "object",
          required: ["error"],
          properties: {
            error: {
              type: "object",
              required: ["message", "type", "param", "code"],
              properties: {
                message: { type: "string" },
                type: { type: "string", enum: [...new Set(ERROR_CODES.map((code) => ERROR_CATALOG[code].type))] },
                param: { type: ["string", "null"] },
                code: { type: "string", enum: ERROR_CODES },
              },
            },
          },
        },
      },
    },
    "x-error-catalog": ERROR_CODES.map((code) => ({ code, ...ERROR_CATALOG[code] })),
  };
}
