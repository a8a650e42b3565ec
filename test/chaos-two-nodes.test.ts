/**
 * Chaos on two nodes sharing one PostgreSQL (through a proxy the test controls): one hot account
 * served by both, with less credit than the load asks for, while a node is killed with `kill -9`
 * and restarted and the database connections are cut. Afterwards:
 *
 * - the balance never went below zero and no credit was spent that was not there;
 * - the books balance (balance = Σ entries = credit in lots), no hold is left open;
 * - no request is billed twice, and every record is billed exactly for its tokens;
 * - every request a node that was not killed completed is billed exactly once, for the usage
 *   its response reported (the killed node's may be billed up to their last checkpoint).
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import OpenAI from "openai";
import { openStore } from "../src/store/open.ts";
import { checkLedger } from "../src/billing/ledger.ts";
import { costOf } from "../src/protocol/price.ts";
import { freshPostgresSchema } from "./helpers/databases.ts";
import { runCli, startServeProcess, type ServeProcess } from "./helpers/process.ts";
import { storiesModel, temporaryDirectory } from "./helpers/server.ts";
import { TcpProxy } from "./helpers/tcp-proxy.ts";

/** One credit a token. */
const pricing = { prompt: 1_000_000, cached_prompt: 1_000_000, completion: 1_000_000 };
const CREDIT = 9_000;

type Outcome = { node: number; generation: number; requestId: string; usage?: OpenAI.CompletionUsage; refused?: boolean; failed?: string };

