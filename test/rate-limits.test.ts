/**
 * Rate limits end to end: real server, real model, the openai client. Per key and per plan,
 * requests and tokens per minute, OpenAI's headers, Redis shared limits and the fallback when
 * Redis is unreachable.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import OpenAI from "openai";
import type { Kysely } from "kysely";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { createAccount } from "../src/accounts/accounts.ts";
import { Redis } from "ioredis";
import { createApiKey, hashKey, type CreateKeyOptions } from "../src/auth/api-keys.ts";
import { grantPlan } from "../src/billing/grant-plan.ts";
import { findPlan } from "../src/billing/plans-store.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { TcpProxy } from "./helpers/tcp-proxy.ts";

const redisUrl = process.env.TURNPIKE_TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

function writeConfig(): string {
  const file = path.join(temporaryDirectory(), "turnpike.json");
  fs.writeFileSync(
    file,
    JSON.stringify({
      models: [{ id: "story", path: storiesModel, pricing: { prompt: 1, cached_prompt: 1, completion: 1 } }],
      plans: [
        { id: "three-rpm", name: "Three a minute", price: { amount: 100, currency: "usd" }, credit: 1_000_000, rpm: 3 },
        { id: "roomy", name: "Roomy", price: { amount: 100, currency: "usd" }, credit: 1_000_000 },
      ],
    }),
  );
  return file;
}

type Harness = { test: TestServer; database: Kysely<Database> };

async function harness(flags: Record<string, string> = {}): Promise<Harness> {
  const test = await startTestServer({ configFile: writeConfig(), flags });
  const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
  return { test, database };
}

/** A metered account on `plan`, and a client for a new key of it. */
async function accountClient({ test, database }: Harness, plan: string, key: Omit<CreateKeyOptions, "accountId"> = {}) {
  const account = await createAccount(database, { email: `limits-${Math.random().toString(36).slice(2)}@example.com` });
  await grantPlan(database, { accountId: account.id, plan: (await findPlan(database, plan))!, source: `test:${account.id}` });
  return { account, client: await keyClient({ test, database }, account.id, key) };
}

async function keyClient({ test, database }: Harness, accountId: string | null, key: Omit<CreateKeyOptions, "accountId"> = {}) {
  const created = await createApiKey(database, { name: "limits", accountId, ...key });
  return new OpenAI({ baseURL: test.baseURL, apiKey: created.key, maxRetries: 0 });
}

const ask = (client: OpenAI, max_tokens = 4, stop?: string[]) =>
  client.chat.completions.create({ model: "story", messages: [{ role: "user", content: "Hello" }], max_tokens, temperature: 0, stop }).withResponse();

async function refusal(promise: Promise<unknown>): Promise<InstanceType<typeof OpenAI.RateLimitError>> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof OpenAI.RateLimitError, String(error));
    return error;
  }
  assert.fail("the request was not refused");
}

