/**
 * The first admin of an installation is whoever signs up with the one-time setup code the server
 * printed — exactly one, even when several sign up with it at the same moment — and nobody who
 * merely signs up first.
 */
import assert from "node:assert/strict";
import { after, before, it } from "node:test";
import { startTestServer, type TestServer } from "./helpers/server.ts";
import { ConsoleClient, setupCodeOf } from "./helpers/console.ts";

let test: TestServer;
before(async () => {
  test = await startTestServer();
});
after(async () => {
  await test?.close();
});

it("makes nobody admin for signing up first without the setup code", async () => {
  const early = await new ConsoleClient(test.url).signUp("early@example.com");
  assert.equal(early.status, 201, early.text);
  assert.equal(early.body.role, "user");
});

it("makes exactly one of many simultaneous sign-ups with the setup code admin", async () => {
  const clients = Array.from({ length: 8 }, () => new ConsoleClient(test.url));
  const replies = await Promise.all(clients.map((client, index) => client.signUpAdmin(test, `first-${index}@example.com`)));
  for (const reply of replies) assert.ok(reply.status === 201 || reply.status === 403, reply.text);
  assert.equal(replies.filter((reply) => reply.status === 201 && reply.body.role === "admin").length, 1);
  const late = await new ConsoleClient(test.url).signUp("late@example.com", undefined, setupCodeOf(test));
  assert.equal(late.status, 403, "the code stops working once an admin exists");
  assert.equal(late.body.error.code, "invalid_setup_code");
  assert.equal((await new ConsoleClient(test.url).signUp("later@example.com")).body.role, "user");
});
