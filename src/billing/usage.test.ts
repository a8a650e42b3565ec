/**
 * Usage queries on both stores: grouping by day, model and key in SQL, and recent requests.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createAccount } from "../accounts/accounts.ts";
import { createApiKey } from "../auth/api-keys.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../test/helpers/databases.ts";
import { queryUsage, recentRequests, recordUsage } from "./usage.ts";

const DAY = 86_400_000;
const day0 = Date.UTC(2026, 10, 20);

for (const backend of backends) {
  describe(`usage queries (${backend})`, () => {
    let store: TestDatabase;
    let accountId: string;
    let otherId: string;
    let keyA: string;
    let keyB: string;
    before(async () => {
      store = await openTestDatabase(backend);
      accountId = (await createAccount(store.database, { email: `usage-${Math.random()}@example.com` })).id;
      otherId = (await createAccount(store.database, { email: `other-${Math.random()}@example.com` })).id;
      keyA = (await createApiKey(store.database, { name: "alpha", accountId })).id;
      keyB = (await createApiKey(store.database, { name: "beta", accountId })).id;
      const rows: Array<[string, string, number, number, number, number]> = [
        // key, model, time, prompt, completion, cost
        [keyA, "story", day0 + 1000, 10, 5, 20],
        [keyA, "story", day0 + DAY - 1, 11, 6, 23],
        [keyB, "random", day0 + DAY, 12, 7, 26],
        [keyB, "story", day0 + 2 * DAY + 5, 13, 8, 29],
      ];
      for (const [index, [key, model, time, prompt, completion, cost]] of rows.entries()) {
        await recordUsage(store.database, {
          request_id: `req_${index}`,
          account_id: accountId,
          key_id: key,
          model,
          prompt_tokens: prompt,
          cached_prompt_tokens: index,
          completion_tokens: completion,
          cost,
          latency_ms: 100 + index,
          status: 200,
          finish_reason: "stop",
          stream: index % 2,
          created_at: time,
        });
      }
      await recordUsage(store.database, {
        request_id: "req_other",
        account_id: otherId,
        key_id: null,
        model: "story",
        prompt_tokens: 1000,
        cached_prompt_tokens: 0,
        completion_tokens: 1000,
        cost: 1000,
        latency_ms: 1,
        status: 200,
        finish_reason: "stop",
        stream: 0,
        created_at: day0 + 10,
      });
    });
    after(async () => {
      await store?.close();
    });

    it("groups by UTC day, with exact sums", async () => {
      const rows = await queryUsage(store.database, { accountId, from: day0, to: day0 + 3 * DAY, groupBy: "day" });
      assert.deepEqual(rows, [
        { group: "2026-11-20", requests: 2, prompt_tokens: 21, cached_prompt_tokens: 1, completion_tokens: 11, cost: 43 },
        { group: "2026-11-21", requests: 1, prompt_tokens: 12, cached_prompt_tokens: 2, completion_tokens: 7, cost: 26 },
        { group: "2026-11-22", requests: 1, prompt_tokens: 13, cached_prompt_tokens: 3, completion_tokens: 8, cost: 29 },
      ]);
    });

    it("groups by model and by key, within [from, to)", async () => {
      const byModel = await queryUsage(store.database, { accountId, from: day0, to: day0 + 2 * DAY, groupBy: "model" });
      assert.deepEqual(
        byModel.map((row) => [row.group, row.requests, row.cost]),
        [
          ["random", 1, 26],
          ["story", 2, 43],
        ],
      );
      const byKey = await queryUsage(store.database, { accountId, from: day0, to: day0 + 3 * DAY, groupBy: "key" });
      assert.deepEqual(
        byKey.map((row) => [row.group, row.requests, row.cost]).sort(),
        [
          [keyA, 2, 43],
          [keyB, 2, 55],
        ].sort(),
      );
    });

    it("never mixes in another account's usage", async () => {
      const mine = await queryUsage(store.database, { accountId, from: 0, to: day0 + 10 * DAY, groupBy: "model" });
      assert.equal(
        mine.reduce((sum, row) => sum + row.cost, 0),
        98,
      );
      const theirs = await queryUsage(store.database, { accountId: otherId, from: 0, to: day0 + 10 * DAY, groupBy: "model" });
      assert.deepEqual(theirs.map((row) => row.cost), [1000]);
    });

    it("lists recent requests newest first, with key names and times in seconds, and pages with after", async () => {
      const first = await recentRequests(store.database, { accountId, limit: 3 });
      assert.deepEqual(first.map((row) => row.request_id), ["req_3", "req_2", "req_1"]);
      assert.equal(first[0]!.key_name, "beta");
      assert.equal(first[0]!.stream, true);
      assert.equal(first[0]!.cost, 29);
      assert.equal(first[0]!.created, Math.floor((day0 + 2 * DAY + 5) / 1000));
      const next = await recentRequests(store.database, { accountId, limit: 3, after: first.at(-1)!.id });
      assert.deepEqual(next.map((row) => row.request_id), ["req_0"]);
    });

    it("keeps only requests made before a time (milliseconds here; the route takes seconds)", async () => {
      const before = await recentRequests(store.database, { accountId, limit: 10, before: day0 + DAY });
      assert.deepEqual(before.map((row) => row.request_id), ["req_1", "req_0"]);
    });
  });
}
