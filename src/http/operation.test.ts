import { test } from "node:test";
import assert from "node:assert/strict";
import Fastify, { type FastifyInstance, type FastifyRequest } from "fastify";
import { z } from "zod";
import { handleError } from "./errors.ts";
import { defineOperation, registerOperations, type OperationAuthHooks } from "./operation.ts";
import { ApiError } from "../protocol/errors.ts";

/** Stands in for `accountAuth`: the `x-role` header says who calls (none: refused). */
const authenticate: Required<OperationAuthHooks> = {
  key: async function fakeKeyAuth(request: FastifyRequest) {
    if (request.headers.authorization === undefined) throw new ApiError("no key", "invalid_api_key");
  },
  account: async function fakeAccountAuth(request: FastifyRequest) {
    const role = request.headers["x-role"];
    if (role !== "admin" && role !== "user") throw new ApiError("sign in", "authentication_required");
    request.principal = { accountId: "acct_1", email: null, role, via: "session" };
  },
};

const noteSchema = z.object({ text: z.string().min(1) });

const createNote = defineOperation({
  method: "post",
  path: "/api/notes/{id}",
  tag: "Account",
  summary: "Writes a note.",
  auth: "account",
  body: noteSchema,
  example: { text: "hello" },
  success: { status: 201, description: "The note." },
  response: noteSchema.extend({ id: z.string(), by: z.string() }),
  errors: [],
  async handler({ request, params, body }, context: { refuse: string }) {
    // Refused before the body is parsed: body() is the handler's to call.
    if (params.id === context.refuse) throw new ApiError("not this one", "key_not_found");
    return { id: params.id, by: request.principal!.role, text: body().text };
  },
});

const readPath = defineOperation({
  method: "get",
  path: "/v1/things/{id}",
  lastParameterTakesRest: true,
  tag: "Models",
  summary: "Reads a thing whose id holds slashes.",
  auth: "key",
  success: { status: 200, description: "The id." },
  errors: [],
  async handler({ params }) {
    return { id: params.id };
  },
});

const adminOnly = defineOperation({
  method: "delete",
  path: "/api/admin/things",
  tag: "Admin",
  summary: "For admins.",
  auth: "admin",
  success: { status: 200, description: "Done." },
  errors: [],
  async handler() {
    return { done: true };
  },
});

async function appWith(register: (app: FastifyInstance) => void): Promise<FastifyInstance> {
  const app = Fastify();
  app.decorateRequest("principal", null);
  app.setErrorHandler(handleError);
  register(app);
  await app.ready();
  return app;
}

test("answers with the declared status, path parameters by name, and the body parsed with the declared schema", async () => {
  const app = await appWith((app) => registerOperations(app, [createNote], { context: { refuse: "nope" }, authenticate }));
  const created = await app.inject({ method: "POST", url: "/api/notes/n1", headers: { "x-role": "user" }, payload: { text: "hi" } });
  assert.equal(created.statusCode, 201);
  assert.deepEqual(created.json(), { id: "n1", by: "user", text: "hi" });
  const invalid = await app.inject({ method: "POST", url: "/api/notes/n1", headers: { "x-role": "user" }, payload: { text: "" } });
  assert.equal(invalid.statusCode, 400);
  assert.equal(invalid.json().error.param, "text");
  // The handler's own refusal comes first: the body is parsed only when it asks.
  const refused = await app.inject({ method: "POST", url: "/api/notes/nope", headers: { "x-role": "user" }, payload: { text: "" } });
  assert.equal(refused.json().error.code, "key_not_found");
  const anonymous = await app.inject({ method: "POST", url: "/api/notes/n1", payload: { text: "hi" } });
  assert.equal(anonymous.json().error.code, "authentication_required");
  await app.close();
});

test("a last parameter that takes the rest of the URL keeps its slashes; a key route runs its hook", async () => {
  const app = await appWith((app) => registerOperations(app, [readPath], { context: undefined, authenticate }));
  const found = await app.inject({ method: "GET", url: "/v1/things/owner/model-7b", headers: { authorization: "Bearer k" } });
  assert.equal(found.statusCode, 200);
  assert.deepEqual(found.json(), { id: "owner/model-7b" });
  const noKey = await app.inject({ method: "GET", url: "/v1/things/owner/model-7b" });
  assert.equal(noKey.json().error.code, "invalid_api_key");
  await app.close();
});

test("an admin operation takes an admin after the account hook, and refuses anyone else", async () => {
  const app = await appWith((app) => registerOperations(app, [adminOnly], { context: undefined, authenticate }));
  assert.equal((await app.inject({ method: "DELETE", url: "/api/admin/things", headers: { "x-role": "admin" } })).statusCode, 200);
  const user = await app.inject({ method: "DELETE", url: "/api/admin/things", headers: { "x-role": "user" } });
  assert.equal(user.statusCode, 403);
  assert.equal(user.json().error.code, "admin_required");
  await app.close();
});

test("refuses to register an operation whose auth has no hook", () => {
  const app = Fastify();
  assert.throws(() => registerOperations(app, [adminOnly], { context: undefined }), /auth is 'admin' but no hook/);
});
