/**
 * Issue 20 row 5 (memory after bursts): the group commit's statements come in a few fixed shapes.
 * Each distinct SQL text is a statement the SQLite store prepares and keeps (up to 512), and a
 * multi-row INSERT's compiled program holds ~1.6 KB of native memory a row: with one shape per
 * batch size, bursts of streams filled that cache with hundreds of one-off statements (~200 MiB).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { createQueryId, sql, type KyselyPlugin } from "kysely";
import { backends, openTestDatabase } from "../../test/helpers/databases.ts";
import { USAGE_COLUMN_TYPES, writeUsageBatch, type CheckpointRow, type UsageRow } from "./lease-store.ts";
import { statementChunks } from "../store/statement-chunks.ts";
import { onCompiledQueries } from "../../test/helpers/compiled-queries.ts";

/** The SQL texts of every query run through the returned database (the SQLite store prepares each once). */
function recordingTexts<T>(database: import("kysely").Kysely<T>): { database: import("kysely").Kysely<T>; texts: Set<string> } {
  const texts = new Set<string>();
  const plugin: KyselyPlugin = {
    transformQuery: ({ node }) => {
      texts.add(database.getExecutor().compileQuery(node, createQueryId()).sql);
      return node;
    },
    transformResult: async ({ result }) => result,
  };
  // The usage records' upsert is compiled by its caller: its texts are seen here.
  return { database: onCompiledQueries(database.withPlugin(plugin), (query) => texts.add(query.sql)), texts };
}

/** A record of a lease (its checkpoint, if it had one, is deleted with it); without `reasoning_tokens` and `service_tier`, which the columns default. */
function usageRow(id: string): UsageRow {
  return {
    id,
    request_id: `req-${id}`,
    account_id: null,
    key_id: null,
    model: "bench",
    prompt_tokens: 7,
    cached_prompt_tokens: 0,
    completion_tokens: 3,
    usage_source: "upstream",
    cost: 0,
    latency_ms: 1,
    status: 200,
    finish_reason: "stop",
    stream: 1,
    created_at: 1,
    hold_id: "hold-none",
  };
}

function checkpointRow(id: string): CheckpointRow {
  return {
    id,
    hold_id: "hold-none",
    request_id: `req-${id}`,
    account_id: null,
    key_id: null,
    model: "bench",
    prompt_tokens: 7,
    cached_prompt_tokens: 0,
    completion_tokens: 2,
    reasoning_tokens: 0,
    usage_source: "counted",
    cost: 0,
    stream: 1,
    created_at: 1,
    updated_at: 2,
    service_tier: "default",
  };
}

test("statementChunks cuts rows into power-of-two chunks of at most 256, in order", () => {
  const rows = Array.from({ length: 1000 }, (_, index) => index);
  const chunks = statementChunks(rows);
  assert.deepEqual(
    chunks.map((chunk) => chunk.length),
    [256, 256, 256, 128, 64, 32, 8],
  );
  assert.deepEqual(chunks.flat(), rows);
  assert.deepEqual(statementChunks([]), []);
  const sizes = new Set<number>();
  for (let count = 1; count <= 700; count++) for (const chunk of statementChunks(rows.slice(0, count))) sizes.add(chunk.length);
  assert.deepEqual([...sizes].sort((a, b) => a - b), [1, 2, 4, 8, 16, 32, 64, 128, 256]);
});

test("group commits of 1 to 300 records and checkpoints use a few fixed SQL texts, and write every row (SQLite)", async () => {
  const store = await openTestDatabase("sqlite");
  try {
    const { database, texts } = recordingTexts(store.database);
    let written = 0;
    for (let size = 1; size <= 300; size++) {
      const records = Array.from({ length: size }, (_, index) => usageRow(`use-${size}-${index}`));
      // Checkpoints of running requests (a batch carries both), dropped again by the next batch's records.
      const checkpoints = Array.from({ length: size }, (_, index) => checkpointRow(`use-${size + 1}-${index}`));
      await writeUsageBatch(database, { records, checkpoints, dropCheckpoints: [] });
      written += size;
    }
    const counted = await store.database.selectFrom("usage_records").select((expression) => expression.fn.countAll<number>().as("rows")).executeTakeFirstOrThrow();
    assert.equal(Number(counted.rows), written);
    const open = await store.database.selectFrom("usage_checkpoints").select((expression) => expression.fn.countAll<number>().as("rows")).executeTakeFirstOrThrow();
    // Every checkpoint but the last batch's was replaced by its request's record.
    assert.equal(Number(open.rows), 300);
    const insertsAndDeletes = [...texts].filter((text) => /^(insert|delete)/i.test(text.trim()));
    // Three statement families (records, checkpoint deletes, checkpoint upserts) × 9 sizes at most; one text per batch size before.
    assert.ok(insertsAndDeletes.length <= 27, `${insertsAndDeletes.length} distinct INSERT/DELETE texts for batches of 1 to 300 rows`);
  } finally {
    await store.close();
  }
});

