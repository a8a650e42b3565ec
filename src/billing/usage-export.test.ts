/**
 * The usage export on both stores (real SQLite and this machine's real PostgreSQL): the records
 * of `[from, to)` oldest first, page boundaries that lose and repeat no row (records sharing a
 * created time included), account scoping, the record's types, and that it streams: one query
 * per page, the first rows yielded before the next page is read.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs, QueryResult, RootOperationNode, UnknownRow } from "kysely";
import { createAccount } from "../accounts/accounts.ts";
import { createApiKey, type CreatedApiKey } from "../auth/api-keys.ts";
import { newId } from "../store/ids.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../test/helpers/databases.ts";
import { writeUsageBatch, type UsageRow } from "./lease-store.ts";
import { EXPORT_PAGE_SIZE, exportUsageRecords, type ExportedRecord } from "./usage-export.ts";

/** A fixed start: every record's time is explicit. */
const T = Date.UTC(2026, 2, 1);
/** Records in the big batch: more than two pages. */
const MANY = 1_201;
/** Records of the big batch sharing each created time: 500 is no multiple of it, so page boundaries fall inside a tie. */
const TIE = 7;

/** Byte order, as SQLite's BINARY and PostgreSQL's C collation compare text. */
const byteOrder = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
const timeOrder = (a: { created_at: number; id: string }, b: { created_at: number; id: string }) => a.created_at - b.created_at || byteOrder(a.id, b.id);

/** A deterministic shuffle (a linear congruential generator), so that insertion order is no hint. */
function shuffled<T>(items: readonly T[], seed: number): T[] {
  const out = [...items];
  let state = seed;
  for (let index = out.length - 1; index > 0; index--) {
    state = (state * 1_103_515_245 + 12_345) % 2_147_483_648;
    const other = state % (index + 1);
    [out[index], out[other]] = [out[other]!, out[index]!];
  }
  return out;
}

/** Counts the SELECT statements run through the Kysely instance it is added to. */
class SelectCounter implements KyselyPlugin {
  selects = 0;
  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    if (args.node.kind === "SelectQueryNode") this.selects++;
    return args.node;
  }
  async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    return args.result;
  }
}

async function collect(records: AsyncIterable<ExportedRecord>): Promise<ExportedRecord[]> {
  const out: ExportedRecord[] = [];
  for await (const record of records) {
    out.push(record);
    assert.ok(out.length <= 10 * MANY, "the export comes to an end");
  }
  return out;
}