describe("rate limits (in memory)", () => {
  let h: Harness;
  before(async () => {
    h = await harness();
  });
  after(async () => {
    await h?.database.destroy();
    await h?.test.close();
  });

  it("enforces a key's requests per minute with OpenAI's headers and retry-after", async () => {
    const { client } = await accountClient(h, "roomy", { rpm: 2 });
    const first = await ask(client);
    assert.equal(first.response.headers.get("x-ratelimit-limit-requests"), "2");
    assert.equal(first.response.headers.get("x-ratelimit-remaining-requests"), "1");
    assert.match(first.response.headers.get("x-ratelimit-reset-requests")!, /^\d+(\.\d+)?m?s$/);
    const second = await ask(client);
    assert.equal(second.response.headers.get("x-ratelimit-remaining-requests"), "0");
    const refused = await refusal(ask(client));
    assert.equal(refused.status, 429);
    assert.equal(refused.code, "rate_limit_exceeded");
    assert.equal(refused.type, "rate_limit_error");
    assert.ok(Number(refused.headers?.get("retry-after")) >= 1);
    assert.equal(refused.headers?.get("x-ratelimit-remaining-requests"), "0");
    assert.match(refused.message, /2 requests per minute/);
  });

  it("shares a plan's limit between all keys of the account", async () => {
    const { account, client } = await accountClient(h, "three-rpm");
    const other = await keyClient(h, account.id);
    await ask(client);
    await ask(other);
    const third = await ask(client);
    assert.equal(third.response.headers.get("x-ratelimit-limit-requests"), "3");
    const refused = await refusal(ask(other));
    assert.match(refused.message, /plan 'three-rpm'/);
    // Another account on the same plan has its own budget.
    const { client: stranger } = await accountClient(h, "three-rpm");
    assert.ok((await ask(stranger)).data.id);
  });

  it("charges prompt + max_tokens against tokens per minute and gives back what was not generated", async () => {
    const { client } = await accountClient(h, "roomy", { tpm: 2000 });
    const startedAt = Date.now();
    const first = await ask(client, 300, ["."]);
    const reserved = first.data.usage!.prompt_tokens + 300;
    assert.equal(first.response.headers.get("x-ratelimit-limit-tokens"), "2000");
    assert.equal(Number(first.response.headers.get("x-ratelimit-remaining-tokens")), 2000 - reserved);
    const second = await ask(client, 300, ["."]);
    const used = first.data.usage!.total_tokens;
    // Unused tokens of the first request came back; the bucket also refills at 2000 per minute.
    const refill = Math.ceil(((Date.now() - startedAt) * 2000) / 60_000);
    const remaining = Number(second.response.headers.get("x-ratelimit-remaining-tokens"));
    assert.ok(remaining >= 2000 - used - reserved && remaining <= 2000 - used - reserved + refill, `remaining ${remaining}, used ${used}, refill ≤ ${refill}`);
    assert.ok(first.data.usage!.completion_tokens < 300, "the story ended before max_tokens (so a refund was due)");
  });

  it("refuses a request larger than the whole token limit as too large", async () => {
    const { client } = await accountClient(h, "roomy", { tpm: 100 });
    const refused = await refusal(ask(client, 200));
    assert.equal(refused.code, "rate_limit_exceeded");
    assert.match(refused.message, /Request too large/);
  });

  it("reports the limits on every /v1 response of the key, charging only completions", async () => {
    const { client } = await accountClient(h, "roomy", { rpm: 5, tpm: 5000 });
    assert.equal((await ask(client)).response.headers.get("x-ratelimit-remaining-requests"), "4");
    const models = await client.models.list().withResponse();
    assert.equal(models.response.headers.get("x-ratelimit-limit-requests"), "5");
    assert.equal(models.response.headers.get("x-ratelimit-remaining-requests"), "4", "listing models uses no request");
    assert.equal(models.response.headers.get("x-ratelimit-limit-tokens"), "5000");
    const invalid = await fetch(`${h.test.baseURL}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${client.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "story", messages: [], max_tokens: 4 }),
    });
    assert.equal(invalid.status, 400);
    assert.equal(invalid.headers.get("x-ratelimit-remaining-requests"), "4", "a refused request reports the limits too");
    assert.equal((await ask(client)).response.headers.get("x-ratelimit-remaining-requests"), "3");
  });

  it("puts no limit on operator keys and sends no limit headers for them", async () => {
    const response = await ask(h.test.client);
    assert.equal(response.response.headers.get("x-ratelimit-limit-requests"), null);
  });

  it("counts refusals in /metrics", async () => {
    const text = await (await fetch(`${h.test.url}/metrics`)).text();
    assert.match(text, /turnpike_refused_requests_total\{reason="rate_limit_exceeded"\} [1-9]/);
    assert.match(text, /^turnpike_rate_limiter_degraded 0$/m);
    assert.match(text, /turnpike_tokens_total\{model="story",kind="completion"\} [1-9]/);
  });
});

describe("rate limits (Redis)", () => {
  it("enforces limits through Redis", async () => {
    const h = await harness({ redis_url: redisUrl });
    try {
      const { client } = await accountClient(h, "roomy", { rpm: 1 });
      await ask(client);
      await refusal(ask(client));
      const text = await (await fetch(`${h.test.url}/metrics`)).text();
      assert.match(text, /^turnpike_rate_limiter_degraded 0$/m);
      // The bucket lives in Redis, not in the node's memory.
      const keyId = (await h.database.selectFrom("api_keys").select("id").where("key_hash", "=", hashKey(client.apiKey!)).executeTakeFirstOrThrow()).id;
      const redis = new Redis(redisUrl);
      try {
        assert.equal(await redis.exists(`turnpike:rl:key:${keyId}:rpm`), 1);
      } finally {
        redis.disconnect();
      }
    } finally {
      await h.database.destroy();
      await h.test.close();
    }
  });

  it("falls back to limits of its own when Redis is unreachable, and says so in logs and metrics", async () => {
    const h = await harness({ redis_url: "redis://127.0.0.1:1" });
    try {
      const { client } = await accountClient(h, "roomy", { rpm: 1 });
      await ask(client);
      await refusal(ask(client));
      const text = await (await fetch(`${h.test.url}/metrics`)).text();
      assert.match(text, /^turnpike_rate_limiter_degraded 1$/m);
      assert.ok(h.test.logs().some((line) => line.level === 40 && /Redis unreachable/.test(String(line.msg))));
    } finally {
      await h.database.destroy();
      await h.test.close();
    }
  });

  it("never grants a key more than its limit when Redis goes away and comes back without its data", async () => {
    const proxy = new TcpProxy(redisUrl);
    await proxy.open();
    const h = await harness({ redis_url: proxy.url(redisUrl) });
    const redis = new Redis(redisUrl);
    try {
      // 30 a minute: the bucket holds 30 and one more comes back every 2 s.
      const { client } = await accountClient(h, "roomy", { rpm: 30 });
      const keyId = (await h.database.selectFrom("api_keys").select("id").where("key_hash", "=", hashKey(client.apiKey!)).executeTakeFirstOrThrow()).id;
      const degraded = async () => /^turnpike_rate_limiter_degraded 1$/m.test(await (await fetch(`${h.test.url}/metrics`)).text());
      const burst = async (count: number) => {
        let served = 0;
        for (let index = 0; index < count; index++) {
          try {
            await ask(client, 1);
            served++;
          } catch (error) {
            assert.ok(error instanceof OpenAI.RateLimitError, String(error));
          }
        }
        return served;
      };
      const started = Date.now();
      // 30, plus one per 2 s the burst took on a loaded machine.
      const first = await burst(35);
      assert.ok(first >= 30 && first <= 30 + Math.floor((Date.now() - started) / 2000), `served ${first} of the first 35`);

      await proxy.close();
      const whileAway = await burst(35);
      // The health probe decides (three failed probes a second apart); requests meanwhile were decided locally.
      for (let attempt = 0; attempt < 300 && !(await degraded()); attempt++) await delay(50);
      assert.ok(await degraded(), "the node went on with limits of its own");

      // Back, but empty: the node's bucket for the key is all there is.
      await redis.del(`turnpike:rl:key:${keyId}:rpm`);
      await proxy.open();
      for (let attempt = 0; attempt < 200 && (await degraded()); attempt++) await delay(50);
      assert.equal(await degraded(), false, "back on Redis");
      const afterReturn = await burst(35);

      const bound = 30 + Math.floor((Date.now() - started) / 2000);
      const total = first + whileAway + afterReturn;
      assert.ok(total <= bound, `served ${total} (${first}, then ${whileAway} while Redis was away, then ${afterReturn}); at most ${bound} allowed`);
      assert.equal(await redis.exists(`turnpike:rl:key:${keyId}:rpm`), 1, "Redis holds the key's bucket again");
    } finally {
      redis.disconnect();
      await h.database.destroy();
      await h.test.close();
      await proxy.close();
    }
  });
});
