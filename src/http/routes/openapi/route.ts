/** `GET /openapi.json`: the OpenAPI 3.1 document of `/v1` and `/api`; no key needed. */
import { readFileSync } from "node:fs";
import type { FastifyInstance } from "fastify";
import { buildOpenApiDocument } from "../../../protocol/openapi.ts";

/** The server's version, from package.json. */
function serverVersion(): string {
  const packageJson = JSON.parse(readFileSync(new URL("../../../../package.json", import.meta.url), "utf8")) as { version?: string };
  return packageJson.version ?? "0.0.0";
}

/** Registers `GET /openapi.json`; the document is written once, at the first request. */
export function registerOpenApiRoute(app: FastifyInstance): void {
  let document: string | undefined;
  app.get("/openapi.json", async function openApiDocument(_request, reply) {
    document ??= JSON.stringify(buildOpenApiDocument({ version: serverVersion() }));
    void reply.type("application/json; charset=utf-8");
    return document;
  });
}
