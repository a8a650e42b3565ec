/**
 * Issue 20 row 2, end to end: a hot key served from credit leases through a real server on
 * PostgreSQL behind a TCP proxy, a black hole and then seconds of connection resets under that
 * load, while a second node's sweeper (on a direct connection, quick to take a silent node for
 * dead) closes the server's leases under it. Afterwards the books are audited in one statement:
 * balance = Σ entries = Σ lots; Σ usage-record cost = Σ charged, per account and per key; no
 * hold or lease left open once the sweeper ran. Timings vary with the machine's load; the
 * assertion is the books.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import OpenAI from "openai";
import type { Kysely } from "kysely";
import { createAccount } from "../src/accounts/accounts.ts";
import { createApiKey } from "../src/auth/api-keys.ts";
import { grantCredit } from "../src/billing/ledger.ts";
import { closeStaleHolds } from "../src/billing/lease-store.ts";
import { deadNodes, forgetNodes, heartbeat, orphanedNodes, registerNode } from "../src/billing/nodes.ts";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { assertBooksBalanced } from "./helpers/audit-books.ts";
import { freshPostgresSchema, postgresUrl } from "./helpers/databases.ts";
import { TcpProxy } from "./helpers/tcp-proxy.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

/** Credit units per million tokens: 1 per prompt token, 2 per completion token. */
const pricing = { prompt: 1_000_000, cached_prompt: 1_000_000, completion: 2_000_000 };

describe("a hot key's credit leases through a PostgreSQL black hole and resets", () => {
  const proxy = new TcpProxy(postgresUrl);
  let drop: () => Promise<void>;
  let direct: Kysely<Database>;
  let test: TestServer;
  before(async () => {
    await proxy.open();
    const schema = await freshPostgresSchema();
    drop = schema.drop;
    direct = await openStore({ dataDir: temporaryDirectory(), databaseUrl: schema.url });
    const configFile = path.join(temporaryDirectory(), "turnpike.json");
    fs.writeFileSync(configFile, JSON.stringify({ models: [{ id: "stories", path: storiesModel, pricing }] }));
    test = await startTestServer({
      configFile,
      // Every metered request from a lease; a query unanswered for 1 s fails (503 or retried).
      flags: { database_url: proxy.url(schema.url), database_timeout: "1", sweep_interval: "0.5", lease_above: "0", queue_size: "200" },
    });
  });
  after(async () => {
    await test?.close();
    await direct?.destroy();
    await proxy.close();
    await drop?.();
  });

  async function metrics(): Promise<Record<string, number>> {
    const text = await (await fetch(`${test.url}/metrics`)).text();
    return Object.fromEntries([...text.matchAll(/^(turnpike_[a-z_]+) ([0-9.e+-]+)$/gm)].map((match) => [match[1]!, Number(match[2])]));
  }

  it("charges every usage record exactly, per account and per key, and leaves nothing open", async (context) => {
    const account = await createAccount(direct, { email: `leases-${Math.random().toString(36).slice(2)}@example.com` });
    await grantCredit(direct, { accountId: account.id, amount: 10_000_000, source: `test:${account.id}` });
    const key = await createApiKey(direct, { name: "hot", accountId: account.id });
    const client = new OpenAI({ baseURL: test.baseURL, apiKey: key.key, maxRetries: 0, timeout: 30_000 });

    // A second node's sweeper, as `turnpike serve` runs it, taking a node silent for 2 s for dead.
    const peerId = await registerNode(direct);
    let peerSweeps = 0;
    const peerSweep = async () => {
      await heartbeat(direct, peerId);
      const dead = [...(await deadNodes(direct, peerId, Date.now(), 2_000)), ...(await orphanedNodes(direct))];
      const closed = await closeStaleHolds(direct, { deadNodes: dead });
      await forgetNodes(direct, dead);
      peerSweeps += closed.charged + closed.released;
    };
    let sweeping = true;
    const peer = (async () => {
      while (sweeping) {
        await peerSweep().catch(() => {});
        await delay(300);
      }
    })();

    let stop = false;
    const outcomes = { served: 0, unavailable: 0, other: [] as string[] };
    const worker = async (index: number) => {
      for (let request = 0; !stop; request++) {
        try {
          const messages = [{ role: "user" as const, content: `Tale ${index}.${request}` }];
          if (request % 2 === 0) {
            const completion = await client.chat.completions.create({ model: "stories", messages, max_tokens: 6 });
            assert.ok(completion.usage);
          } else {
            const stream = await client.chat.completions.create({ model: "stories", messages, max_tokens: 6, stream: true, stream_options: { include_usage: true } });
            let usage: OpenAI.CompletionUsage | undefined;
            for await (const chunk of stream) usage ??= chunk.usage ?? undefined;
            assert.ok(usage);
          }
          outcomes.served++;
        } catch (error) {
          if (error instanceof OpenAI.APIError && error.status === 503) outcomes.unavailable++;
          else outcomes.other.push(String(error));
          await delay(50);
        }
      }
    };
    const workers = Array.from({ length: 6 }, (_unused, index) => worker(index));

    await delay(1_500);
    proxy.startBlackHole();
    await delay(3_000);
    proxy.endBlackHole();
    await delay(1_000);
    // Seconds of resets: every connection cut, again and again, while requests use them.
    for (let cut = 0; cut < 12; cut++) {
      proxy.cutAll();
      await delay(250);
    }
    await delay(1_500);
    stop = true;
    await Promise.all(workers);

    // The server writes what waited and closes its leases; the sweepers run.
    let state = await metrics();
    for (let attempt = 0; attempt < 300; attempt++) {
      state = await metrics();
      if (state.turnpike_credit_leases_open === 0 && state.turnpike_usage_records_pending === 0 && state.turnpike_deferred_charges === 0) break;
      await delay(100);
    }
    sweeping = false;
    await peer;
    await peerSweep();
    context.diagnostic(`served ${outcomes.served}, 503 ${outcomes.unavailable}, holds the peer's sweeper closed ${peerSweeps}, late-charge logs ${test.logs().filter((entry) => String(entry.msg).startsWith("usage records landed after")).length}`);
    assert.deepEqual(outcomes.other, [], "a request fails only with 503 while the database is away");
    assert.ok(outcomes.served > 0, "requests were served");
    assert.equal(state.turnpike_credit_leases_open, 0, "the server closed its leases");
    assert.equal(state.turnpike_usage_records_pending, 0, "every usage record written");

    const books = await assertBooksBalanced(direct, [account.id]);
    const records = await direct.selectFrom("usage_records").select("id").where("account_id", "=", account.id).where("status", "=", 200).execute();
    assert.ok(records.length >= outcomes.served, `every served request has its record (${records.length} for ${outcomes.served})`);
    assert.ok(books.accounts[0]!.charged > 0);
    assert.ok(!test.logs().some((entry) => entry.msg === "unhandled error"), "no error went unhandled");
    assert.ok(!test.logs().some((entry) => entry.msg === "could not settle the request's hold; the sweeper will release it uncharged"), "no settlement failed");
  });
});
