/**
 * The change feed on this machine's PostgreSQL: what migration 0015's triggers notify and what
 * they leave out, another schema's changes ignored, and a feed whose connection is cut stops
 * proving itself live, then listens again.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import pg from "pg";
import { sql } from "kysely";
import { createApiKey, revokeApiKey } from "../auth/api-keys.ts";
import { createAccount } from "../accounts/accounts.ts";
import { openTestDatabase, postgresUrl, type TestDatabase } from "../../test/helpers/databases.ts";
import { ChangeFeed, type ChangeFeedEvent } from "./change-feed.ts";

/** Polls `condition` every 20 ms for up to `ms`; whether it held. */
async function within(ms: number, condition: () => boolean): Promise<boolean> {
  const deadline = performance.now() + ms;
  while (performance.now() < deadline) {
    if (condition()) return true;
    await delay(20);
  }
  return condition();
}

describe("the PostgreSQL change feed", { timeout: 60_000 }, () => {
  let store: TestDatabase;
  let other: TestDatabase;
  let feed: ChangeFeed;
  const events: ChangeFeedEvent[] = [];

  before(async () => {
    store = await openTestDatabase("postgres");
    other = await openTestDatabase("postgres");
    feed = new ChangeFeed({ url: store.databaseUrl!, onEvent: (event) => events.push(event), heartbeatMs: 50 });
    await feed.start();
  });
  after(async () => {
    await feed?.close();
    await store?.close();
    await other?.close();
  });

  it("proves itself live once a heartbeat came back", async () => {
    assert.ok(await within(2_000, () => feed.watched(1_000)), "a heartbeat came back");
    assert.deepEqual(events.map((event) => event.kind), ["listening"]);
  });

  it("hears a key revoked, an account disabled or given another plan, a plan changed, and not a charge, a touch or a balance change", async () => {
    const { database } = store;
    const account = await createAccount(database, { email: `feed-${Date.now()}@example.com` });
    const record = await createApiKey(database, { name: "feed", accountId: account.id });
    // What a cache does not keep changes often and is not notified.
    await within(300, () => false);
    const quiet = feed.received;
    await database.updateTable("api_keys").set({ spent: 5, reserved: 3, last_used_at: Date.now() }).where("id", "=", record.id).execute();
    await database.updateTable("accounts").set({ balance: 123 }).where("id", "=", account.id).execute();
    assert.equal(await within(300, () => feed.received !== quiet), false, "charges, touches and balances are not notified");
    await revokeApiKey(database, record.id);
    assert.ok(await within(1_000, () => feed.received > quiet), "a revocation is heard");
    const revoked = feed.received;
    await database.updateTable("accounts").set({ disabled_at: Date.now() }).where("id", "=", account.id).execute();
    assert.ok(await within(1_000, () => feed.received > revoked), "a disabled account is heard");
    const disabled = feed.received;
    await createApiKey(database, { name: "new", accountId: account.id });
    assert.ok(await within(1_000, () => feed.received > disabled), "a new key is heard");
    const created = feed.received;
    await database.updateTable("accounts").set({ plan_id: null }).where("id", "=", account.id).execute();
    assert.ok(await within(1_000, () => feed.received > created), "an account's plan changed is heard");
    const replanned = feed.received;
    await sql`UPDATE plans SET name = name WHERE false`.execute(database);
    assert.ok(await within(1_000, () => feed.received > replanned), "a plan changed is heard");
  });

  it("does not hear a write rolled back, nor another schema's", async () => {
    const before = feed.received;
    await createAccount(other.database, { email: `other-${Date.now()}@example.com` });
    await sql`UPDATE accounts SET disabled_at = 1`.execute(other.database);
    await store.database
      .transaction()
      .execute(async (transaction) => {
        await sql`UPDATE api_keys SET revoked_at = 1 WHERE false`.execute(transaction);
        throw new Error("rolled back");
      })
      .catch(() => undefined);
    assert.equal(await within(400, () => feed.received !== before), false);
  });

  it("counts a cut connection as a change, and listens again", async () => {
    assert.ok(await within(2_000, () => feed.watched(500)));
    const before = feed.received;
    const admin = new pg.Client({ connectionString: postgresUrl });
    await admin.connect();
    try {
      const { rowCount } = await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'turnpike-change-feed' AND query LIKE 'NOTIFY turnpike_beat_%' AND pid <> pg_backend_pid()");
      assert.ok((rowCount ?? 0) >= 1, "the feed's connection was found");
    } finally {
      await admin.end();
    }
    assert.ok(await within(2_000, () => events.some((event) => event.kind === "lost")), "the loss is told");
    assert.ok(await within(5_000, () => events.at(-1)?.kind === "listening" && feed.watched(500)), "listening again");
    assert.ok(feed.received > before, "what was written meanwhile was not heard: caches start over");
  });

  it("never proves itself where it cannot listen, and says so", async () => {
    const failures: ChangeFeedEvent[] = [];
    const nowhere = new ChangeFeed({ url: postgresUrl.replace(/\/[^/?]*(\?.*)?$/, "/turnpike_no_such_database"), onEvent: (event) => failures.push(event), heartbeatMs: 50 });
    await nowhere.start();
    try {
      assert.equal(nowhere.watched(60_000), false);
      assert.equal(failures[0]?.kind, "failed");
    } finally {
      await nowhere.close();
    }
  });
});
