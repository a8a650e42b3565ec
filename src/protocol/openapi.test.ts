import { test } from "node:test";
import assert from "node:assert/strict";
import { API_OPERATIONS } from "./api-operations.ts";
import { ERROR_CATALOG } from "./error-catalog.ts";
import { buildOpenApiDocument, errorCodesOf, operationIdOf } from "./openapi.ts";

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
  assert.deepEqual(responses["429"]["x-error-codes"], ["insufficient_quota", "rate_limit_exceeded"]);
  for (const [status, response] of Object.entries<any>(responses)) {
    for (const code of response["x-error-codes"] ?? []) assert.equal(String(ERROR_CATALOG[code as keyof typeof ERROR_CATALOG].status), status);
  }
  const createKey = document.paths["/api/keys"].post;
  assert.ok(createKey.responses["403"]["x-error-codes"].includes("csrf_failed"));
  assert.ok(createKey.responses["403"]["x-error-codes"].includes("key_looser_than_parent"));
  assert.equal(createKey.requestBody.content["application/json"].schema.properties.scope.enum.join(), "inference,account,admin");
});

test("operation ids are unique and paths are unique per method", () => {
  const ids = API_OPERATIONS.map(operationIdOf);
  assert.equal(new Set(ids).size, ids.length);
  assert.equal(operationIdOf({ method: "post", path: "/api/admin/accounts/{id}/grant" }), "postApiAdminAccountsIdGrant");
});
