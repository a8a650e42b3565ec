/**
 * Two `turnpike serve` processes on one PostgreSQL and one Redis (this machine's real servers):
 * one shared rate limit and one shared balance, whichever node a request reaches.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import OpenAI from "openai";
import pg from "pg";
import { openStore } from "../src/store/open.ts";
import { checkLedger } from "../src/billing/ledger.ts";
import { costOf } from "../src/protocol/price.ts";
import { freshPostgresSchema } from "./helpers/databases.ts";
import { runCli, startServeProcess, type ServeProcess } from "./helpers/process.ts";
import { storiesModel, temporaryDirectory } from "./helpers/server.ts";

const redisUrl = process.env.TURNPIKE_TEST_REDIS_URL ?? "redis://127.0.0.1:6379";
const pricing = { prompt: 1_000_000, cached_prompt: 1_000_000, completion: 2_000_000 };

/**
 * The account's ledger once its holds are settled: a quiet key's hold is settled in the group
 * commit after the request's end (at most 100 ms later; more on a loaded machine), so up to 5 s.
 */
async function settledLedger(database: Parameters<typeof checkLedger>[0], accountId: string): Promise<Awaited<ReturnType<typeof checkLedger>>> {
  let check = await checkLedger(database, accountId);
  for (let attempt = 0; attempt < 100 && check.activeHolds > 0; attempt++) {
    await delay(50);
    check = await checkLedger(database, accountId);
  }
  return check;
}

