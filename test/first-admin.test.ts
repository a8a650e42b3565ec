/**
 * The first sign-up of an installation becomes its admin — exactly one, even when several
 * people sign up at the same moment.
 */
import assert from "node:assert/strict";
import { after, before, it } from "node:test";
import { startTestServer, type TestServer } from "./helpers/server.ts";
import { ConsoleClient } from "./helpers/console.ts";

let test: TestServer;
before(async () => {
  test = await startTestServer();
});
after(async () => {
  await test?.close();
});

it("makes exactly one of many simultaneous first sign-ups admin", async () => {
  const clients = Array.from({ length: 12 }, (_unused, index) => new ConsoleClient(test.url, { "x-forwarded-for": `10.1.0.${index + 1}` }));
  const replies = await Promise.all(clients.map((client, index) => client.signUp(`first-${index}@example.com`)));
  for (const reply of replies) assert.equal(reply.status, 201, reply.text);
  assert.equal(replies.filter((reply) => reply.body.role === "admin").length, 1);
  const late = new ConsoleClient(test.url, { "x-forwarded-for": "10.1.1.1" });
  assert.equal((await late.signUp("late@example.com")).body.role, "user");
});
