/**
 * Issue 19, rows 10 and 11, over HTTP against a real server:
 * - row 10: a key below scope 'admin' revokes only itself and the keys created from it; its
 *   parent, its siblings and the account's other keys answer 403 `key_not_descendant` (a console
 *   session and an 'admin' key still manage them);
 * - row 11: an account holds at most `--max-keys-per-account` working keys (revoked and expired
 *   ones do not count; concurrent creates at the cap let exactly one through, on SQLite and
 *   PostgreSQL), and `GET /api/keys` and `GET /api/admin/keys` are paged newest first with
 *   `limit`, `after` and `has_more`.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Kysely } from "kysely";
import OpenAI from "openai";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { createAccount } from "../src/accounts/accounts.ts";
import { countWorkingKeys, createApiKey, listApiKeyPage, TooManyKeysError } from "../src/auth/api-keys.ts";
import { startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { ConsoleClient, writeConsoleConfig, type ApiResponse } from "./helpers/console.ts";
import { freshPostgresSchema } from "./helpers/databases.ts";

type Listed = { id: string; status: string; created: number; account_email?: string | null };

function assertRefused(response: ApiResponse, status: number, code: string, param?: string): void {
  assert.equal(response.status, status, response.text);
  assert.deepEqual(Object.keys(response.body.error).sort(), ["code", "message", "param", "type"]);
  assert.equal(response.body.error.code, code, response.text);
  if (param !== undefined) assert.equal(response.body.error.param, param);
}

/** A server with two accounts (an admin and a user) signed in through the console API. */
async function serverWithAccounts(flags: Record<string, string | undefined> = {}) {
  const test = await startTestServer({ configFile: writeConsoleConfig(temporaryDirectory()), flags: { models: undefined, ...flags } });
  const database = await openStore({ dataDir: test.dataDir, databaseUrl: flags.database_url ?? "" });
  const adminId = (await createAccount(database, { email: "boss@example.com", password: "correct horse battery", role: "admin" })).id;
  const userId = (await createAccount(database, { email: "user@example.com", password: "correct horse battery" })).id;
  const admin = new ConsoleClient(test.url);
  const user = new ConsoleClient(test.url);
  assert.equal((await admin.signIn("boss@example.com")).status, 200);
  assert.equal((await user.signIn("user@example.com")).status, 200);
  const withKey = (key: string) => new ConsoleClient(test.url, { authorization: `Bearer ${key}` });
  return { test, database, admin, user, adminId, userId, withKey };
}

async function created(response: Promise<ApiResponse>): Promise<{ id: string; key: string }> {
  const answer = await response;
  assert.equal(answer.status, 201, answer.text);
  return answer.body as { id: string; key: string };
}

describe("row 10: a key revokes only itself and the keys created from it", () => {
  let context: Awaited<ReturnType<typeof serverWithAccounts>>;
  before(async () => {
    context = await serverWithAccounts();
  });
  after(async () => {
    await context?.database.destroy();
    await context?.test.close();
  });

  async function statusOf(id: string): Promise<string> {
    const page = await context.user.get("/api/keys?limit=200");
    assert.equal(page.status, 200, page.text);
    return (page.body.data as Listed[]).find((key) => key.id === id)!.status;
  }

  it("refuses a restricted child revoking its parent or a sibling (403 key_not_descendant), and lets it revoke its own line", async () => {
    const { user, withKey } = context;
    const parent = await created(user.post("/api/keys", { name: "parent" }));
    const sibling = await created(user.post("/api/keys", { name: "sibling" }));
    // The audit's key: a child with a 10-credit cap and one model.
    const child = await created(withKey(parent.key).post("/api/keys", { name: "restricted", models: ["stories260K"], spend_cap: 10 }));
    const grandchild = await created(withKey(child.key).post("/api/keys", { name: "grandchild", models: ["stories260K"], spend_cap: 5 }));

    assertRefused(await withKey(child.key).delete(`/api/keys/${parent.id}`), 403, "key_not_descendant", "id");
    assertRefused(await withKey(child.key).delete(`/api/keys/${sibling.id}`), 403, "key_not_descendant", "id");
    // An unrestricted account key cannot revoke a sibling either.
    assertRefused(await withKey(parent.key).delete(`/api/keys/${sibling.id}`), 403, "key_not_descendant", "id");
    assert.equal(await statusOf(parent.id), "active");
    assert.equal(await statusOf(sibling.id), "active");
    // The parent still works on /v1.
    const models = await new OpenAI({ baseURL: context.test.baseURL, apiKey: parent.key, maxRetries: 0 }).models.list();
    assert.ok(models.data.length > 0);

    // Its descendants and itself: allowed.
    const revokedGrandchild = await withKey(parent.key).delete(`/api/keys/${grandchild.id}`);
    assert.equal(revokedGrandchild.status, 200, revokedGrandchild.text);
    assert.equal(revokedGrandchild.body.status, "revoked");
    const revokedSelf = await withKey(child.key).delete(`/api/keys/${child.id}`);
    assert.equal(revokedSelf.status, 200, revokedSelf.text);
    assert.equal(await statusOf(child.id), "revoked");
    assert.equal(await statusOf(parent.id), "active");
  });

  it("still lets a console session and an 'admin' key revoke any key of the account", async () => {
    const { admin, user, withKey } = context;
    const first = await created(user.post("/api/keys", { name: "first" }));
    const second = await created(user.post("/api/keys", { name: "second" }));
    assert.equal((await user.delete(`/api/keys/${first.id}`)).status, 200);
    assert.equal(await statusOf(first.id), "revoked");

    const adminKey = await created(admin.post("/api/keys", { name: "admin key", scope: "admin" }));
    const other = await created(admin.post("/api/keys", { name: "admin's other key" }));
    const revoked = await withKey(adminKey.key).delete(`/api/keys/${other.id}`);
    assert.equal(revoked.status, 200, revoked.text);
    assert.equal(revoked.body.status, "revoked");
    // Another account's key stays a 404, whoever asks.
    assertRefused(await withKey(adminKey.key).delete(`/api/keys/${second.id}`), 404, "key_not_found");
  });
});

