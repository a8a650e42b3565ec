/**
 * PostgreSQL going away under a running server, through a TCP proxy this test controls in
 * front of the real server: connections cut (a restart, a proxy, pg_terminate_backend), then the
 * database unreachable, then back. The server never exits, answers 503 database_unavailable
 * with a retry while the database is away, and serves again as soon as it is back.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import OpenAI from "openai";
import { checkLedger } from "../src/billing/ledger.ts";
import { costOf } from "../src/billing/pricing.ts";
import { openStore } from "../src/store/open.ts";
import { freshPostgresSchema, postgresUrl } from "./helpers/databases.ts";
import { runCli } from "./helpers/process.ts";
import { modelsDir, startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

/** Credit units per million tokens: 1 per prompt token, 2 per completion token. */
const pricing = { prompt: 1_000_000, cached_prompt: 1_000_000, completion: 2_000_000 };

/** A TCP proxy to PostgreSQL that can cut every connection, refuse new ones, and come back. */
class Proxy {
  readonly #target = new URL(postgresUrl);
  readonly #sockets = new Set<net.Socket>();
  #server: net.Server | undefined;
  port = 0;

  async open(): Promise<void> {
    this.#server = net.createServer((client) => {
      const upstream = net.connect(Number(this.#target.port || 5432), this.#target.hostname);
      for (const socket of [client, upstream]) {
        this.#sockets.add(socket);
        socket.on("close", () => this.#sockets.delete(socket));
        socket.on("error", () => {});
      }
      client.pipe(upstream).pipe(client);
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    });
    await new Promise<void>((resolve) => this.#server!.listen(this.port, "127.0.0.1", resolve));
    this.port = (this.#server.address() as net.AddressInfo).port;
  }

  /** Cuts every open connection, as a database restart would. */
  cutAll(): void {
    for (const socket of this.#sockets) socket.destroy();
  }

  /** Cuts everything and refuses new connections until `open` again. */
  async close(): Promise<void> {
    this.cutAll();
    await new Promise<void>((resolve) => (this.#server ? this.#server.close(() => resolve()) : resolve()));
    this.#server = undefined;
  }
}

describe("a PostgreSQL outage under a running server", () => {
  const proxy = new Proxy();
  let drop: () => Promise<void>;
  let directUrl: string;
  let configFile: string;
  let test: TestServer;
  before(async () => {
    await proxy.open();
    const schema = await freshPostgresSchema();
    drop = schema.drop;
    directUrl = schema.url;
    const viaProxy = new URL(schema.url);
    viaProxy.host = `127.0.0.1:${proxy.port}`;
    configFile = path.join(temporaryDirectory(), "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [
          { id: "stories260K", path: storiesModel },
          { id: "random", path: path.join(modelsDir, "llama-2-tiny-random.gguf"), pricing },
        ],
        plans: [{ id: "big", name: "Big", price: { amount: 100, currency: "usd" }, credit: 100_000 }],
      }),
    );
    test = await startTestServer({ configFile, flags: { database_url: viaProxy.toString() } });
  });
  after(async () => {
    await test?.close();
    await proxy.close();
    await drop?.();
  });

  const ask = () => test.client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 3 });

  it("survives its connections being cut, answers 503 while the database is away, and recovers", async () => {
    assert.equal((await ask()).usage?.completion_tokens, 3);

    // Every pooled connection dies while idle: the pool drops them and connects afresh.
    proxy.cutAll();
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal((await ask()).usage?.completion_tokens, 3, "served on fresh connections");
    assert.ok(test.logs().some((entry) => entry.msg === "a database connection broke; the next query reconnects"));

    // The database is unreachable: a clear 503 with a retry, never a 500, and the process lives.
    await proxy.close();
    await assert.rejects(ask(), (error: unknown) => {
      assert.ok(error instanceof OpenAI.APIError, String(error));
      assert.equal(error.status, 503);
      assert.equal(error.code, "database_unavailable");
      assert.equal(error.type, "service_unavailable");
      assert.equal(error.headers?.get("retry-after"), "2");
      return true;
    });
    const health = await fetch(`${test.url}/health`);
    assert.equal(health.status, 200, "the process is up");
    assert.ok(!test.logs().some((entry) => entry.msg === "unhandled error"), "an outage is not logged as a bug");
    assert.ok(test.logs().some((entry) => entry.msg === "database unavailable"));

    // Back: served again with no restart.
    await proxy.open();
    assert.equal((await ask()).usage?.completion_tokens, 3);
  });

  it("bills a stream that was generating when the database went away, once it is back", async () => {
    const cli = async (args: string[]) => {
      const result = await runCli([...args, "--database-url", directUrl]);
      assert.equal(result.code, 0, result.stderr);
      return result.stdout;
    };
    const email = `outage-${Math.random().toString(36).slice(2)}@example.com`;
    const account = JSON.parse(await cli(["accounts", "create", "--email", email, "--json"])) as { id: string };
    await cli(["plans", "grant", "--account", email, "--plan", "big", "--config", configFile]);
    const key = JSON.parse(await cli(["keys", "create", "--account", email, "--json"])) as { key: string };
    const client = new OpenAI({ baseURL: test.baseURL, apiKey: key.key, maxRetries: 0 });

    const stream = await client.chat.completions.create({
      model: "random",
      messages: [{ role: "user", content: "Go on" }],
      max_tokens: 3000,
      stream: true,
      stream_options: { include_usage: true },
    });
    let usage: OpenAI.CompletionUsage | undefined;
    let cut = false;
    for await (const chunk of stream) {
      if (!cut && chunk.choices[0]?.delta.content) {
        cut = true;
        await proxy.close();
      }
      usage ??= chunk.usage ?? undefined;
    }
    assert.equal(usage?.completion_tokens, 3000, "the stream ran to its end while the database was away");
    for (let attempt = 0; attempt < 100 && !test.logs().some((entry) => entry.msg?.toString().startsWith("the database is unavailable")); attempt++) await delay(20);
    assert.ok(test.logs().some((entry) => entry.msg === "the database is unavailable: this request's charge will be retried until it is back"));
    assert.match(await (await fetch(`${test.url}/metrics`)).text(), /^turnpike_deferred_charges 1$/m, "the waiting charge shows in /metrics");

    await proxy.open();
    const database = await openStore({ dataDir: temporaryDirectory(), databaseUrl: directUrl });
    try {
      let check = await checkLedger(database, account.id);
      for (let attempt = 0; attempt < 200 && check.activeHolds > 0; attempt++) {
        await delay(50);
        check = await checkLedger(database, account.id);
      }
      assert.equal(check.activeHolds, 0, "the deferred charge settled the hold");
      const cost = costOf(
        { prompt: pricing.prompt, cachedPrompt: pricing.cached_prompt, completion: pricing.completion },
        { promptTokens: usage!.prompt_tokens, cachedPromptTokens: usage!.prompt_tokens_details?.cached_tokens ?? 0, completionTokens: usage!.completion_tokens },
      );
      assert.equal(check.balance, 100_000 - cost, "every generated token billed, once");
      assert.equal(check.balance, check.sumOfEntries);
      const records = await database.selectFrom("usage_records").selectAll().where("account_id", "=", account.id).execute();
      assert.equal(records.length, 1, "one usage record");
      assert.equal(Number(records[0]!.cost), cost);
      assert.equal(Number(records[0]!.completion_tokens), 3000);
    } finally {
      await database.destroy();
    }
    assert.ok(test.logs().some((entry) => entry.msg === "deferred charge settled"));
    assert.match(await (await fetch(`${test.url}/metrics`)).text(), /^turnpike_deferred_charges 0$/m);
  });
});