for (const backend of backends) {
  describe(`usage export (${backend})`, () => {
    let store: TestDatabase;
    let aliceId = "";
    let bobId = "";
    let aliceKey: CreatedApiKey;
    let operatorKey: CreatedApiKey;
    /** Every record written, as the export should read it back. */
    const written: ExportedRecord[] = [];

    function usageRow(input: { accountId: string | null; key: CreatedApiKey | null; createdAt: number; id?: string; stream?: boolean; index: number }): UsageRow {
      const row: UsageRow = {
        id: input.id ?? newId("use", input.createdAt),
        request_id: `req_${input.createdAt}_${input.index}`,
        account_id: input.accountId,
        key_id: input.key?.id ?? null,
        model: `model-${input.index % 3}`,
        prompt_tokens: 10 + input.index,
        cached_prompt_tokens: input.index % 5,
        completion_tokens: 2 * input.index,
        reasoning_tokens: 0,
        usage_source: "counted",
        cost: 3 * input.index + 1,
        latency_ms: 100 + input.index,
        status: input.index % 11 === 0 ? 500 : 200,
        finish_reason: input.index % 11 === 0 ? null : "stop",
        stream: input.stream === true ? 1 : 0,
        created_at: input.createdAt,
        hold_id: null,
        // Some served in the flex tier; the others recorded before tiers (null: the default tier).
        service_tier: input.index % 3 === 0 ? "flex" : null,
      };
      written.push({
        id: row.id,
        request_id: row.request_id,
        created_at: row.created_at,
        account_id: input.accountId,
        key_id: input.key?.id ?? null,
        key_name: input.key?.name ?? null,
        key_prefix: input.key?.displayPrefix ?? null,
        model: row.model,
        prompt_tokens: row.prompt_tokens,
        cached_prompt_tokens: row.cached_prompt_tokens,
        completion_tokens: row.completion_tokens,
        cost: row.cost,
        latency_ms: row.latency_ms,
        status: row.status,
        finish_reason: row.finish_reason ?? null,
        stream: input.stream === true,
        service_tier: row.service_tier ?? "default",
      });
      return row;
    }

    /** The records written for `account` (as the export scopes it) in `[from, to)`, oldest first. */
    function expected(accountId: string | null | undefined, from: number, to: number): ExportedRecord[] {
      return written
        .filter((record) => record.created_at >= from && record.created_at < to && (accountId === undefined || record.account_id === accountId))
        .sort(timeOrder);
    }

    before(async () => {
      store = await openTestDatabase(backend);
      aliceId = (await createAccount(store.database, { email: `alice-${Math.random().toString(36).slice(2)}@example.com`, now: T })).id;
      bobId = (await createAccount(store.database, { email: `bob-${Math.random().toString(36).slice(2)}@example.com`, now: T })).id;
      aliceKey = await createApiKey(store.database, { accountId: aliceId, name: 'build,"ci" box', now: T });
      const bobKey = await createApiKey(store.database, { accountId: bobId, name: "bob's", now: T });
      operatorKey = await createApiKey(store.database, { accountId: null, name: "operator", now: T });

      // Alice's big batch: MANY records in one group commit, TIE to a millisecond, inserted in a
      // shuffled order with ids made in another shuffled order, so that neither hints at the order.
      const times = Array.from({ length: MANY }, (_, index) => T + 1_000 + Math.floor(index / TIE));
      const ids = shuffled(times, 7).map((createdAt) => newId("use", createdAt));
      const big = shuffled(
        times.map((createdAt, index) => usageRow({ accountId: aliceId, key: aliceKey, createdAt, id: ids[index], stream: index % 2 === 0, index })),
        11,
      );
      await writeUsageBatch(store.database, { records: big, checkpoints: [], dropCheckpoints: [] });

      // Bob's and the operator's on the same milliseconds as some of alice's, and records just
      // outside and exactly on the edges of the range the tests read.
      const others = [
        usageRow({ accountId: bobId, key: bobKey, createdAt: T + 1_000, index: 1 }),
        usageRow({ accountId: bobId, key: bobKey, createdAt: T + 1_050, index: 2, stream: true }),
        usageRow({ accountId: null, key: operatorKey, createdAt: T + 1_000, index: 3 }),
        usageRow({ accountId: null, key: operatorKey, createdAt: T + 1_100, index: 4 }),
        usageRow({ accountId: null, key: null, createdAt: T + 1_100, index: 5 }),
        usageRow({ accountId: aliceId, key: aliceKey, createdAt: T + 999, index: 6 }),
        usageRow({ accountId: aliceId, key: aliceKey, createdAt: T + 2_000, index: 7 }),
        usageRow({ accountId: aliceId, key: null, createdAt: T + 2_001, index: 8 }),
      ];
      await writeUsageBatch(store.database, { records: others, checkpoints: [], dropCheckpoints: [] });
    });
    after(async () => {
      await store?.close();
    });

    it("reads more than two pages of one account's records, oldest first, ties ordered by id, none lost or repeated", async () => {
      const from = T + 1_000;
      const to = T + 2_000;
      const records = await collect(exportUsageRecords(store.database, { accountId: aliceId, from, to }));
      assert.equal(records.length, MANY);
      assert.ok(MANY > 2 * EXPORT_PAGE_SIZE);
      assert.equal(new Set(records.map((record) => record.id)).size, MANY, "no record twice");
      assert.deepEqual(records, expected(aliceId, from, to));
      for (const pageSize of [TIE, 499]) {
        assert.deepEqual(await collect(exportUsageRecords(store.database, { accountId: aliceId, from, to, pageSize })), records, `pages of ${pageSize}`);
      }
      // A row a page, over the first five milliseconds: every boundary falls on a tie.
      const start = await collect(exportUsageRecords(store.database, { accountId: aliceId, from, to: from + 5, pageSize: 1 }));
      assert.equal(start.length, 5 * TIE);
      assert.deepEqual(start, records.slice(0, 5 * TIE));
    });

    it("takes records from `from` up to but not including `to`", async () => {
      const records = await collect(exportUsageRecords(store.database, { accountId: aliceId, from: T + 999, to: T + 2_001 }));
      assert.equal(records.length, MANY + 2);
      assert.equal(records[0]!.created_at, T + 999, "one exactly at `from` is in");
      assert.equal(records.at(-1)!.created_at, T + 2_000);
      assert.ok(records.every((record) => record.created_at !== T + 2_001), "one exactly at `to` is out");
      assert.deepEqual(await collect(exportUsageRecords(store.database, { accountId: aliceId, from: T + 2_002, to: T + 3_000 })), []);
    });

    it("scopes to one account, to the operator's keys (null account), or to everyone", async () => {
      const from = T;
      const to = T + 3_000;
      const bob = await collect(exportUsageRecords(store.database, { accountId: bobId, from, to }));
      assert.deepEqual(
        bob.map((record) => record.request_id),
        [`req_${T + 1_000}_1`, `req_${T + 1_050}_2`],
      );
      const operator = await collect(exportUsageRecords(store.database, { accountId: null, from, to }));
      assert.deepEqual(operator, expected(null, from, to));
      assert.equal(operator.length, 3);
      assert.ok(operator.every((record) => record.account_id === null));
      const everyone = await collect(exportUsageRecords(store.database, { accountId: undefined, from, to }));
      assert.equal(everyone.length, written.length);
      assert.deepEqual(everyone, expected(undefined, from, to));
      assert.deepEqual(new Set(everyone.map((record) => record.account_id)), new Set([aliceId, bobId, null]));
      const missing = await collect(exportUsageRecords(store.database, { accountId: "acct_nobody", from, to }));
      assert.deepEqual(missing, []);
    });

    it("reads each record with numbers as numbers, stream as a boolean, and the key's name and prefix", async () => {
      const records = await collect(exportUsageRecords(store.database, { accountId: undefined, from: T, to: T + 3_000 }));
      for (const record of records) {
        for (const field of ["created_at", "prompt_tokens", "cached_prompt_tokens", "completion_tokens", "cost", "latency_ms", "status"] as const) {
          assert.equal(typeof record[field], "number", `${field} is a number`);
        }
        assert.equal(typeof record.stream, "boolean");
      }
      assert.deepEqual(new Set(records.map((record) => record.stream)), new Set([true, false]));
      const keyed = records.find((record) => record.request_id === `req_${T + 2_000}_7`)!;
      assert.deepEqual(keyed, {
        id: keyed.id,
        request_id: `req_${T + 2_000}_7`,
        created_at: T + 2_000,
        account_id: aliceId,
        key_id: aliceKey.id,
        key_name: 'build,"ci" box',
        key_prefix: aliceKey.displayPrefix,
        model: "model-1",
        prompt_tokens: 17,
        cached_prompt_tokens: 2,
        completion_tokens: 14,
        cost: 22,
        latency_ms: 107,
        status: 200,
        finish_reason: "stop",
        stream: false,
        // Recorded before tiers: the default one.
        service_tier: "default",
      });
      assert.equal(records.find((record) => record.request_id === `req_${T + 999}_6`)!.service_tier, "flex");
      const keyless = records.find((record) => record.request_id === `req_${T + 2_001}_8`)!;
      assert.equal(keyless.key_id, null);
      assert.equal(keyless.key_name, null);
      assert.equal(keyless.key_prefix, null);
      const failed = records.find((record) => record.status === 500)!;
      assert.equal(failed.finish_reason, null);
    });

    it("streams: one query a page, the first rows yielded before the next page is read", async () => {
      const counter = new SelectCounter();
      const counted = store.database.withPlugin(counter);
      const records = exportUsageRecords(counted, { accountId: aliceId, from: T + 1_000, to: T + 2_000 });
      assert.equal(counter.selects, 0, "nothing is read before the first row is asked for");
      const first = await records.next();
      assert.equal(first.done, false);
      assert.equal(counter.selects, 1, "the first row comes after one query");
      let read = 1;
      while (read < EXPORT_PAGE_SIZE) {
        assert.equal((await records.next()).done, false);
        read++;
      }
      assert.equal(counter.selects, 1, "a whole page from one query");
      assert.equal((await records.next()).done, false);
      read++;
      assert.equal(counter.selects, 2, "the second page is read when its first row is asked for");
      for (let next = await records.next(); next.done !== true; next = await records.next()) read++;
      assert.equal(read, MANY);
      assert.equal(counter.selects, Math.ceil(MANY / EXPORT_PAGE_SIZE), "a short last page ends it without another query");
    });

    it("stops reading when the consumer stops", async () => {
      const counter = new SelectCounter();
      const counted = store.database.withPlugin(counter);
      let read = 0;
      for await (const record of exportUsageRecords(counted, { accountId: aliceId, from: T + 1_000, to: T + 2_000 })) {
        assert.equal(record.account_id, aliceId);
        if (++read === 10) break;
      }
      assert.equal(counter.selects, 1);
    });
  });
}