for (const backend of ["sqlite", "postgres"] as const) {
  describe(`row 11 on ${backend}: a cap on keys per account, and paged key listings`, () => {
    const CAP = 6;
    let context: Awaited<ReturnType<typeof serverWithAccounts>>;
    let dropSchema: (() => Promise<void>) | undefined;
    before(async () => {
      let databaseUrl: string | undefined;
      if (backend === "postgres") ({ url: databaseUrl, drop: dropSchema } = await freshPostgresSchema());
      context = await serverWithAccounts({ max_keys_per_account: String(CAP), database_url: databaseUrl });
    });
    after(async () => {
      await context?.database.destroy();
      await context?.test.close();
      await dropSchema?.();
    });

    it("refuses a key past the cap with 409 too_many_keys; revoked and expired keys do not count", async () => {
      const { user, withKey, database, userId } = context;
      const keys: Array<{ id: string; key: string }> = [];
      for (let index = 0; index < CAP; index++) keys.push(await created(user.post("/api/keys", { name: `key ${index}` })));
      assertRefused(await user.post("/api/keys", { name: "one too many" }), 409, "too_many_keys");
      // A key creating a child counts against the same cap.
      assertRefused(await withKey(keys[0]!.key).post("/api/keys", { name: "child" }), 409, "too_many_keys");

      assert.equal((await user.delete(`/api/keys/${keys[1]!.id}`)).status, 200);
      const replacement = await created(user.post("/api/keys", { name: "replacement" }));
      assertRefused(await user.post("/api/keys", { name: "again too many" }), 409, "too_many_keys");

      // An expired key (written straight to the store: the API refuses a past expiry) frees its place.
      await createApiKey(database, { accountId: userId, name: "expired", expires: Date.now() + 200 });
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.equal((await user.delete(`/api/keys/${replacement.id}`)).status, 200);
      await created(user.post("/api/keys", { name: "after the expired one" }));
      assertRefused(await user.post("/api/keys", { name: "full again" }), 409, "too_many_keys");
    });

    it("lets exactly one of many concurrent creates take the last place", async () => {
      const { admin } = context;
      for (let index = 0; index < CAP - 1; index++) await created(admin.post("/api/keys", { name: `admin key ${index}` }));
      const answers = await Promise.all(Array.from({ length: 8 }, (_, index) => admin.post("/api/keys", { name: `racer ${index}` })));
      const statuses = answers.map((answer) => answer.status).sort();
      assert.deepEqual(statuses, [201, 409, 409, 409, 409, 409, 409, 409], answers.map((answer) => answer.text).join("\n"));
      for (const answer of answers.filter((answer) => answer.status === 409)) assert.equal(answer.body.error.code, "too_many_keys");
      const listed = await admin.get("/api/keys?limit=200");
      assert.equal((listed.body.data as Listed[]).filter((key) => key.status === "active").length, CAP);
    });

    it("counts under the account's lock: 20 creates at once in the store at the cap's last place, one goes in", async () => {
      const { database } = context;
      const account = await createAccount(database, { email: "racer@example.com", password: "correct horse battery" });
      for (let index = 0; index < CAP - 1; index++) await createApiKey(database, { accountId: account.id, maxKeysPerAccount: CAP });
      const results = await Promise.allSettled(Array.from({ length: 20 }, () => createApiKey(database, { accountId: account.id, maxKeysPerAccount: CAP })));
      const refused = results.filter((result) => result.status === "rejected");
      assert.equal(results.length - refused.length, 1, refused.map((result) => String(result.reason)).join("\n"));
      for (const result of refused) assert.ok(result.reason instanceof TooManyKeysError, String(result.reason));
      assert.equal(await countWorkingKeys(database, account.id), CAP);
    });

    it("pages GET /api/keys newest first with limit, after and has_more", async () => {
      const { user } = context;
      const everything = await user.get("/api/keys?limit=200");
      assert.equal(everything.status, 200, everything.text);
      assert.equal(everything.body.has_more, false);
      const all = everything.body.data as Listed[];
      assert.ok(all.length >= 8, `the account has keys to page: ${all.length}`);
      for (let index = 1; index < all.length; index++) assert.ok(all[index - 1]!.created >= all[index]!.created, "newest first");

      const paged: Listed[] = [];
      let cursor: string | undefined;
      for (let pages = 0; pages < 20; pages++) {
        const page = await user.get(`/api/keys?limit=3${cursor === undefined ? "" : `&after=${encodeURIComponent(cursor)}`}`);
        assert.equal(page.status, 200, page.text);
        assert.ok(page.body.data.length <= 3);
        paged.push(...(page.body.data as Listed[]));
        if (!page.body.has_more) break;
        cursor = paged.at(-1)!.id;
      }
      assert.deepEqual(paged.map((key) => key.id), all.map((key) => key.id), "the pages hold every key once, in order");

      // The default page and a bad limit.
      const first = await user.get("/api/keys");
      assert.equal(first.status, 200);
      assert.equal(typeof first.body.has_more, "boolean");
      assertRefused(await user.get("/api/keys?limit=0"), 400, "invalid_request_error", "limit");
      assertRefused(await user.get("/api/keys?limit=201"), 400, "invalid_request_error", "limit");
      // A cursor that is not a key of this list, another account's key included, is a 400.
      assertRefused(await user.get("/api/keys?after=key_nope"), 400, "invalid_cursor", "after");
      const adminKeys = await context.admin.get("/api/keys?limit=1");
      assertRefused(await user.get(`/api/keys?after=${encodeURIComponent(adminKeys.body.data[0].id)}`), 400, "invalid_cursor", "after");
    });

    it("pages keys created in the same millisecond without losing or repeating one", async () => {
      const { database } = context;
      const account = await createAccount(database, { email: "same-time@example.com", password: "correct horse battery" });
      const now = Date.now();
      const made = new Set<string>();
      for (let index = 0; index < 7; index++) made.add((await createApiKey(database, { accountId: account.id, now })).id);
      const paged: string[] = [];
      let cursor: string | undefined;
      for (let pages = 0; pages < 10; pages++) {
        const page = await listApiKeyPage(database, { accountId: account.id, limit: 2, after: cursor });
        paged.push(...page.data.map((key) => key.id));
        if (!page.hasMore) break;
        cursor = paged.at(-1);
      }
      // Every key once (ties are ordered by id in the database's own collation, so no order is asserted here).
      assert.equal(paged.length, made.size);
      assert.deepEqual([...paged].sort(), [...made].sort());
    });

    it("pages GET /api/admin/keys over every account, with each key's owner", async () => {
      const { admin, user } = context;
      const seen: Listed[] = [];
      let cursor: string | undefined;
      for (let pages = 0; pages < 50; pages++) {
        const page = await admin.get(`/api/admin/keys?limit=4${cursor === undefined ? "" : `&after=${encodeURIComponent(cursor)}`}`);
        assert.equal(page.status, 200, page.text);
        assert.ok(page.body.data.length <= 4);
        seen.push(...(page.body.data as Listed[]));
        if (!page.body.has_more) break;
        cursor = seen.at(-1)!.id;
      }
      assert.equal(new Set(seen.map((key) => key.id)).size, seen.length, "no key twice");
      const userKeys = (await user.get("/api/keys?limit=200")).body.data as Listed[];
      for (const key of userKeys) assert.equal(seen.find((listed) => listed.id === key.id)?.account_email, "user@example.com");
      assert.ok(seen.some((key) => key.account_email === "boss@example.com"));
      assert.ok(seen.some((key) => key.account_email === null), "the operator's key (the test server's) is listed too");
      for (let index = 1; index < seen.length; index++) assert.ok(seen[index - 1]!.created >= seen[index]!.created, "newest first");
      assertRefused(await admin.get("/api/admin/keys?after=key_nope"), 400, "invalid_cursor", "after");
      assertRefused(await user.get("/api/admin/keys?limit=4"), 403, "admin_required");
    });
  });
}
