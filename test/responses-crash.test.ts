/**
 * `kill -9` of a node while a background response generates, on SQLite and on PostgreSQL: the
 * next node's sweeper marks the response `failed` (error `server_error`) once its row missed three
 * heartbeats, and bills the tokens its usage checkpoints recorded, exactly, once; the books
 * balance and no hold is left open. The three missed heartbeats (30 s) are not waited out: the
 * row's last save is moved back by that much after the kill, as the clock would have.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { BACKGROUND_STALE_MS } from "../src/http/routes/responses/route.ts";
import { openStore } from "../src/store/open.ts";
import { backends, freshPostgresSchema } from "./helpers/databases.ts";
import { billedExactly } from "./helpers/metered.ts";
import { startFundedNode } from "./helpers/crash-streams.ts";
import { startServeProcess } from "./helpers/process.ts";
import { temporaryDirectory } from "./helpers/server.ts";

const pricing = { prompt: 1_000_000, cached_prompt: 1_000_000, completion: 1_000_000 };
const CREDIT = 10_000_000;
const MAX_OUTPUT_TOKENS = 3500;

for (const backend of backends) {
  describe(`kill -9 with a background response generating (${backend})`, { timeout: 120_000 }, () => {
    it("leaves it failed on the next node, billed for the tokens its checkpoints recorded", async () => {
      const dataDir = temporaryDirectory();
      const postgres = backend === "postgres" ? await freshPostgresSchema() : undefined;
      const store = postgres === undefined ? [] : ["--database-url", postgres.url];
      try {
        const { first, accountId, key: funded, serve } = await startFundedNode({ dataDir, store, pricing, credit: CREDIT, email: `crash-${backend}@example.com`, serveArgs: ["--parallel", "2"] });
        const account = { id: accountId };
        const key = { key: funded };
        const headers = { "content-type": "application/json", authorization: `Bearer ${key.key}` };

        const created = await fetch(`${first.url}/v1/responses`, {
          method: "POST",
          headers,
          body: JSON.stringify({ model: "random", input: "Go", background: true, max_output_tokens: MAX_OUTPUT_TOKENS }),
        });
        const queued = (await created.json()) as { id: string; status: string };
        assert.equal(queued.status, "queued");

        const database = await openStore({ dataDir, databaseUrl: postgres?.url ?? "" });
        try {
          // Once a checkpoint recorded some of it, the node dies.
          let checkpointed = 0;
          for (let attempt = 0; attempt < 400 && checkpointed < 64; attempt++) {
            await delay(10);
            const rows = await database.selectFrom("usage_checkpoints").select("completion_tokens").where("account_id", "=", account.id).execute();
            checkpointed = Math.max(0, ...rows.map((row) => Number(row.completion_tokens)));
          }
          assert.ok(checkpointed >= 64, `a checkpoint recorded ${checkpointed} tokens`);
          assert.equal(await first.stop("SIGKILL"), null);
          const row = await database.selectFrom("responses").select(["status", "updated_at"]).where("id", "=", queued.id).executeTakeFirstOrThrow();
          assert.ok(row.status === "queued" || row.status === "in_progress", `still ${row.status} when the node died`);
          // Three heartbeats missed, as 30 s of waiting would have made them.
          await database.updateTable("responses").set({ updated_at: Number(row.updated_at) - BACKGROUND_STALE_MS - 1 }).where("id", "=", queued.id).execute();

          const second = await startServeProcess(serve);
          try {
            const read = await fetch(`${second.url}/v1/responses/${queued.id}`, { headers });
            const failed = (await read.json()) as { status: string; error: { code: string; message: string } | null };
            assert.equal(failed.status, "failed", "the next node's start-up sweep failed it");
            assert.equal(failed.error?.code, "server_error");
            assert.match(failed.error.message, /stopped/);
            const { records } = await billedExactly(database, account.id, CREDIT, pricing, 1);
            const billed = records[0]!.completion_tokens;
            assert.equal(records[0]!.finish_reason, "interrupted");
            assert.ok(billed >= checkpointed && billed < MAX_OUTPUT_TOKENS, `billed ${billed} tokens, ${checkpointed} checkpointed before the kill`);
            // Later sweeps change nothing.
            const again = await fetch(`${second.url}/v1/responses/${queued.id}/cancel`, { method: "POST", headers, body: "{}" });
            assert.equal(((await again.json()) as { status: string }).status, "failed", "a failed response has nothing to cancel");
            await billedExactly(database, account.id, CREDIT, pricing, 1);
          } finally {
            await second.stop();
          }
        } finally {
          await database.destroy();
        }
      } finally {
        await postgres?.drop();
      }
    });
  });
}