describe("two nodes, one hot account, a node killed and the database cut", () => {
  let databaseUrl: string;
  let dropSchema: () => Promise<void>;
  let proxy: TcpProxy;
  let configFile: string;
  const processes: ServeProcess[] = [];

  before(async () => {
    ({ url: databaseUrl, drop: dropSchema } = await freshPostgresSchema());
    proxy = new TcpProxy(databaseUrl);
    await proxy.open();
    const directory = temporaryDirectory();
    configFile = path.join(directory, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [{ id: "story", path: storiesModel, pricing }],
        plans: [{ id: "chaos", name: "Chaos", price: { amount: 100, currency: "usd" }, credit: CREDIT }],
      }),
    );
  });
  after(async () => {
    for (const serve of processes) if (serve.child.exitCode === null && serve.child.signalCode === null) await serve.stop("SIGKILL");
    await proxy?.close();
    await dropSchema?.();
  });

  /** Node 0 meters every request from credit leases (`--lease-above 0`), node 1 only busy keys (the default). */
  const start = async (node: number) => {
    const serve = await startServeProcess([
      "--lease-above",
      node === 0 ? "0" : "20",
      "--config",
      configFile,
      "--data-dir",
      temporaryDirectory(),
      "--database-url",
      proxy.url(databaseUrl),
      "--parallel",
      "4",
      "--queue-size",
      "100",
      "--sweep-interval",
      "1",
      "--database-timeout",
      "5",
    ]);
    processes.push(serve);
    for (let attempt = 0; attempt < 200 && (await fetch(`${serve.url}/ready`).catch(() => undefined))?.status !== 200; attempt++) await delay(50);
    return serve;
  };

  it("never overspends, bills no request twice, and bills every request the surviving nodes completed exactly once", async (t) => {
    const nodes = [await start(0), await start(1)];
    const generations = [0, 0];
    const cli = async (args: string[]) => {
      const result = await runCli([...args, "--database-url", databaseUrl]);
      assert.equal(result.code, 0, result.stderr);
      return result.stdout;
    };
    const email = "chaos@example.com";
    const account = JSON.parse(await cli(["accounts", "create", "--email", email, "--json"])) as { id: string };
    await cli(["plans", "grant", "--account", email, "--plan", "chaos", "--config", configFile]);
    const key = (JSON.parse(await cli(["keys", "create", "--account", email, "--json"])) as { key: string }).key;

    const outcomes: Outcome[] = [];
    let running = true;
    let sequence = 0;
    const worker = async (node: number, worker: number) => {
      while (running) {
        const serve = nodes[node]!;
        const generation = generations[node]!;
        const requestId = `chaos_${node}_${worker}_${sequence++}`;
        const client = new OpenAI({ baseURL: `${serve.url}/v1`, apiKey: key, maxRetries: 0, timeout: 10_000 });
        const body = { model: "story", messages: [{ role: "user" as const, content: `Once ${requestId}` }], max_tokens: 8 };
        const outcome: Outcome = { node, generation, requestId };
        try {
          if (worker % 2 === 0) {
            outcome.usage = (await client.chat.completions.create(body, { headers: { "x-request-id": requestId } })).usage;
          } else {
            const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } }, { headers: { "x-request-id": requestId } });
            for await (const chunk of stream) if (chunk.usage) outcome.usage = chunk.usage;
          }
        } catch (error) {
          if (error instanceof OpenAI.RateLimitError && error.code === "insufficient_quota") outcome.refused = true;
          else outcome.failed = String(error);
          await delay(20);
        }
        outcomes.push(outcome);
      }
    };
    const load = Promise.all([0, 1].flatMap((node) => [0, 1, 2].map((index) => worker(node, index))));

    await delay(1_500);
    // Node 0 dies mid-load and comes back as a new process (its start-up sweep closes the dead one's holds).
    assert.equal(await nodes[0]!.stop("SIGKILL"), null);
    await delay(300);
    nodes[0] = await start(0);
    generations[0]!++;
    await delay(1_000);
    // The database goes away under both nodes, twice.
    proxy.cutAll();
    await delay(700);
    proxy.cutAll();
    await delay(1_500);
    running = false;
    await load;
    for (const serve of nodes) assert.equal(await serve.stop("SIGTERM"), 0, serve.stderr());
    // A last node's start-up sweep: whatever the killed one left is closed.
    const last = await start(1);
    await last.stop("SIGTERM");

    const database = await openStore({ dataDir: temporaryDirectory(), databaseUrl });
    try {
      const books = await checkLedger(database, account.id);
      const records = await database.selectFrom("usage_records").selectAll().where("account_id", "=", account.id).execute();
      const completed = outcomes.filter((outcome) => outcome.usage !== undefined);
      const survivors = completed.filter((outcome) => !(outcome.node === 0 && outcome.generation === 0));
      t.diagnostic(
        `${outcomes.length} requests: ${completed.length} completed (${survivors.length} on nodes not killed), ${outcomes.filter((o) => o.refused).length} refused for quota, ` +
          `${outcomes.filter((o) => o.failed).length} failed (${[...new Set(outcomes.flatMap((o) => (o.failed ? [o.failed.slice(0, 60)] : [])))].slice(0, 4).join(" | ")}); ` +
          `${records.length} records; balance ${books.balance} of ${CREDIT}`,
      );
      assert.ok(completed.length > 20, "the load got through");
      assert.ok(outcomes.some((outcome) => outcome.refused), "the account ran out of credit under the load");
      assert.ok(books.balance >= 0);
      assert.equal(books.activeHolds, 0, "no hold is left open");
      assert.equal(books.balance, books.sumOfEntries, "balance = Σ entries");
      assert.equal(books.lotsRemaining, books.balance, "credit in lots = balance");
      const byRequest = new Map<string, (typeof records)[number]>();
      for (const record of records) {
        assert.ok(!byRequest.has(record.request_id), `${record.request_id} billed twice`);
        byRequest.set(record.request_id, record);
        const usage = { promptTokens: Number(record.prompt_tokens), cachedPromptTokens: Number(record.cached_prompt_tokens), completionTokens: Number(record.completion_tokens) };
        assert.equal(Number(record.cost), costOf({ prompt: pricing.prompt, cachedPrompt: pricing.cached_prompt, completion: pricing.completion }, usage), "billed exactly for its tokens");
      }
      const charged = records.reduce((sum, record) => sum + Number(record.cost), 0);
      assert.equal(books.balance, CREDIT - charged, "charged exactly what the records say: no credit spent that was not there");
      for (const outcome of survivors) {
        const record = byRequest.get(outcome.requestId);
        assert.ok(record !== undefined, `${outcome.requestId} completed on a node that was not killed and is billed`);
        assert.equal(Number(record.completion_tokens), outcome.usage!.completion_tokens, `${outcome.requestId} billed for what its response reported`);
        assert.equal(Number(record.prompt_tokens), outcome.usage!.prompt_tokens);
      }
      for (const outcome of completed.filter((candidate) => candidate.node === 0 && candidate.generation === 0)) {
        const record = byRequest.get(outcome.requestId);
        if (record !== undefined) assert.ok(Number(record.completion_tokens) <= outcome.usage!.completion_tokens, "never billed more than was generated");
      }
    } finally {
      await database.destroy();
    }
  });
});
