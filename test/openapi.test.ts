/**
 * `GET /openapi.json` against a running server: every route the server registers is in the
 * document (and nothing else), the document has OpenAPI 3.1's shape, its JSON Schemas compile,
 * its examples validate against both the document's schema and the route's zod schema, and
 * its answers' schemas compile (`openapi-responses.test.ts` checks real answers against them).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { startTestServer, type TestServer } from "./helpers/server.ts";
import { API_OPERATIONS } from "../src/http/routes/operations.ts";
import { ERROR_CATALOG, isErrorCode } from "../src/protocol/error-catalog.ts";
import { errorsOf, resolved, validatorIn } from "./helpers/openapi.ts";

/** Fastify's route form to OpenAPI's: `:id` and a trailing wildcard become `{id}`. */
function openApiPath(url: string): string {
  return url.replace(/:([A-Za-z_]+)/g, "{$1}").replace(/\/\*$/, "/{id}");
}

/** Routes that are not part of the API: the console's static files (and Fastify's HEAD twins of GETs). */
function isApiRoute(route: { method: string; url: string }): boolean {
  return route.method !== "HEAD" && route.url !== "/" && route.url !== "/*";
}

describe("GET /openapi.json", () => {
  let test: TestServer;
  let document: any;
  before(async () => {
    test = await startTestServer();
    const response = await fetch(`${test.url}/openapi.json`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get("content-type") ?? "", /^application\/json/);
    document = await response.json();
  });
  after(async () => {
    await test.close();
  });

  it("documents every route the server registers, and only those", () => {
    const registered = new Set(
      test.server.app
        .routes()
        .filter(isApiRoute)
        .map((route) => `${route.method.toLowerCase()} ${openApiPath(route.url)}`),
    );
    assert.ok(registered.has("post /v1/chat/completions") && registered.has("delete /api/keys/{id}"), [...registered].join(", "));
    const documented = new Set(Object.entries<any>(document.paths).flatMap(([path, item]) => Object.keys(item).map((method) => `${method} ${path}`)));
    for (const route of registered) assert.ok(documented.has(route), `${route} is served but not in /openapi.json`);
    for (const route of documented) assert.ok(registered.has(route), `${route} is in /openapi.json but not served`);
  });

  it("has the shape of an OpenAPI 3.1 document", () => {
    assert.match(document.openapi, /^3\.1\.\d+$/);
    assert.equal(typeof document.info.title, "string");
    assert.equal(typeof document.info.version, "string");
    const tags = new Set(document.tags.map((tag: { name: string }) => tag.name));
    const operationIds = new Set<string>();
    for (const [path, item] of Object.entries<any>(document.paths)) {
      assert.match(path, /^\//);
      const pathParameters = [...path.matchAll(/\{([a-z_]+)\}/g)].map((match) => match[1]);
      for (const [method, operation] of Object.entries<any>(item)) {
        assert.ok(["get", "post", "put", "patch", "delete"].includes(method), method);
        assert.ok(!operationIds.has(operation.operationId), `duplicate operationId ${operation.operationId}`);
        operationIds.add(operation.operationId);
        assert.ok(operation.tags.every((tag: string) => tags.has(tag)), `${method} ${path}: undeclared tag`);
        assert.ok(operation.summary.length > 0);
        for (const parameter of operation.parameters ?? []) {
          assert.ok(["path", "query", "header", "cookie"].includes(parameter.in));
          assert.equal(typeof parameter.name, "string");
          assert.ok(parameter.schema !== undefined);
        }
        assert.deepEqual(
          (operation.parameters ?? []).filter((parameter: any) => parameter.in === "path").map((parameter: any) => parameter.name),
          pathParameters,
          `${method} ${path}: path parameters`,
        );
        for (const requirement of operation.security) for (const scheme of Object.keys(requirement)) assert.ok(document.components.securitySchemes[scheme], scheme);
        const statuses = Object.keys(operation.responses);
        assert.ok(statuses.some((status) => status.startsWith("2")), `${method} ${path}: no success response`);
        const declared = API_OPERATIONS.find((candidate) => candidate.path === path && candidate.method === method)!;
        for (const status of statuses) {
          assert.match(status, /^[1-5]\d\d$/);
          const response = resolved(document, operation.responses[status]);
          assert.equal(typeof response.description, "string");
          for (const code of response["x-error-codes"] ?? []) {
            assert.ok(isErrorCode(code), `${method} ${path}: '${code}' is not in the catalog`);
            // A route that answers in another shape (Anthropic's) answers some codes with that API's status.
            assert.equal(String(declared.errorShape?.statusOf(code) ?? ERROR_CATALOG[code].status), status, `${method} ${path}: '${code}' under ${status}`);
          }
          const ownBody = declared.success.alsoAnswered?.some((answer) => String(answer.status) === status);
          if (Number(status) >= 400 && !ownBody) assert.ok(response["x-error-codes"]?.length > 0, `${method} ${path} ${status}: no codes`);
        }
      }
    }
    // Every $ref points into the document.
    const refs = JSON.stringify(document).match(/"\$ref":"[^"]+"/g) ?? [];
    for (const ref of refs) {
      const pointer = ref.slice(8, -1);
      assert.match(pointer, /^#\//);
      const target = pointer
        .slice(2)
        .split("/")
        .reduce((node: any, segment) => node?.[segment.replaceAll("~1", "/").replaceAll("~0", "~")], document);
      assert.ok(target !== undefined, `${pointer} resolves`);
    }
  });

  it("carries JSON Schemas that compile in the document (refs to its components resolve), requests' and answers', errors' too, and examples that pass them and the routes' zod schemas", () => {
    let examples = 0;
    for (const [path, item] of Object.entries<any>(document.paths)) {
      for (const [method, operation] of Object.entries<any>(item)) {
        const json = operation.requestBody?.content?.["application/json"];
        if (json !== undefined) {
          const validate = validatorIn(document, json.schema);
          if (json.example !== undefined) {
            examples++;
            assert.ok(validate(json.example), `${method} ${path}: ${errorsOf(validate)}`);
            const zodSchema = API_OPERATIONS.find((operation) => operation.path === path && operation.method === method)!.body!;
            assert.ok(zodSchema.safeParse(json.example).success, `${method} ${path}: the route's schema refuses its example`);
          }
        }
        for (const response of Object.values<any>(operation.responses)) {
          for (const media of Object.values<any>(resolved(document, response).content ?? {})) validatorIn(document, media.schema);
        }
        for (const parameter of operation.parameters ?? []) {
          const validate = validatorIn(document, parameter.schema);
          if (parameter.example !== undefined) assert.ok(validate(parameter.example), `${method} ${path} ?${parameter.name}: ${errorsOf(validate)}`);
        }
      }
    }
    assert.ok(examples >= 8, `${examples} request examples`);
  });

  it("gives an example the server itself accepts", async () => {
    const example = document.paths["/v1/chat/completions"].post.requestBody.content["application/json"].example;
    const response = await fetch(`${test.baseURL}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${test.key}`, "content-type": "application/json" },
      body: JSON.stringify({ ...example, model: test.server.catalog.list()[0]!.id, stream: false, stream_options: undefined, max_tokens: 4 }),
    });
    assert.equal(response.status, 200, await response.clone().text());
  });
});