describe("two nodes on one PostgreSQL and Redis", () => {
  let databaseUrl: string;
  let dropSchema: () => Promise<void>;
  let configFile: string;
  const nodes: ServeProcess[] = [];

  before(async () => {
    ({ url: databaseUrl, drop: dropSchema } = await freshPostgresSchema());
    const directory = temporaryDirectory();
    configFile = path.join(directory, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [{ id: "story", path: storiesModel, pricing }],
        plans: [
          { id: "four-rpm", name: "Four a minute", price: { amount: 100, currency: "usd" }, credit: 1_000_000, rpm: 4 },
          // Worst case of one request below: ~10 prompt + 2 × 30 completion ≈ 70; 500 covers about 7.
          { id: "tight", name: "Tight", price: { amount: 100, currency: "usd" }, credit: 500 },
        ],
      }),
    );
    for (const name of ["a", "b"]) {
      const dataDir = path.join(directory, name);
      nodes.push(await startServeProcess(["--config", configFile, "--data-dir", dataDir, "--database-url", databaseUrl, "--redis-url", redisUrl, "--parallel", "2", "--queue-size", "200"]));
    }
    for (const node of nodes) {
      for (let attempt = 0; attempt < 200 && (await fetch(`${node.url}/ready`)).status !== 200; attempt++) await delay(50);
    }
  });
  after(async () => {
    for (const node of nodes) await node.stop();
    await dropSchema?.();
  });

  async function cli(args: string[]) {
    const result = await runCli([...args, "--database-url", databaseUrl]);
    assert.equal(result.code, 0, result.stderr);
    return result.stdout;
  }

  /** A metered account on `plan`, and one client per node for the same key. */
  async function account(plan: string) {
    const email = `node-${Math.random().toString(36).slice(2)}@example.com`;
    const created = JSON.parse(await cli(["accounts", "create", "--email", email, "--json"]));
    await cli(["plans", "grant", "--account", email, "--plan", plan]);
    const key = JSON.parse(await cli(["keys", "create", "--account", email, "--json"]));
    return { id: created.id as string, email, clients: nodes.map((node) => new OpenAI({ baseURL: `${node.url}/v1`, apiKey: key.key, maxRetries: 0 })) };
  }

  it("share one requests-per-minute limit", async () => {
    const { clients } = await account("four-rpm");
    const body = { model: "story", messages: [{ role: "user" as const, content: "Hi" }], max_tokens: 2 };
    const remaining: string[] = [];
    for (let index = 0; index < 4; index++) {
      const { response } = await clients[index % 2]!.chat.completions.create(body).withResponse();
      remaining.push(response.headers.get("x-ratelimit-remaining-requests")!);
    }
    assert.deepEqual(remaining, ["3", "2", "1", "0"], "each node sees the other's requests");
    for (const client of clients) {
      await assert.rejects(client.chat.completions.create(body), (error: unknown) => error instanceof OpenAI.RateLimitError && error.code === "rate_limit_exceeded");
    }
  });

  it("cancel a request whose client left while its hold waited for the balance, billing nothing", async () => {
    const { id, clients } = await account("tight");
    const node = nodes[0]!;
    // Another transaction holds the account row, so the request's hold waits at the database.
    const locker = new pg.Client({ connectionString: databaseUrl });
    await locker.connect();
    const requestId = `req_left_while_holding_${Math.random().toString(36).slice(2)}`;
    try {
      await locker.query("BEGIN");
      await locker.query("SELECT balance FROM accounts WHERE id = $1 FOR UPDATE", [id]);
      const controller = new AbortController();
      const request = fetch(`${node.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${clients[0]!.apiKey}`, "x-request-id": requestId },
        body: JSON.stringify({ model: "story", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 30, temperature: 0 }),
        signal: controller.signal,
      });
      await delay(300);
      controller.abort();
      await assert.rejects(request);
      await delay(100);
    } finally {
      await locker.query("COMMIT");
      await locker.end();
    }
    let logged: Record<string, unknown> | undefined;
    for (let attempt = 0; attempt < 100 && logged === undefined; attempt++) {
      await delay(50);
      logged = node
        .stdout()
        .split("\n")
        .filter((line) => line.includes(requestId) && line.includes('"msg":"chat completion"'))
        .map((line) => JSON.parse(line) as Record<string, unknown>)[0];
    }
    assert.ok(logged, "the request was logged");
    assert.equal(logged.finish_reason, "cancelled", "generation never ran for a client that had left");
    assert.equal(logged.completion_tokens, 0);
    const database = await openStore({ dataDir: temporaryDirectory(), databaseUrl });
    try {
      const check = await settledLedger(database, id);
      assert.equal(check.activeHolds, 0);
      assert.equal(check.balance, 500, "nothing was billed");
      assert.equal(check.balance, check.sumOfEntries);
    } finally {
      await database.destroy();
    }
  });

  it("share one balance: concurrent requests on both nodes never overspend it", async () => {
    const { id, email, clients } = await account("tight");
    const ask = (node: number, index: number) =>
      clients[node]!.chat.completions.create({ model: "story", messages: [{ role: "user", content: `Tale ${index % 5}` }], max_tokens: 30, temperature: 0 }).then((completion) => ({ completion, node }));
    // One request on each node first, so both hold and charge the balance, then a burst on both at once.
    const attempts: PromiseSettledResult<Awaited<ReturnType<typeof ask>>>[] = [];
    for (const node of [0, 1]) attempts.push(...(await Promise.allSettled([ask(node, node)])));
    attempts.push(...(await Promise.allSettled(Array.from({ length: 60 }, (_unused, index) => ask(index % 2, index)))));
    const admitted = attempts.flatMap((attempt) => (attempt.status === "fulfilled" ? [attempt.value] : []));
    for (const attempt of attempts) {
      if (attempt.status === "rejected") assert.ok(attempt.reason instanceof OpenAI.RateLimitError && attempt.reason.code === "insufficient_quota", String(attempt.reason));
    }
    assert.ok(admitted.length >= 3 && admitted.length <= 12, `admitted ${admitted.length}`);
    assert.deepEqual([attempts[0]!.status, attempts[1]!.status], ["fulfilled", "fulfilled"], "both nodes served from the one balance");
    assert.ok(attempts.slice(2).some((attempt) => attempt.status === "rejected"), "the burst ran the balance out");
    const charged = admitted.reduce(
      (sum, { completion }) =>
        sum +
        costOf(
          { prompt: pricing.prompt, cachedPrompt: pricing.cached_prompt, completion: pricing.completion },
          { promptTokens: completion.usage!.prompt_tokens, cachedPromptTokens: completion.usage!.prompt_tokens_details?.cached_tokens ?? 0, completionTokens: completion.usage!.completion_tokens },
        ),
      0,
    );
    const database = await openStore({ dataDir: temporaryDirectory(), databaseUrl });
    try {
      const check = await settledLedger(database, id);
      assert.equal(check.activeHolds, 0);
      assert.equal(check.balance, 500 - charged, "every admitted request billed exactly once");
      assert.equal(check.balance, check.sumOfEntries);
      assert.ok(check.balance >= 0);
    } finally {
      await database.destroy();
    }
    const shown = JSON.parse(await cli(["accounts", "show", "--email", email, "--json"]));
    assert.equal(shown.balance, 500 - charged);
  });
});
