/** `GET /openapi.json`: the OpenAPI 3.1 document of `/v1` and `/api`; no key needed. */
import { readFileSync } from "node:fs";
import type { FastifyInstance } from "fastify";
import { openApiDocumentOf, type ApiOperation } from "../../../protocol/openapi.ts";
import { openApiDocumentSchema } from "../../../protocol/service.ts";
import { defineOperation, registerOperations } from "../../operation.ts";

export type OpenApiRouteOptions = {
  /** The operations the document describes (`API_OPERATIONS`), in its order. */
  operations: readonly ApiOperation[];
};

/** The server's version, from package.json. */
export function serverVersion(): string {
  const packageJson = JSON.parse(readFileSync(new URL("../../../../package.json", import.meta.url), "utf8")) as { version?: string };
  return packageJson.version ?? "0.0.0";
}

/** The document, written once, at the first request, per registration. */
type OpenApiContext = OpenApiRouteOptions & { document?: string };

export const openApiOperation = defineOperation({
  method: "get",
  path: "/openapi.json",
  tag: "Service",
  summary: "This document.",
  auth: "none",
  success: { status: 200, description: "An OpenAPI 3.1 document of `/v1` and `/api`." },
  response: openApiDocumentSchema,
  errors: [],
  schemas: { OpenApiDocument: openApiDocumentSchema },
  async handler({ reply }, context: OpenApiContext) {
    context.document ??= JSON.stringify(openApiDocumentOf(context.operations, serverVersion()));
    // Already JSON: sent as it is.
    return reply.type("application/json; charset=utf-8").send(context.document);
  },
});

/** Registers `GET /openapi.json`, the document of `options.operations`. */
export function registerOpenApiRoute(app: FastifyInstance, options: OpenApiRouteOptions): void {
  registerOperations(app, [openApiOperation], { context: { operations: options.operations } });
}
