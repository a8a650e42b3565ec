/**
 * The billing history on both stores (real SQLite and this machine's real PostgreSQL): what it
 * lists and leaves out, `balance_after` against the ledger, and paging with `before` that loses
 * and repeats nothing, entries sharing a created time included.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createAccount } from "../accounts/accounts.ts";
import { createApiKey } from "../auth/api-keys.ts";
import { newId } from "../store/ids.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../test/helpers/databases.ts";
import { billingHistory, HISTORY_KINDS, UnknownCursorError, type HistoryEntry } from "./history.ts";
import { checkLedger, expireDueCredit, grantCredit, placeHold, releaseHold, settleHold } from "./ledger.ts";
import { closeLease, writeUsageBatch, type UsageRow } from "./lease-store.ts";
import { savePlan } from "./plans-store.ts";

const DAY = 24 * 60 * 60 * 1000;
/** A fixed start, so that every time in these tests is explicit. */
const T = Date.UTC(2026, 0, 10);
const TTL = 60_000;

/** Byte order, as SQLite's BINARY and PostgreSQL's C collation compare text. */
const byteOrder = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

for (const backend of backends) {
  describe(`billing history (${backend})`, () => {
    let store: TestDatabase;
    before(async () => {
      store = await openTestDatabase(backend);
      const plan = { price: { amount: 1000, currency: "usd" }, credit: 1000, days: null, rpm: null, tpm: null, models: null, weight: 1, service_tiers: { default: 1 } };
      await savePlan(store.database, { ...plan, id: "pro", name: "Pro" }, "admin", T);
      await savePlan(store.database, { ...plan, id: "starter", name: "Starter" }, "admin", T);
    });
    after(async () => {
      await store?.close();
    });

    async function account(name: string) {
      return createAccount(store.database, { email: `${name}-${Math.random().toString(36).slice(2)}@example.com`, now: T });
    }

    /** Every page of the account's history, `limit` at a time, following `before`. */
    async function allPages(accountId: string, limit: number): Promise<HistoryEntry[][]> {
      const pages: HistoryEntry[][] = [];
      let cursor: string | undefined;
      for (;;) {
        const page = await billingHistory(store.database, { accountId, limit, before: cursor });
        pages.push(page.data);
        if (!page.hasMore) return pages;
        assert.equal(page.data.length, limit, "a page with more after it is full");
        assert.ok(pages.length <= 100, "paging comes to an end");
        cursor = page.data.at(-1)!.id;
      }
    }

    /** The listed kinds of the account's ledger, newest first, each with the running sum up to it, as read straight from the table. */
    async function expectedHistory(accountId: string) {
      const rows = await store.database.selectFrom("ledger_entries").select(["id", "kind", "amount", "created_at"]).where("account_id", "=", accountId).execute();
      const listed = rows
        .filter((row) => (HISTORY_KINDS as readonly string[]).includes(row.kind))
        .map((row) => ({ id: row.id, amount: Number(row.amount), created_at: Number(row.created_at) }))
        .sort((a, b) => a.created_at - b.created_at || byteOrder(a.id, b.id));
      let running = 0;
      return listed.map((row) => ({ id: row.id, amount: row.amount, balance_after: (running += row.amount) })).reverse();
    }

    const summary = (entries: readonly HistoryEntry[]) => entries.map((entry) => ({ id: entry.id, amount: entry.amount, balance_after: entry.balance_after }));

    it("lists grants, usage charges (own holds and leases) and expiries newest first, described, and leaves holds and releases out", async () => {
      const owner = await account("kinds");
      const key = await createApiKey(store.database, { accountId: owner.id, name: "ci box", now: T });

      // Credit that expires unspent, then purchases, a code and a plain grant.
      await grantCredit(store.database, { accountId: owner.id, amount: 300, source: `admin:${owner.id}:expiring`, days: 1, now: T });
      assert.equal(await expireDueCredit(store.database, owner.id, T + DAY), 300);
      let now = T + DAY + 1000;
      await grantCredit(store.database, { accountId: owner.id, amount: 10_000, source: `checkout:cs_${owner.id}`, planId: "pro", now });
      await grantCredit(store.database, { accountId: owner.id, amount: 500, source: `code:${owner.id}`, planId: "starter", now: (now += 1000) });
      await grantCredit(store.database, { accountId: owner.id, amount: 50, source: `test:${owner.id}`, now: (now += 1000) });

      // A request settled with its key, one without a key, one released, one settled at no cost.
      const settled = await placeHold(store.database, { accountId: owner.id, keyId: key.id, amount: 200, nodeId: "n1", ttlMs: TTL, now: (now += 1000) });
      assert.equal(await settleHold(store.database, settled, 37, (now += 500)), 37);
      const keyless = await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 100, nodeId: "n1", ttlMs: TTL, now: (now += 1000) });
      assert.equal(await settleHold(store.database, keyless, 8, (now += 500)), 8);
      const released = await placeHold(store.database, { accountId: owner.id, keyId: key.id, amount: 100, nodeId: "n1", ttlMs: TTL, now: (now += 1000) });
      await releaseHold(store.database, released, (now += 500));
      const free = await placeHold(store.database, { accountId: owner.id, keyId: key.id, amount: 100, nodeId: "n1", ttlMs: TTL, now: (now += 1000) });
      assert.equal(await settleHold(store.database, free, 0, (now += 500)), 0);

      // A credit lease: one hold, records written against it in a group commit, charged their sum on closing.
      const lease = await placeHold(store.database, { accountId: owner.id, keyId: key.id, amount: 1000, nodeId: "n1", ttlMs: TTL, now: (now += 1000) });
      const records: UsageRow[] = [10, 20, 30].map((cost, index) => ({
        id: newId("use", now + index),
        request_id: `lease_${owner.id}_${index}`,
        account_id: owner.id,
        key_id: key.id,
        model: "m",
        prompt_tokens: 1,
        cached_prompt_tokens: 0,
        completion_tokens: 1,
        cost,
        latency_ms: 1,
        status: 200,
        finish_reason: "stop",
        stream: 0,
        created_at: now + index,
        hold_id: lease,
      }));
      await writeUsageBatch(store.database, { records, checkpoints: [], dropCheckpoints: [] });
      assert.equal(await closeLease(store.database, lease, (now += 1000)), 60);
      const end = now;

      const page = await billingHistory(store.database, { accountId: owner.id, limit: 100 });
      assert.equal(page.hasMore, false);
      assert.deepEqual(
        page.data.map(({ kind, source, description, amount, plan, key_name }) => ({ kind, source, description, amount, plan, key_name })),
        [
          { kind: "settle", source: "usage", description: 'Usage with key "ci box"', amount: -60, plan: null, key_name: "ci box" },
          { kind: "settle", source: "usage", description: "Usage", amount: -8, plan: null, key_name: null },
          { kind: "settle", source: "usage", description: 'Usage with key "ci box"', amount: -37, plan: null, key_name: "ci box" },
          { kind: "grant", source: "grant", description: "Credit granted", amount: 50, plan: null, key_name: null },
          { kind: "grant", source: "code", description: "Redeemed a code: Starter", amount: 500, plan: "starter", key_name: null },
          { kind: "grant", source: "purchase", description: "Purchase: Pro", amount: 10_000, plan: "pro", key_name: null },
          { kind: "expiry", source: "expiry", description: "Unspent credit expired", amount: -300, plan: null, key_name: null },
          { kind: "grant", source: "admin", description: "Granted by an administrator", amount: 300, plan: null, key_name: null },
        ],
      );
      assert.ok(page.data.every((entry) => entry.object === "billing.entry"));
      assert.equal(page.data[0]!.created, Math.floor(end / 1000), "times in seconds");
      assert.equal(page.data.at(-1)!.created, Math.floor(T / 1000));

      const holdsAndReleases = await store.database.selectFrom("ledger_entries").select("id").where("account_id", "=", owner.id).where("kind", "in", ["hold", "release"]).execute();
      assert.equal(holdsAndReleases.length, 10, "five holds, each released");
      const listed = new Set(page.data.map((entry) => entry.id));
      assert.ok(holdsAndReleases.every((entry) => !listed.has(entry.id)), "holds and releases are left out");

      assert.deepEqual(summary(page.data), await expectedHistory(owner.id), "balance_after is the running sum of the listed entries");
      const check = await checkLedger(store.database, owner.id);
      assert.equal(check.activeHolds, 0);
      assert.equal(page.data[0]!.balance_after, 10_445);
      assert.equal(page.data[0]!.balance_after, check.balance, "no hold open: the newest balance is the account's");
      assert.equal(page.data[0]!.balance_after, check.sumOfEntries);
    });

    it("counts credit a running request reserves as the account's until it settles", async () => {
      const owner = await account("running");
      await grantCredit(store.database, { accountId: owner.id, amount: 1000, source: `test:${owner.id}`, now: T });
      const hold = await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 300, nodeId: "n1", ttlMs: TTL, now: T + 1 });
      const running = await checkLedger(store.database, owner.id);
      const during = await billingHistory(store.database, { accountId: owner.id, limit: 10 });
      assert.deepEqual(summary(during.data).map((entry) => entry.balance_after), [1000]);
      assert.equal(during.data[0]!.balance_after, running.balance + running.heldActive);
      await settleHold(store.database, hold, 120, T + 2);
      const settled = await billingHistory(store.database, { accountId: owner.id, limit: 10 });
      assert.deepEqual(summary(settled.data).map((entry) => entry.balance_after), [880, 1000]);
      assert.equal(settled.data[0]!.balance_after, (await checkLedger(store.database, owner.id)).balance);
    });

    it("lists a refund entry as a refund (no ledger function writes one yet)", async () => {
      const owner = await account("refund");
      await grantCredit(store.database, { accountId: owner.id, amount: 1000, source: `checkout:cs_refund_${owner.id}`, planId: "pro", now: T });
      await store.database
        .insertInto("ledger_entries")
        .values({ id: newId("le", T + 1), account_id: owner.id, kind: "refund", amount: -1000, lot_id: null, hold_id: null, created_at: T + 1 })
        .execute();
      const page = await billingHistory(store.database, { accountId: owner.id, limit: 10 });
      assert.deepEqual(
        page.data.map(({ kind, source, description, amount, balance_after }) => ({ kind, source, description, amount, balance_after })),
        [
          { kind: "refund", source: "refund", description: "Refund", amount: -1000, balance_after: 0 },
          { kind: "grant", source: "purchase", description: "Purchase: Pro", amount: 1000, balance_after: 1000 },
        ],
      );
    });

    it("pages with before across entries sharing a created time, losing and repeating none, never showing another account's", async () => {
      const alice = await account("alice");
      const bob = await account("bob");
      // Two accounts' entries interleaved on two milliseconds, back and forth: the ids of entries
      // sharing a time then differ only in their random part, so only ids can order them.
      for (let index = 0; index < 12; index++) {
        const now = T + (index % 2);
        await grantCredit(store.database, { accountId: alice.id, amount: 1000 + index, source: `test:${alice.id}:${index}`, now });
        await grantCredit(store.database, { accountId: bob.id, amount: 2000 + index, source: `test:${bob.id}:${index}`, now });
      }
      for (let index = 0; index < 6; index++) {
        const hold = await placeHold(store.database, { accountId: alice.id, keyId: null, amount: 50, nodeId: "n1", ttlMs: TTL, now: T + (index % 2) });
        await settleHold(store.database, hold, index + 1, T + ((index + 1) % 2));
      }
      const times = await store.database.selectFrom("ledger_entries").select("created_at").distinct().where("account_id", "=", alice.id).execute();
      assert.deepEqual(times.map((row) => Number(row.created_at)).sort(), [T, T + 1], "every entry on one of two milliseconds");

      const expected = await expectedHistory(alice.id);
      assert.equal(expected.length, 18);
      const whole = await billingHistory(store.database, { accountId: alice.id, limit: 100 });
      assert.deepEqual(summary(whole.data), expected, "ids order entries of the same time, as the balance sums them");
      assert.equal(whole.data[0]!.balance_after, (await checkLedger(store.database, alice.id)).balance);

      for (const limit of [1, 2, 5, 7, 17, 18, 19]) {
        const pages = await allPages(alice.id, limit);
        assert.equal(pages.length, Math.max(1, Math.ceil(18 / limit)), `limit ${limit}: pages`);
        const paged = pages.flat();
        assert.equal(new Set(paged.map((entry) => entry.id)).size, paged.length, `limit ${limit}: none repeated`);
        assert.deepEqual(paged, whole.data, `limit ${limit}: the pages join up, balances included`);
      }

      const bobs = await allPages(bob.id, 5);
      const bobIds = new Set(bobs.flat().map((entry) => entry.id));
      assert.equal(bobIds.size, 12);
      assert.ok(whole.data.every((entry) => !bobIds.has(entry.id)), "alice's history has none of bob's entries");
      assert.deepEqual(summary(bobs.flat()), await expectedHistory(bob.id));
    });

    it("answers an empty page for an account with no entries, and says there is no more at exactly the limit", async () => {
      const empty = await account("empty");
      assert.deepEqual(await billingHistory(store.database, { accountId: empty.id, limit: 20 }), { data: [], hasMore: false });
      const owner = await account("exact");
      for (let index = 0; index < 3; index++) await grantCredit(store.database, { accountId: owner.id, amount: 1, source: `test:${owner.id}:${index}`, now: T + index });
      assert.equal((await billingHistory(store.database, { accountId: owner.id, limit: 3 })).hasMore, false);
      assert.equal((await billingHistory(store.database, { accountId: owner.id, limit: 2 })).hasMore, true);
      const last = (await billingHistory(store.database, { accountId: owner.id, limit: 3 })).data.at(-1)!;
      assert.deepEqual(await billingHistory(store.database, { accountId: owner.id, limit: 3, before: last.id }), { data: [], hasMore: false });
    });

    it("refuses a cursor that is no entry of the account's history: unknown, a hold's entry, another account's", async () => {
      const owner = await account("cursor");
      const other = await account("cursor-other");
      await grantCredit(store.database, { accountId: owner.id, amount: 100, source: `test:${owner.id}`, now: T });
      await grantCredit(store.database, { accountId: other.id, amount: 100, source: `test:${other.id}`, now: T });
      await placeHold(store.database, { accountId: owner.id, keyId: null, amount: 10, nodeId: "n1", ttlMs: TTL, now: T + 1 });
      const holdEntry = await store.database.selectFrom("ledger_entries").select("id").where("account_id", "=", owner.id).where("kind", "=", "hold").executeTakeFirstOrThrow();
      const othersEntry = (await billingHistory(store.database, { accountId: other.id, limit: 1 })).data[0]!.id;
      for (const cursor of ["le_nothing", holdEntry.id, othersEntry]) {
        await assert.rejects(billingHistory(store.database, { accountId: owner.id, limit: 10, before: cursor }), (error: unknown) => {
          assert.ok(error instanceof UnknownCursorError);
          assert.equal(error.message, cursor);
          return true;
        });
      }
    });
  });
}
