/**
 * API keys against a real, migrated SQLite database in a temporary directory: what is stored,
 * what is shown, and every way a presented key is refused.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, it } from "node:test";
import type { Kysely } from "kysely";
import { openStore } from "../store/open.ts";
import type { Database } from "../store/schema.ts";
import { createApiKey, findApiKey, generateKey, hashKey, KEY_PREFIX, listApiKeys, revokeApiKey, touchApiKey, verifyApiKey } from "./api-keys.ts";
import { KeyLooserThanParentError } from "./key-scopes.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../test/helpers/databases.ts";
import { Migrator } from "kysely/migration";
import { sql } from "kysely";
import { openSqlite } from "../store/sqlite.ts";
import { migrateToLatest } from "../store/migrate.ts";
import { migrations } from "../store/migrations/index.ts";

const keyPattern = /^tp-[A-Za-z0-9_-]{43}$/;

let dataDir: string;
let database: Kysely<Database>;

beforeEach(async () => {
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-keys-"));
  database = await openStore({ dataDir });
});
afterEach(async () => {
  await database.destroy();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

describe("API keys", () => {
  it("creates keys with the tp- prefix and 43 base64url characters of randomness", async () => {
    const created = await createApiKey(database, { name: "ci" });
    assert.equal(KEY_PREFIX, "tp-");
    assert.match(created.key, keyPattern);
    // 43 base64url characters carry 258 bits; the key is 32 random bytes (256 bits), well over 192.
    assert.equal(Buffer.from(created.key.slice(KEY_PREFIX.length), "base64url").length, 32);
    assert.equal(created.name, "ci");
    assert.match(created.id, /^key_/);
  });

  it("never makes the same key twice", async () => {
    const keys = new Set<string>();
    for (let index = 0; index < 500; index++) keys.add(generateKey());
    for (let index = 0; index < 20; index++) keys.add((await createApiKey(database)).key);
    assert.equal(keys.size, 520);
    for (const key of keys) assert.match(key, keyPattern);
  });

  it("stores only the SHA-256 of the key and its display prefix", async () => {
    const created = await createApiKey(database, { name: "stored", now: 1_000 });
    const rows = await database.selectFrom("api_keys").selectAll().execute();
    assert.equal(rows.length, 1);
    const row = rows[0]!;
    assert.equal(row.key_hash, createHash("sha256").update(created.key).digest("hex"));
    assert.equal(row.key_hash, hashKey(created.key));
    assert.equal(row.display_prefix, created.key.slice(0, KEY_PREFIX.length + 6));
    const secret = created.key.slice(KEY_PREFIX.length);
    for (const [column, value] of Object.entries(row)) {
      const text = String(value);
      assert.ok(!text.includes(created.key), `column ${column} holds the key`);
      assert.ok(!text.includes(secret), `column ${column} holds the key's random part`);
      assert.ok(!text.includes(secret.slice(6, 26)), `column ${column} holds part of the key beyond the display prefix`);
    }
  });

  it("shows a display prefix too short to use", async () => {
    const created = await createApiKey(database);
    assert.equal(created.displayPrefix, created.key.slice(0, 9));
    assert.ok(created.key.startsWith(created.displayPrefix));
    assert.ok(created.displayPrefix.length <= 9);
  });

  it("lists keys newest first without the key text", async () => {
    const older = await createApiKey(database, { name: "older", now: 1_000 });
    const newer = await createApiKey(database, { name: "newer", now: 2_000, expires: 9_000 });
    const listed = await listApiKeys(database);
    assert.deepEqual(
      listed.map((record) => record.id),
      [newer.id, older.id],
    );
    assert.deepEqual(listed[0], {
      id: newer.id,
      name: "newer",
      displayPrefix: newer.displayPrefix,
      accountId: null,
      created: 2_000,
      revoked: null,
      expires: 9_000,
      lastUsed: null,
      spendCap: null,
      spent: 0,
      rpm: null,
      tpm: null,
      models: null,
      scope: "admin",
      parentKeyId: null,
    });
    const serialized = JSON.stringify(listed);
    assert.ok(!serialized.includes(older.key.slice(KEY_PREFIX.length)));
    assert.ok(!serialized.includes(newer.key.slice(KEY_PREFIX.length)));
    for (const record of listed) assert.ok(!("key" in record));
  });

  it("lists the keys of one account, or of the operator with null", async () => {
    const operator = await createApiKey(database, { now: 1_000 });
    const alice = await createApiKey(database, { accountId: "acct_alice", now: 2_000 });
    await createApiKey(database, { accountId: "acct_bob", now: 3_000 });
    assert.deepEqual((await listApiKeys(database, "acct_alice")).map((record) => record.id), [alice.id]);
    assert.deepEqual((await listApiKeys(database, null)).map((record) => record.id), [operator.id]);
    assert.equal((await listApiKeys(database)).length, 3);
  });

  it("accepts a key it created", async () => {
    const created = await createApiKey(database, { name: "good", now: 1_000 });
    const check = await verifyApiKey(database, created.key, 2_000);
    assert.ok(check.ok);
    assert.equal(check.key.id, created.id);
    assert.equal(check.key.name, "good");
  });

  it("refuses a well-formed key it never made as unknown", async () => {
    await createApiKey(database);
    assert.deepEqual(await verifyApiKey(database, generateKey()), { ok: false, reason: "unknown" });
  });

  it("refuses a key that differs from a real one in its last character", async () => {
    const created = await createApiKey(database);
    const last = created.key.at(-1) === "A" ? "B" : "A";
    assert.deepEqual(await verifyApiKey(database, created.key.slice(0, -1) + last), { ok: false, reason: "unknown" });
  });

  it("refuses malformed keys", async () => {
    const created = await createApiKey(database);
    for (const presented of ["", "sk-abc", created.key.slice(KEY_PREFIX.length), `Bearer ${created.key}`, `tp-${"a".repeat(300)}`]) {
      assert.deepEqual(await verifyApiKey(database, presented), { ok: false, reason: "malformed" }, JSON.stringify(presented));
    }
  });

  it("refuses a key that was revoked", async () => {
    const created = await createApiKey(database, { now: 1_000 });
    assert.equal(await revokeApiKey(database, created.id, 5_000), true);
    assert.deepEqual(await verifyApiKey(database, created.key, 6_000), { ok: false, reason: "revoked" });
    const [record] = await listApiKeys(database);
    assert.equal(record!.revoked, 5_000);
  });

  it("keeps the first revocation time when a key is revoked twice", async () => {
    const created = await createApiKey(database, { now: 1_000 });
    assert.equal(await revokeApiKey(database, created.id, 5_000), true);
    assert.equal(await revokeApiKey(database, created.id, 7_000), true);
    const [record] = await listApiKeys(database);
    assert.equal(record!.revoked, 5_000);
  });

  it("returns false when revoking a key that does not exist", async () => {
    await createApiKey(database);
    assert.equal(await revokeApiKey(database, "key_doesnotexist"), false);
    const [record] = await listApiKeys(database);
    assert.equal(record!.revoked, null);
  });

  it("refuses a key that has expired", async () => {
    const created = await createApiKey(database, { now: 1_000, expires: 10_000 });
    assert.ok((await verifyApiKey(database, created.key, 9_999)).ok);
    assert.deepEqual(await verifyApiKey(database, created.key, 10_000), { ok: false, reason: "expired" });
    assert.deepEqual(await verifyApiKey(database, created.key, 20_000), { ok: false, reason: "expired" });
  });

  it("reports a revoked key that has also expired as revoked", async () => {
    const created = await createApiKey(database, { now: 1_000, expires: 2_000 });
    await revokeApiKey(database, created.id, 1_500);
    assert.deepEqual(await verifyApiKey(database, created.key, 3_000), { ok: false, reason: "revoked" });
  });

  it("records when a key was last used", async () => {
    const created = await createApiKey(database, { now: 1_000 });
    assert.equal(created.lastUsed, null);
    await touchApiKey(database, created.id, 4_242);
    const [record] = await listApiKeys(database);
    assert.equal(record!.lastUsed, 4_242);
    const check = await verifyApiKey(database, created.key, 5_000);
    assert.ok(check.ok);
    assert.equal(check.key.lastUsed, 4_242);
  });

  it("touches only the key it names", async () => {
    const first = await createApiKey(database, { now: 1_000 });
    const second = await createApiKey(database, { now: 2_000 });
    await touchApiKey(database, first.id, 3_000);
    const byId = new Map((await listApiKeys(database)).map((record) => [record.id, record]));
    assert.equal(byId.get(first.id)!.lastUsed, 3_000);
    assert.equal(byId.get(second.id)!.lastUsed, null);
  });
});

for (const backend of backends) {
  describe(`keys creating keys (${backend})`, () => {
    let store: TestDatabase;
    beforeEach(async () => {
      store = await openTestDatabase(backend);
    });
    afterEach(async () => {
      await store.close();
    });

    /** The key of issue 9's audit: one model, spend cap 10, 5 rpm, an hour to live. */
    const restricted = (now = 1_000) =>
      createApiKey(store.database, { name: "restricted", accountId: "acct_a", models: ["story"], spendCap: 10, rpm: 5, expires: now + 3_600_000, now });
    const withinLimits = { models: ["story"], rpm: 5, expires: 1_000 + 3_600_000 };

    it("gives operator keys admin scope and account keys account scope unless told", async () => {
      assert.equal((await createApiKey(store.database)).scope, "admin");
      assert.equal((await createApiKey(store.database, { accountId: "acct_a" })).scope, "account");
      const inference = await createApiKey(store.database, { accountId: "acct_a", scope: "inference" });
      assert.equal((await findApiKey(store.database, inference.id))!.scope, "inference");
    });

    it("records the parent and its account, and moves the child's spend cap out of the parent's", async () => {
      const parent = await restricted();
      const child = await createApiKey(store.database, { parent, ...withinLimits, spendCap: 4, now: 2_000 });
      assert.equal(child.parentKeyId, parent.id);
      assert.equal(child.accountId, "acct_a");
      assert.equal(child.spendCap, 4);
      assert.equal((await findApiKey(store.database, parent.id))!.spendCap, 6);
      assert.ok((await verifyApiKey(store.database, child.key, 3_000)).ok);
    });

    it("refuses a child looser than its parent and writes nothing", async () => {
      const parent = await restricted();
      await assert.rejects(createApiKey(store.database, { parent, name: "free" }), KeyLooserThanParentError);
      await assert.rejects(createApiKey(store.database, { parent, ...withinLimits, spendCap: 11 }), KeyLooserThanParentError);
      await assert.rejects(createApiKey(store.database, { parent, ...withinLimits, spendCap: 1, scope: "admin" }), KeyLooserThanParentError);
      assert.equal((await listApiKeys(store.database)).length, 1);
      assert.equal((await findApiKey(store.database, parent.id))!.spendCap, 10);
    });

    it("counts the parent's running requests against what it may give away", async () => {
      const parent = await restricted();
      await store.database.updateTable("api_keys").set({ reserved: 7 }).where("id", "=", parent.id).execute();
      await assert.rejects(createApiKey(store.database, { parent, ...withinLimits, spendCap: 4 }), (error: unknown) => error instanceof KeyLooserThanParentError && error.param === "spend_cap");
      await createApiKey(store.database, { parent, ...withinLimits, spendCap: 3 });
      assert.equal((await findApiKey(store.database, parent.id))!.spendCap, 7);
    });

    it("lets two children created at once take no more than the parent had", async () => {
      const parent = await restricted();
      const results = await Promise.allSettled([6, 6, 6].map((spendCap) => createApiKey(store.database, { parent, ...withinLimits, spendCap })));
      assert.equal(results.filter((result) => result.status === "fulfilled").length, 1);
      assert.ok(results.every((result) => result.status === "fulfilled" || result.reason instanceof KeyLooserThanParentError));
      assert.equal((await findApiKey(store.database, parent.id))!.spendCap, 4);
    });

    it("revokes a key's children and grandchildren with it", async () => {
      const parent = await restricted();
      const child = await createApiKey(store.database, { parent, ...withinLimits, spendCap: 5, now: 2_000 });
      const grandchild = await createApiKey(store.database, { parent: child, ...withinLimits, spendCap: 2, now: 3_000 });
      const sibling = await createApiKey(store.database, { accountId: "acct_a", now: 3_000 });
      await revokeApiKey(store.database, parent.id, 4_000);
      assert.deepEqual(await verifyApiKey(store.database, child.key, 5_000), { ok: false, reason: "revoked" });
      assert.deepEqual(await verifyApiKey(store.database, grandchild.key, 5_000), { ok: false, reason: "revoked" });
      assert.equal((await findApiKey(store.database, grandchild.id))!.revoked, 4_000);
      assert.ok((await verifyApiKey(store.database, sibling.key, 5_000)).ok, "keys the parent did not create keep working");
    });

    it("refuses a key whose ancestor is revoked or expired even where the revocation did not reach it", async () => {
      const parent = await restricted();
      const child = await createApiKey(store.database, { parent, ...withinLimits, spendCap: 5, now: 2_000 });
      const grandchild = await createApiKey(store.database, { parent: child, ...withinLimits, spendCap: 2, now: 3_000 });
      assert.ok((await verifyApiKey(store.database, grandchild.key, 4_000)).ok);
      // As if the parent were revoked while the child was being created: only its own row changes.
      await store.database.updateTable("api_keys").set({ revoked_at: 4_000 }).where("id", "=", parent.id).execute();
      assert.deepEqual(await verifyApiKey(store.database, child.key, 5_000), { ok: false, reason: "parent_inactive" });
      assert.deepEqual(await verifyApiKey(store.database, grandchild.key, 5_000), { ok: false, reason: "parent_inactive" });
      await store.database.updateTable("api_keys").set({ revoked_at: null, expires_at: 4_500 }).where("id", "=", parent.id).execute();
      assert.ok((await verifyApiKey(store.database, grandchild.key, 4_400)).ok);
      assert.deepEqual(await verifyApiKey(store.database, grandchild.key, 4_500), { ok: false, reason: "parent_inactive" });
    });

    it("refuses a key whose parent no longer exists", async () => {
      const parent = await restricted();
      const child = await createApiKey(store.database, { parent, ...withinLimits, spendCap: 5, now: 2_000 });
      await store.database.deleteFrom("api_keys").where("id", "=", parent.id).execute();
      assert.deepEqual(await verifyApiKey(store.database, child.key, 3_000), { ok: false, reason: "parent_inactive" });
    });
  });
}

