/**
 * Two `turnpike serve` processes on one PostgreSQL: a stored response made on one node is read,
 * continued and listed on the other (the official `openai` client against each), and a background
 * response running on one is cancelled through the other (the runner sees the row's flag), billed
 * for what it generated. The background one runs on a paced upstream (a token every 20 ms), so it
 * is still generating, whatever the machine's speed, when the cancel comes.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import type { Kysely } from "kysely";
import OpenAI from "openai";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { pacedUpstream } from "./helpers/crash-streams.ts";
import { freshPostgresSchema } from "./helpers/databases.ts";
import type { FaultUpstream } from "./helpers/fault-upstream.ts";
import { billedExactly, meteredKey } from "./helpers/metered.ts";
import { startServeProcess, type ServeProcess } from "./helpers/process.ts";
import { storiesModel, temporaryDirectory } from "./helpers/server.ts";

const pricing = { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 };
const CREDIT = 1_000_000;

describe("stored responses across two nodes on one PostgreSQL", { timeout: 120_000 }, () => {
  let databaseUrl: string;
  let dropSchema: () => Promise<void>;
  let database: Kysely<Database>;
  let upstream: FaultUpstream;
  const nodes: ServeProcess[] = [];

  before(async () => {
    ({ url: databaseUrl, drop: dropSchema } = await freshPostgresSchema());
    upstream = await pacedUpstream(20);
    const directory = temporaryDirectory();
    const configFile = path.join(directory, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [
          { id: "story", path: storiesModel, pricing },
          { id: "paced", context_length: 16384, pricing, upstream: { kind: "openai", urls: [upstream.baseUrl], health_interval: 60 } },
        ],
        plans: [{ id: "funded", name: "Funded", price: { amount: 100, currency: "usd" }, credit: CREDIT }],
      }),
    );
    for (const name of ["a", "b"]) {
      nodes.push(await startServeProcess(["--config", configFile, "--data-dir", path.join(directory, name), "--database-url", databaseUrl, "--parallel", "2"]));
    }
    for (const node of nodes) {
      for (let attempt = 0; attempt < 200 && (await fetch(`${node.url}/ready`)).status !== 200; attempt++) await delay(50);
    }
    database = await openStore({ dataDir: directory, databaseUrl });
  });
  after(async () => {
    await database?.destroy();
    for (const node of nodes) await node.stop();
    await upstream?.close();
    await dropSchema?.();
  });

  /** A metered key and one client per node. */
  async function clients() {
    const { accountId, key } = await meteredKey(database, "funded");
    return { accountId, onA: new OpenAI({ baseURL: `${nodes[0]!.url}/v1`, apiKey: key, maxRetries: 0 }), onB: new OpenAI({ baseURL: `${nodes[1]!.url}/v1`, apiKey: key, maxRetries: 0 }) };
  }

  it("reads on B what A stored, continues it on B, and lists the continuation's input items on A", async () => {
    const { onA, onB } = await clients();
    const first = await onA.responses.create({ model: "story", input: "Once upon a time", max_output_tokens: 16, temperature: 0 });
    const read = await onB.responses.retrieve(first.id);
    assert.deepEqual(read, first, "B reads what A answered");

    const next = await onB.responses.create({ model: "story", previous_response_id: first.id, input: "And then?", max_output_tokens: 16, temperature: 0 });
    assert.equal(next.previous_response_id, first.id);
    assert.ok(next.usage!.input_tokens >= first.usage!.input_tokens + first.usage!.output_tokens, "B rebuilt the conversation A stored");

    const items = await onA.responses.inputItems.list(next.id);
    assert.equal(items.data.length, 1, "only the continuation's own input");
    const item = items.data[0]!;
    assert.ok(item.type === "message" && item.role === "user");
    assert.deepEqual(item.content, [{ type: "input_text", text: "And then?" }]);
    const firstItems = await onA.responses.inputItems.list(first.id);
    assert.deepEqual((firstItems.data[0] as { content: unknown }).content, [{ type: "input_text", text: "Once upon a time" }]);
  });

  it("cancels through B a background response running on A, billing what A generated", async () => {
    const { accountId, onA, onB } = await clients();
    const queued = await onA.responses.create({ model: "paced", input: "Go", background: true, max_output_tokens: 3000 });
    assert.equal(queued.status, "queued");
    let running = await onB.responses.retrieve(queued.id);
    for (let attempt = 0; attempt < 200 && running.status !== "in_progress"; attempt++) {
      await delay(25);
      running = await onB.responses.retrieve(queued.id);
    }
    assert.equal(running.status, "in_progress");
    await delay(300);
    const cancelled = await onB.responses.cancel(queued.id);
    assert.equal(cancelled.status, "cancelled", "B answers once A settled it");
    const generated = cancelled.usage!.output_tokens;
    assert.ok(generated > 0 && generated < 3000, `${generated} tokens generated before the cancel`);
    const { output_text: _text, ...onNodeA } = await onA.responses.retrieve(queued.id);
    const { output_text: _cancelledText, ...answered } = cancelled;
    assert.deepEqual(onNodeA, answered);
    const { records } = await billedExactly(database, accountId, CREDIT, pricing, 1);
    assert.equal(records[0]!.completion_tokens, generated, "billed what was generated");
    assert.equal(records[0]!.finish_reason, "cancelled");
  });
});
