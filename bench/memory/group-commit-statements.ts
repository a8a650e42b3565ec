/**
 * The group commit's statements and SQLite's statement cache, alone: `--batches` group commits
 * (`writeUsageBatch`) of records and checkpoints whose sizes are drawn from 1 to `--most` rows
 * (a fixed sequence), on a SQLite store in a temporary directory, in this process. Prints RSS
 * and the V8 heap before and after (after a GC), and how many distinct INSERT/DELETE texts the
 * batches made: each is a statement the store prepares and keeps (up to 512).
 *
 *   node_modules/.bin/node --expose-gc bench/memory/group-commit-statements.ts [--batches 600] [--most 500]
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { createQueryId, type KyselyPlugin } from "kysely";
import { openStore } from "../../src/store/open.ts";
import { writeUsageBatch } from "../../src/billing/lease-store.ts";

const { values: flags } = parseArgs({ options: { batches: { type: "string", default: "600" }, most: { type: "string", default: "500" } } });
const batches = Number(flags.batches);
const most = Number(flags.most);
const mib = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);
const collect = () => (globalThis as { gc?: () => void }).gc?.();

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-statements-"));
const store = await openStore({ dataDir, databaseUrl: "" });
const texts = new Set<string>();
const plugin: KyselyPlugin = {
  transformQuery: ({ node }) => {
    const text = store.getExecutor().compileQuery(node, createQueryId()).sql;
    if (/^\s*(insert|delete)/i.test(text)) texts.add(text);
    return node;
  },
  transformResult: async ({ result }) => result,
};
const database = store.withPlugin(plugin);
try {
  collect();
  const before = process.memoryUsage();
  // A fixed pseudo-random sequence of sizes (the same in every run).
  let seed = 12345;
  const nextSize = () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return 1 + (seed % most);
  };
  let rows = 0;
  for (let batch = 0; batch < batches; batch++) {
    const size = nextSize();
    const row = (index: number) => ({ request_id: `req-${batch}-${index}`, account_id: null, key_id: null, model: "bench", prompt_tokens: 7, cached_prompt_tokens: 0, completion_tokens: 3, reasoning_tokens: 0, usage_source: "upstream", service_tier: "default", cost: 0, stream: 1, created_at: 1 });
    await writeUsageBatch(database, {
      records: Array.from({ length: size }, (_, index) => ({ ...row(index), id: `use-${batch}-${index}`, hold_id: null, latency_ms: 1, status: 200, finish_reason: "stop" })),
      checkpoints: Array.from({ length: size }, (_, index) => ({ ...row(index), id: `use-${batch + 1}-${index}`, hold_id: "hold", updated_at: 2 })),
      dropCheckpoints: [],
    });
    rows += size;
  }
  collect();
  await new Promise((resolve) => setTimeout(resolve, 200));
  collect();
  const after = process.memoryUsage();
  console.log(
    `${batches} group commits of 1–${most} records and checkpoints (${rows} records): ${texts.size} distinct INSERT/DELETE texts; RSS ${mib(before.rss)} → ${mib(after.rss)} MiB, heap used ${mib(before.heapUsed)} → ${mib(after.heapUsed)}, heap total ${mib(before.heapTotal)} → ${mib(after.heapTotal)}, external ${mib(before.external)} → ${mib(after.external)} MiB (after a GC)`,
  );
} finally {
  await store.destroy();
  fs.rmSync(dataDir, { recursive: true, force: true });
}