describe("the key-scopes migration", () => {
  it("keeps existing account keys at 'account' (admins' keys included) and operator keys at 'admin'", async () => {
    const legacy = openSqlite(path.join(dataDir, "legacy.sqlite"));
    try {
      const before = Object.fromEntries(Object.entries(migrations).filter(([name]) => name < "0006"));
      const migrator = new Migrator({ db: legacy, provider: { getMigrations: async () => before }, migrationTableName: "turnpike_migrations", migrationLockTableName: "turnpike_migrations_lock" });
      const { error } = await migrator.migrateToLatest();
      assert.equal(error, undefined);
      for (const [id, account] of [["key_operator", null], ["key_admin", "acct_admin"], ["key_user", "acct_user"]] as const) {
        await sql`insert into api_keys (id, name, display_prefix, key_hash, account_id, created_at) values (${id}, ${id}, 'tp-abcdef', ${hashKey(id)}, ${account}, 1000)`.execute(legacy);
      }
      assert.deepEqual(await migrateToLatest(legacy).then((applied) => applied.filter((name) => name.startsWith("0006"))), ["0006-key-scopes"]);
      const scopes = Object.fromEntries((await legacy.selectFrom("api_keys").select(["id", "scope", "parent_key_id"]).execute()).map((row) => [row.id, [row.scope, row.parent_key_id]]));
      assert.deepEqual(scopes, { key_operator: ["admin", null], key_admin: ["account", null], key_user: ["account", null] });
    } finally {
      await legacy.destroy();
    }
  });
});
