import { test } from "node:test";
import assert from "node:assert/strict";
import { API_OPERATIONS, ANSWER_SCHEMAS, REQUEST_SCHEMAS, buildOpenApiDocument } from "./operations.ts";
import { ERROR_CATALOG } from "../../protocol/error-catalog.ts";
import { errorCodesOf, operationIdOf } from "../../protocol/openapi.ts";

/** `node`, or what its `$ref` points at in `document`. */
function resolved(document: any, node: any): any {
  if (typeof node?.$ref !== "string") return node;
  return resolved(document, node.$ref.slice(2).split("/").reduce((at: any, segment: string) => at?.[segment], document));
}

test("every request example passes the zod schema its route validates with", () => {
  const withSchemas = API_OPERATIONS.filter((operation) => operation.body !== undefined || operation.query !== undefined);
  assert.ok(withSchemas.length >= 10);
  for (const operation of withSchemas) {
    const schema = operation.body ?? operation.query!;
    assert.ok(operation.example !== undefined, `${operation.method} ${operation.path} has a schema but no example`);
    const parsed = schema.safeParse(operation.example);
    assert.ok(parsed.success, `${operation.method} ${operation.path}: ${parsed.success ? "" : parsed.error.message}`);
  }
});

test("an operation answers the errors of its auth, its body and its own, each at its catalog status", () => {
  const chat = API_OPERATIONS.find((operation) => operation.path === "/v1/chat/completions")!;
  const codes = errorCodesOf(chat);
  for (const code of ["invalid_api_key", "invalid_json", "request_too_large", "insufficient_quota", "rate_limit_exceeded", "context_length_exceeded", "host_not_allowed"] as const) {
    assert.ok(codes.includes(code), code);
  }
  assert.ok(!codes.includes("csrf_failed"), "a key route has no CSRF check");
  const document = buildOpenApiDocument({ version: "1.2.3" }) as any;
  const responses = document.paths["/v1/chat/completions"].post.responses;
  assert.deepEqual(resolved(document, responses["429"])["x-error-codes"], ["insufficient_quota", "rate_limit_exceeded"]);
  for (const [status, response] of Object.entries<any>(responses)) {
    for (const code of resolved(document, response)["x-error-codes"] ?? []) assert.equal(String(ERROR_CATALOG[code as keyof typeof ERROR_CATALOG].status), status);
  }
  const createKey = document.paths["/api/keys"].post;
  const forbidden = resolved(document, createKey.responses["403"]);
  assert.ok(forbidden["x-error-codes"].includes("csrf_failed"));
  assert.ok(forbidden["x-error-codes"].includes("key_looser_than_parent"));
  assert.equal(resolved(document, createKey.requestBody.content["application/json"].schema).properties.scope.enum.join(), "inference,account,admin");
});

test("operation ids are unique and paths are unique per method", () => {
  const ids = API_OPERATIONS.map(operationIdOf);
  assert.equal(new Set(ids).size, ids.length);
  assert.equal(operationIdOf({ method: "post", path: "/api/admin/accounts/{id}/grant" }), "postApiAdminAccountsIdGrant");
});

test("documents the schema of every JSON answer as an open object, and each event of a stream", () => {
  const document = buildOpenApiDocument({ version: "1.2.3" }) as any;
  for (const operation of API_OPERATIONS) {
    const content = document.paths[operation.path][operation.method].responses[String(operation.success.status)].content;
    if (operation.success.contentType !== undefined) {
      assert.deepEqual(Object.keys(content), [operation.success.contentType]);
      continue;
    }
    assert.ok(operation.response !== undefined, `${operation.method} ${operation.path} has no response schema`);
    assert.equal(resolved(document, content["application/json"].schema).type, "object", `${operation.method} ${operation.path}`);
  }
  const chat = document.paths["/v1/chat/completions"].post.responses["200"].content;
  assert.deepEqual(Object.keys(chat), ["application/json", "text/event-stream"]);
  assert.equal(resolved(document, chat["text/event-stream"].schema).properties.object.const, "chat.completion.chunk");
  // Faithful to what the route sends: optional fields optional, nullable ones nullable.
  const message = resolved(document, chat["application/json"].schema).properties.choices.items.properties.message;
  assert.deepEqual(message.required, ["role", "content", "refusal"]);
  assert.deepEqual(message.properties.content.type, ["string", "null"]);
  const usage = resolved(document, document.paths["/api/usage"].get.responses["200"].content["application/json"].schema);
  assert.ok(!usage.required.includes("currency") && !usage.properties.data.items.required.includes("cost_money"));
  assert.equal(usage.properties.from.type, "integer");
  assert.equal(usage.properties.from.maximum, undefined, "no safe-integer noise");
  assert.ok(!JSON.stringify(document).includes('"additionalProperties":false'));
});

test("documents /ready's 503 with the body of its 200, not as an error", () => {
  const document = buildOpenApiDocument({ version: "1.2.3" }) as any;
  const responses = document.paths["/ready"].get.responses;
  assert.deepEqual(responses["503"].content, responses["200"].content);
  assert.equal(responses["503"]["x-error-codes"], undefined);
  assert.match(responses["503"].description, /not ready/);
  const ready = API_OPERATIONS.find((operation) => operation.path === "/ready")!;
  assert.ok(!errorCodesOf(ready).includes("shutting_down"), "/ready answers while stopping");
});

test("writes each named schema once, in components, and refers to it: every request body and answer, and the parts they share", () => {
  const document = buildOpenApiDocument({ version: "1.2.3" }) as any;
  const names = new Set([...Object.keys(REQUEST_SCHEMAS), ...Object.keys(ANSWER_SCHEMAS)]);
  assert.equal(names.size, Object.keys(REQUEST_SCHEMAS).length + Object.keys(ANSWER_SCHEMAS).length, "a name is unique across requests and answers");
  for (const name of names) assert.ok(document.components.schemas[name] !== undefined, name);
  const named = new Set<unknown>([...Object.values(REQUEST_SCHEMAS), ...Object.values(ANSWER_SCHEMAS)]);
  for (const operation of API_OPERATIONS) {
    for (const schema of [operation.body, operation.response, operation.streamEvent]) {
      if (schema !== undefined) assert.ok(named.has(schema), `${operation.method} ${operation.path}: name its schema in the operation's schemas`);
    }
    const content = document.paths[operation.path][operation.method].responses[String(operation.success.status)].content;
    if (operation.response !== undefined) assert.match(content["application/json"].schema.$ref, /^#\/components\/schemas\//);
  }
  const chunk = document.components.schemas.ChatCompletionChunk;
  assert.deepEqual(chunk.properties.usage.anyOf[0], { $ref: "#/components/schemas/CompletionUsage" });
  assert.deepEqual(document.components.schemas.ModelList.properties.data.items, { $ref: "#/components/schemas/Model" });
  assert.equal(document.components.schemas.Model.$id, undefined);
  // Error responses that several operations give alike are written once too.
  assert.deepEqual(document.paths["/v1/models"].get.responses["500"], { $ref: "#/components/responses/Error500.internal_error" });
  // Bounded, so that a schema written out inline many times shows (the Responses API's request, with its item types, is most of the growth past 130,000;
  // legacy completions, /infill and /v1/infill, and embeddings, each written once in components, took it from ~185,000 to ~205,000).
  assert.ok(JSON.stringify(document).length < 230_000, `${JSON.stringify(document).length} characters`);
});