for (const backend of backends) {
  test(`records are written by one prepared text per row count, and a record already there is taken over only by a costlier one (${backend})`, async () => {
    const store = await openTestDatabase(backend);
    try {
      const full = (id: string, cost: number, holdId: string | null = null): UsageRow => ({
        ...usageRow(id),
        hold_id: holdId,
        reasoning_tokens: 1,
        service_tier: "flex",
        cost,
        account_id: null,
        key_id: null,
      });
      let written = 0;
      for (const size of [1, 2, 3, 7, 64, 300]) {
        // Records of no hold (an operator key's): one statement per chunk, no transaction when one chunk holds them.
        await writeUsageBatch(store.database, { records: Array.from({ length: size }, (_, index) => full(`use-${size}-${index}`, index)), checkpoints: [], dropCheckpoints: [] });
        written += size;
      }
      const rows = await store.database.selectFrom("usage_records").selectAll().orderBy("id").execute();
      assert.equal(rows.length, written);
      const one = rows.find((row) => row.id === "use-7-3")!;
      assert.deepEqual(
        { ...one, cost: Number(one.cost), created_at: Number(one.created_at) },
        { ...full("use-7-3", 3), cost: 3, created_at: 1 },
      );
      // The same id again: a cheaper record leaves it, a costlier one takes it over (as the sweeper's record gives way to the request's own).
      await writeUsageBatch(store.database, { records: [{ ...full("use-7-3", 2), status: 499 }], checkpoints: [], dropCheckpoints: [] });
      await writeUsageBatch(store.database, { records: [{ ...full("use-7-3", 9), status: 201, finish_reason: "length" }], checkpoints: [], dropCheckpoints: [] });
      const after = await store.database.selectFrom("usage_records").selectAll().where("id", "=", "use-7-3").executeTakeFirstOrThrow();
      assert.deepEqual([Number(after.cost), after.status, after.finish_reason, Number(await store.database.selectFrom("usage_records").select((expression) => expression.fn.countAll<number>().as("rows")).executeTakeFirstOrThrow().then((row) => row.rows))], [9, 201, "length", written]);
    } finally {
      await store.close();
    }
  });
}

test("on PostgreSQL a group commit's records, however many, are one statement of one JSON parameter, and every text and number comes back as written", async () => {
  const store = await openTestDatabase("postgres");
  try {
    const texts: string[] = [];
    const database = onCompiledQueries(store.database, (query) => texts.push(query.sql));
    // Texts a parameter list would have to escape: quotes, backslashes, a JSON look-alike, characters beyond the BMP.
    const odd = ['it\'s "quoted"', "back\\slash\\", '{"model":"x"}', "tab\tnew\nline", "ünïcödé 🦊", "%s $1 ?", "lone \ud800 surrogate"];
    const records = Array.from({ length: 300 }, (_, index): UsageRow => ({
      ...usageRow(`json-${String(index).padStart(3, "0")}`),
      hold_id: null,
      model: odd[index % odd.length]!,
      request_id: `req-${odd[(index + 1) % odd.length]}`,
      prompt_tokens: 2 ** 40 + index,
      cost: 2 ** 52 + index,
      created_at: 1_790_000_000_000 + index,
      ...(index % 2 === 0 ? { reasoning_tokens: index, service_tier: "priority" } : {}),
    }));
    await writeUsageBatch(database, { records, checkpoints: [], dropCheckpoints: [] });
    assert.deepEqual(
      texts.filter((text) => /^\s*insert/i.test(text)).length,
      1,
      texts.join("\n"),
    );
    const rows = await store.database.selectFrom("usage_records").selectAll().orderBy("id").execute();
    assert.equal(rows.length, 300);
    for (const [index, row] of rows.entries()) {
      const expected = records[index]!;
      assert.deepEqual(
        [row.id, row.model, row.request_id, Number(row.prompt_tokens), Number(row.cost), Number(row.created_at), row.reasoning_tokens, row.service_tier, row.usage_source, row.stream],
        [expected.id, expected.model.toWellFormed(), expected.request_id.toWellFormed(), expected.prompt_tokens, expected.cost, expected.created_at, expected.reasoning_tokens ?? 0, expected.service_tier ?? null, expected.usage_source, expected.stream],
      );
    }
    // Records of leases delete their requests' checkpoints: one statement too.
    texts.length = 0;
    const leased = Array.from({ length: 40 }, (_, index) => usageRow(`lease-${index}`));
    await writeUsageBatch(database, { records: leased, checkpoints: Array.from({ length: 40 }, (_, index) => checkpointRow(`lease-next-${index}`)), dropCheckpoints: [] });
    await writeUsageBatch(database, { records: Array.from({ length: 40 }, (_, index) => usageRow(`lease-next-${index}`)), checkpoints: [], dropCheckpoints: [] });
    assert.deepEqual(texts.filter((text) => /^\s*delete/i.test(text)).length, 2, texts.join("\n"));
    const open = await store.database.selectFrom("usage_checkpoints").select((expression) => expression.fn.countAll<number>().as("rows")).executeTakeFirstOrThrow();
    assert.equal(Number(open.rows), 0);
  } finally {
    await store.close();
  }
});

test("the JSON upsert reads every column of usage_records with the type the migrations gave it (PostgreSQL)", async () => {
  const store = await openTestDatabase("postgres");
  try {
    const columns = await sql<{ column_name: string; data_type: string }>`select column_name, data_type from information_schema.columns where table_schema = current_schema() and table_name = 'usage_records'`.execute(store.database);
    assert.deepEqual(Object.fromEntries(columns.rows.map((column) => [column.column_name, column.data_type])), USAGE_COLUMN_TYPES);
  } finally {
    await store.close();
  }
});
