/**
 * The per-node cache of verified keys, on real SQLite and PostgreSQL: what it serves from memory,
 * and every change that must reach it (a revocation here, a write by another connection, the age
 * bound for writes it cannot see, an expiry).
 */
import assert from "node:assert/strict";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, beforeEach, describe, it } from "node:test";
import { sql } from "kysely";
import { backends, openTestDatabase, type TestDatabase } from "../../test/helpers/databases.ts";
import { openSqlite } from "../store/sqlite.ts";
import { FOREIGN_CHANGES_CHECK_MS, noteChange, withChangeFeed } from "../store/changes.ts";
import { createApiKey, revokeApiKey } from "./api-keys.ts";
import { VERIFIED_KEY_MAX_AGE_MS, VerifiedKeys, WATCHED_KEY_MAX_AGE_MS } from "./verified-keys.ts";

for (const backend of backends) {
  describe(`verified keys (${backend})`, () => {
    let store: TestDatabase;
    let clock: number;
    let keys: VerifiedKeys;
    beforeEach(async () => {
      store = await openTestDatabase(backend);
      clock = 1_000_000;
      keys = new VerifiedKeys(store.database, { now: () => clock });
    });
    afterEach(async () => {
      await store.close();
    });

    /** Revokes behind the cache's back: a write no code on this node noted (another node's). */
    const revokeElsewhere = (id: string) => sql`update api_keys set revoked_at = ${clock} where id = ${id}`.execute(store.database);

    it("serves a verified key from memory for up to the age bound, then reads it again", async () => {
      const created = await createApiKey(store.database, { now: clock });
      assert.equal((await keys.verify(created.key)).ok, true);
      await revokeElsewhere(created.id);
      clock += VERIFIED_KEY_MAX_AGE_MS - 1;
      const cached = await keys.verify(created.key);
      assert.equal(cached.ok, true, "within the bound the key comes from memory");
      clock += 1;
      assert.deepEqual(await keys.verify(created.key), { ok: false, reason: "revoked" });
    });

    it("answers synchronously (`known`) only what `verify` would answer from memory", async () => {
      const created = await createApiKey(store.database, { now: clock });
      assert.deepEqual(keys.known("not a key"), { ok: false, reason: "malformed" });
      assert.equal(keys.known(created.key), undefined, "never verified: the database decides");
      assert.equal((await keys.verify(created.key)).ok, true);
      assert.deepEqual(keys.known(created.key), { ok: true, key: (await keys.verify(created.key) as { key: unknown }).key });
      clock += VERIFIED_KEY_MAX_AGE_MS;
      assert.equal(keys.known(created.key), undefined, "past the age bound");
      assert.equal((await keys.verify(created.key)).ok, true);
      assert.equal(keys.known(created.key)?.ok, true);
      await revokeApiKey(store.database, created.id, clock);
      assert.equal(keys.known(created.key), undefined, "a change noted on this node");
      assert.deepEqual(await keys.verify(created.key), { ok: false, reason: "revoked" });
      assert.equal(keys.known(created.key), undefined, "refusals are never kept");
    });

    it("refuses a key revoked on this node at the next request", async () => {
      const created = await createApiKey(store.database, { now: clock });
      assert.equal((await keys.verify(created.key)).ok, true);
      await revokeApiKey(store.database, created.id, clock);
      assert.deepEqual(await keys.verify(created.key), { ok: false, reason: "revoked" });
    });

    it("forgets every key when this node notes a change (an account disabled)", async () => {
      const account = `acct_${backend}`;
      await sql`insert into accounts (id, email, password_hash, role, created_at) values (${account}, ${`${backend}@example.com`}, ${"x"}, ${"user"}, ${clock})`.execute(store.database);
      const created = await createApiKey(store.database, { accountId: account, now: clock });
      assert.equal((await keys.verify(created.key)).ok, true);
      await sql`update accounts set disabled_at = ${clock} where id = ${account}`.execute(store.database);
      noteChange(store.database);
      assert.deepEqual(await keys.verify(created.key), { ok: false, reason: "account_disabled" });
    });

    it("checks a cached key's expiry on every request", async () => {
      const created = await createApiKey(store.database, { now: clock, expires: clock + 100 });
      assert.equal((await keys.verify(created.key)).ok, true);
      clock += 100;
      assert.deepEqual(await keys.verify(created.key), { ok: false, reason: "expired" });
    });

    it("refuses a malformed or unknown key, and a new key works at once", async () => {
      assert.deepEqual(await keys.verify("sk-nope"), { ok: false, reason: "malformed" });
      assert.deepEqual(await keys.verify(`tp-${"a".repeat(43)}`), { ok: false, reason: "unknown" });
      const created = await createApiKey(store.database, { now: clock });
      assert.equal((await keys.verify(created.key)).ok, true);
    });

    it("keeps no refusal: a key refused once works the moment the cause is gone, with no change noted", async () => {
      const account = `acct_refused_${backend}`;
      await sql`insert into accounts (id, email, password_hash, role, created_at, disabled_at) values (${account}, ${`refused-${backend}@example.com`}, ${"x"}, ${"user"}, ${clock}, ${clock})`.execute(store.database);
      const created = await createApiKey(store.database, { accountId: account, now: clock });
      assert.deepEqual(await keys.verify(created.key), { ok: false, reason: "account_disabled" });
      // Enabled behind the cache's back (no change noted): a kept refusal would still refuse it.
      await sql`update accounts set disabled_at = null where id = ${account}`.execute(store.database);
      assert.equal((await keys.verify(created.key)).ok, true);
    });

    it("keeps a key without a spend cap past the age bound while a change feed proves it heard every change, and drops it the moment one is heard", async () => {
      // A feed (PostgreSQL's `ChangeFeed`) told by the test: live, and what it heard.
      const feed = { received: 0, live: true, watched: (boundMs: number) => feed.live && boundMs === VERIFIED_KEY_MAX_AGE_MS };
      withChangeFeed(store.database, feed);
      const watchedKeys = new VerifiedKeys(store.database, { now: () => clock });
      const created = await createApiKey(store.database, { now: clock });
      assert.equal((await watchedKeys.verify(created.key)).ok, true);
      await revokeElsewhere(created.id);
      clock += 5 * VERIFIED_KEY_MAX_AGE_MS;
      assert.equal(watchedKeys.known(created.key)?.ok, true, "a write the feed did not tell of is not seen: the key came from memory");
      feed.received++;
      assert.equal(watchedKeys.known(created.key), undefined, "the feed heard a change: the cache started over");
      assert.deepEqual(await watchedKeys.verify(created.key), { ok: false, reason: "revoked" });

      const other = await createApiKey(store.database, { now: clock });
      assert.equal((await watchedKeys.verify(other.key)).ok, true);
      clock += WATCHED_KEY_MAX_AGE_MS - 1;
      assert.equal(watchedKeys.known(other.key)?.ok, true);
      clock += 1;
      assert.equal(watchedKeys.known(other.key), undefined, "no longer than the watched bound");
      assert.equal((await watchedKeys.verify(other.key)).ok, true);
      feed.live = false;
      clock += VERIFIED_KEY_MAX_AGE_MS;
      assert.equal(watchedKeys.known(other.key), undefined, "a feed that cannot prove itself live: the age bound again");
    });

    it("keeps a key with a spend cap no longer than the age bound, even while the feed is live (its spending is not notified)", async () => {
      withChangeFeed(store.database, { received: 0, watched: () => true });
      const watchedKeys = new VerifiedKeys(store.database, { now: () => clock });
      const capped = await createApiKey(store.database, { now: clock, spendCap: 1_000 });
      assert.equal((await watchedKeys.verify(capped.key)).ok, true);
      clock += VERIFIED_KEY_MAX_AGE_MS - 1;
      assert.equal(watchedKeys.known(capped.key)?.ok, true);
      clock += 1;
      assert.equal(watchedKeys.known(capped.key), undefined);
    });

    it("never caches a key over a revocation made while it was being read", async () => {
      const created = await createApiKey(store.database, { now: clock });
      const reading = keys.verify(created.key);
      await revokeApiKey(store.database, created.id, clock);
      await reading;
      assert.deepEqual(await keys.verify(created.key), { ok: false, reason: "revoked" });
    });
  });
}

describe("verified keys on SQLite, written by another process", () => {
  it("sees another connection's revocation within the foreign-change check interval", async () => {
    const store = await openTestDatabase("sqlite");
    // Another process's connection to the same file (the CLI's `keys revoke`).
    const other = openSqlite(path.join(store.dataDir, "turnpike.sqlite"));
    try {
      const keys = new VerifiedKeys(store.database);
      const created = await createApiKey(store.database);
      assert.equal((await keys.verify(created.key)).ok, true);
      assert.equal(await revokeApiKey(other, created.id), true);
      await sleep(FOREIGN_CHANGES_CHECK_MS + 5);
      assert.deepEqual(await keys.verify(created.key), { ok: false, reason: "revoked" });
    } finally {
      await other.destroy();
      await store.close();
    }
  });
});
