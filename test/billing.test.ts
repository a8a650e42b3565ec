/**
 * Metered quota end to end: real server, real model, real SQLite, the openai client.
 * Prices make tokens expensive so a small credit covers only a few requests.
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
import { modelsDir, postJson, storiesModel, temporaryDirectory } from "./helpers/server.ts";
import { runCli, startServeProcess, type ServeProcess } from "./helpers/process.ts";
import { stormOfCutRequests } from "./helpers/storm.ts";

const randomModel = path.join(modelsDir, "llama-2-tiny-random.gguf");
/** Credit units per million tokens: 1 credit per prompt token, 2 per completion token. */
const pricing = { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 };

function writeConfig(dataDir: string): string {
  const file = path.join(dataDir, "turnpike.json");
  fs.writeFileSync(
    file,
    JSON.stringify({
      models: [
        { id: "story", path: storiesModel, pricing },
        { id: "random", path: randomModel, pricing },
        { id: "free", path: storiesModel },
      ],
      plans: [
        { id: "small", name: "Small", price: { amount: 500, currency: "usd" }, credit: 2000, days: 30 },
        { id: "story-only", name: "Story only", price: { amount: 100, currency: "usd" }, credit: 1000, days: 30, models: ["story"] },
      ],
    }),
  );
  return file;
}

async function cliJson(args: string[]): Promise<any> {
  const result = await runCli([...args, "--json"]);
  assert.equal(result.code, 0, result.stderr);
  return JSON.parse(result.stdout);
}

async function ledgerOf(dataDir: string, accountId: string) {
  const database = await openStore({ dataDir, databaseUrl: "" });
  try {
    return await checkLedger(database, accountId);
  } finally {
    await database.destroy();
  }
}

/**
 * The account's books once every hold is settled (waits up to 5 s): a request's own hold is
 * settled in the group commit after its answer (at most 100 ms later), not before it.
 */
async function settledLedgerOf(dataDir: string, accountId: string) {
  let check = await ledgerOf(dataDir, accountId);
  for (let attempt = 0; attempt < 200 && check.activeHolds > 0; attempt++) {
    await delay(25);
    check = await ledgerOf(dataDir, accountId);
  }
  assert.equal(check.activeHolds, 0, "every hold was settled");
  return check;
}

/**
 * Waits until every hold of the account is settled, then checks the books: the balance equals
 * its entries and the credit less what the usage records charged, and each record is billed
 * exactly for its tokens. Returns the records.
 */
async function assertBilledExactly(dataDir: string, accountId: string, credit: number) {
  const check = await settledLedgerOf(dataDir, accountId);
  assert.equal(check.balance, check.sumOfEntries);
  const database = await openStore({ dataDir, databaseUrl: "" });
  const records = await database.selectFrom("usage_records").selectAll().where("account_id", "=", accountId).execute();
  await database.destroy();
  const prices = { prompt: pricing.prompt, cachedPrompt: pricing.cached_prompt, completion: pricing.completion };
  for (const record of records) {
    const usage = { promptTokens: Number(record.prompt_tokens), cachedPromptTokens: Number(record.cached_prompt_tokens), completionTokens: Number(record.completion_tokens) };
    assert.equal(Number(record.cost), costOf(prices, usage), `billed exactly: ${JSON.stringify(record)}`);
  }
  assert.equal(check.balance, credit - records.reduce((sum, record) => sum + Number(record.cost), 0), "the balance is the credit less exactly what the records charged");
  return records;
}

describe("metered quota", () => {
  let dataDir: string;
  let server: ServeProcess;
  before(async () => {
    dataDir = temporaryDirectory();
    server = await startServeProcess(["--config", writeConfig(dataDir), "--data-dir", dataDir, "--parallel", "4", "--queue-size", "600"]);
    for (let attempt = 0; attempt < 200 && (await fetch(`${server.url}/ready`)).status !== 200; attempt++) await delay(50);
  });
  after(async () => {
    await server?.stop();
  });

  async function meteredAccount(plan: string | null, keyFlags: string[] = []) {
    const email = `user-${Math.random().toString(36).slice(2)}@example.com`;
    const account = await cliJson(["accounts", "create", "--email", email, "--data-dir", dataDir]);
    if (plan !== null) {
      const granted = await runCli(["plans", "grant", "--account", email, "--plan", plan, "--data-dir", dataDir]);
      assert.equal(granted.code, 0, granted.stderr);
    }
    const key = await cliJson(["keys", "create", "--account", email, ...keyFlags, "--data-dir", dataDir]);
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key.key, maxRetries: 0 });
    return { email, account, key, client };
  }

  it("shows the granted plan and balance", async () => {
    const { email, account } = await meteredAccount("small");
    const shown = await cliJson(["accounts", "show", "--email", email, "--data-dir", dataDir]);
    assert.equal(shown.id, account.id);
    assert.equal(shown.balance, 2000);
    assert.equal(shown.plan, "small");
    assert.equal(shown.role, "user");
  });

  it("bills a request exactly: its tokens times the prices, rounded up", async () => {
    const { email, account, client } = await meteredAccount("small");
    const completion = await client.chat.completions.create({ model: "story", messages: [{ role: "user", content: "Hi" }], max_tokens: 9, temperature: 0 });
    const usage = completion.usage!;
    const expected = costOf(
      { prompt: pricing.prompt, cachedPrompt: pricing.cached_prompt, completion: pricing.completion },
      { promptTokens: usage.prompt_tokens, cachedPromptTokens: usage.prompt_tokens_details?.cached_tokens ?? 0, completionTokens: usage.completion_tokens },
    );
    await settledLedgerOf(dataDir, account.id);
    const shown = await cliJson(["accounts", "show", "--email", email, "--data-dir", dataDir]);
    assert.equal(shown.balance, 2000 - expected);
    const check = await ledgerOf(dataDir, account.id);
    assert.equal(check.balance, check.sumOfEntries);
    assert.equal(check.activeHolds, 0);
  });

  it("admits no more than the credit covers under 500 concurrent requests, and bills each admitted one exactly", async () => {
    // Worst case per request: ~30 prompt + 2 × 40 completion ≈ 110 credits; 1,000 credits cover about 9.
    const { account, client } = await meteredAccount("story-only");
    const attempts = await Promise.allSettled(
      Array.from({ length: 500 }, (_unused, index) =>
        client.chat.completions.create({ model: "story", messages: [{ role: "user", content: `Story ${index % 7}` }], max_tokens: 40, temperature: 0 }),
      ),
    );
    const admitted = attempts.filter((attempt) => attempt.status === "fulfilled").map((attempt) => (attempt as PromiseFulfilledResult<OpenAI.Chat.Completions.ChatCompletion>).value);
    const refused = attempts.filter((attempt) => attempt.status === "rejected").map((attempt) => (attempt as PromiseRejectedResult).reason);
    assert.ok(admitted.length >= 5 && admitted.length <= 12, `admitted ${admitted.length}`);
    for (const reason of refused) {
      assert.ok(reason instanceof OpenAI.RateLimitError, String(reason));
      assert.equal((reason as InstanceType<typeof OpenAI.RateLimitError>).code, "insufficient_quota");
    }
    const charged = admitted.reduce(
      (sum, completion) =>
        sum +
        costOf(
          { prompt: pricing.prompt, cachedPrompt: pricing.cached_prompt, completion: pricing.completion },
          {
            promptTokens: completion.usage!.prompt_tokens,
            cachedPromptTokens: completion.usage!.prompt_tokens_details?.cached_tokens ?? 0,
            completionTokens: completion.usage!.completion_tokens,
          },
        ),
      0,
    );
    const check = await settledLedgerOf(dataDir, account.id);
    assert.equal(check.balance, 1000 - charged, "every admitted request billed exactly, nothing else");
    assert.ok(check.balance >= 0, "no overspend");
    assert.equal(check.balance, check.sumOfEntries, "balance = sum of entries");
    assert.equal(check.activeHolds, 0);
  });

  /**
   * Streams from the never-ending random model, cuts the connection after `contentDeltas`
   * content deltas, and waits for the hold to be settled. Returns the usage record.
   */
  async function cutStream(secret: string, accountId: string, extra: Record<string, unknown>, contentDeltas: number) {
    const abort = new AbortController();
    const response = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${secret}` },
      body: JSON.stringify({ model: "random", messages: [{ role: "user", content: "Go" }], stream: true, ...extra }),
      signal: abort.signal,
    });
    const reader = response.body!.getReader();
    let received = 0;
    let text = "";
    while (received < contentDeltas) {
      const { value } = await reader.read();
      text += new TextDecoder().decode(value);
      received = (text.match(/"content":"[^"]/g) ?? []).length;
    }
    abort.abort();
    let check = await ledgerOf(dataDir, accountId);
    for (let attempt = 0; attempt < 100 && check.activeHolds > 0; attempt++) {
      await delay(20);
      check = await ledgerOf(dataDir, accountId);
    }
    assert.equal(check.activeHolds, 0, "the hold was settled");
    const database = await openStore({ dataDir, databaseUrl: "" });
    const record = await database.selectFrom("usage_records").selectAll().where("account_id", "=", accountId).executeTakeFirstOrThrow();
    await database.destroy();
    assert.equal(record.finish_reason, "cancelled");
    return { received, check, record };
  }

  it("bills a stream cut by the client for the tokens generated before the cut", async () => {
    const { account, key } = await meteredAccount("small");
    const listed = (await cliJson(["keys", "list", "--data-dir", dataDir])).find((row: any) => row.account_id === account.id);
    assert.ok(listed, "keys list shows the account's key");
    const { received, check, record } = await cutStream(key.key as string, account.id, { max_tokens: 600 }, 20);
    assert.equal(check.balance, check.sumOfEntries);
    const generated = Number(record.completion_tokens);
    assert.ok(generated >= received && generated < 600, `billed ${generated} tokens for ${received} received`);
    assert.equal(Number(record.cost), Number(record.prompt_tokens) * 1 + generated * 2, "billed exactly for what was generated");
    assert.equal(check.balance, 2000 - Number(record.cost));
  });

  it("after a storm of requests cut at random moments (queued, generating, or finished), every hold is settled and each is billed exactly", async () => {
    // 2,000 credits; each request may cost up to ~30 + 2 × 60 credits, so about a dozen fit at once.
    const { account, key } = await meteredAccount("small");
    const outcomes = await stormOfCutRequests({
      baseURL: `${server.url}/v1`,
      key: key.key as string,
      requests: 30,
      seed: 7,
      maxStartDelayMs: 60,
      maxCutAfterMs: 80,
      body: (index, random) => ({ model: "random", messages: [{ role: "user", content: `Storm ${index}` }], max_tokens: 10 + Math.floor(random() * 50) }),
    });
    assert.ok(outcomes.every((outcome) => outcome === 200 || outcome === 429 || outcome === "cut"), JSON.stringify(outcomes));
    // Whichever requests the timing cut, finished or refused, each is billed exactly (the cut and
    // the finished cases each have a test of their own that does not depend on timing).
    await assertBilledExactly(dataDir, account.id, 2000);
  });

  it("bills n=3 for all three choices exactly: the prompt once, every choice's completion tokens", async () => {
    const { email, account, client } = await meteredAccount("small");
    const request = { model: "story", messages: [{ role: "user" as const, content: "Hi" }], max_tokens: 9, temperature: 0 };
    const one = await client.chat.completions.create(request);
    await settledLedgerOf(dataDir, account.id);
    const before = (await cliJson(["accounts", "show", "--email", email, "--data-dir", dataDir])).balance;
    const three = await client.chat.completions.create({ ...request, n: 3 });
    assert.equal(three.choices.length, 3);
    const usage = three.usage!;
    assert.equal(usage.prompt_tokens, one.usage!.prompt_tokens, "the prompt is counted once");
    assert.equal(usage.completion_tokens, 3 * one.usage!.completion_tokens, "every choice's tokens are counted");
    const expected = costOf(
      { prompt: pricing.prompt, cachedPrompt: pricing.cached_prompt, completion: pricing.completion },
      { promptTokens: usage.prompt_tokens, cachedPromptTokens: usage.prompt_tokens_details?.cached_tokens ?? 0, completionTokens: usage.completion_tokens },
    );
    await settledLedgerOf(dataDir, account.id);
    const after = (await cliJson(["accounts", "show", "--email", email, "--data-dir", dataDir])).balance;
    assert.equal(before - after, expected);
    const check = await ledgerOf(dataDir, account.id);
    assert.equal(check.balance, check.sumOfEntries);
    assert.equal(check.activeHolds, 0);
  });

  it("holds n × max_tokens completion tokens: a request whose choices could exceed the credit is refused", async () => {
    // 2,000 credits: one choice of 300 tokens (≤ 600 + prompt) fits, eight (4,800 + prompt) do not.
    const { client } = await meteredAccount("small");
    const request = { model: "story", messages: [{ role: "user" as const, content: "Hi" }], max_tokens: 300, temperature: 0 };
    await assert.rejects(
      client.chat.completions.create({ ...request, n: 8 }),
      (error: unknown) => error instanceof OpenAI.RateLimitError && error.code === "insufficient_quota",
    );
    assert.equal((await client.chat.completions.create({ ...request, max_tokens: 5 })).choices.length, 1);
  });

  it("bills a stream with n=3 cut by the client for the tokens of all choices generated before the cut", async () => {
    const { account, key } = await meteredAccount("small");
    const { received, check, record } = await cutStream(key.key as string, account.id, { max_tokens: 200, n: 3 }, 30);
    const generated = Number(record.completion_tokens);
    assert.ok(generated >= received && generated < 600, `billed ${generated} tokens for ${received} received`);
    const expected = costOf(
      { prompt: pricing.prompt, cachedPrompt: pricing.cached_prompt, completion: pricing.completion },
      { promptTokens: Number(record.prompt_tokens), cachedPromptTokens: Number(record.cached_prompt_tokens), completionTokens: generated },
    );
    assert.equal(Number(record.cost), expected, "billed exactly for what was generated");
    assert.equal(check.balance, 2000 - Number(record.cost));
  });

  it("refuses an expired key with 401", async () => {
    const { client } = await meteredAccount("small", ["--expires", "2020-01-01T00:00:00Z"]);
    await assert.rejects(client.chat.completions.create({ model: "story", messages: [{ role: "user", content: "Hi" }] }), OpenAI.AuthenticationError);
  });

  it("refuses a model outside the key's allowed models, or the plan's, with 403 model_not_allowed", async () => {
    const { client } = await meteredAccount("small", ["--models", "free"]);
    await assert.rejects(
      client.chat.completions.create({ model: "story", messages: [{ role: "user", content: "Hi" }] }),
      (error: unknown) => error instanceof OpenAI.PermissionDeniedError && error.code === "model_not_allowed",
    );
    assert.ok(await client.chat.completions.create({ model: "free", messages: [{ role: "user", content: "Hi" }], max_tokens: 2 }));
    const storyOnly = await meteredAccount("story-only");
    await assert.rejects(
      storyOnly.client.chat.completions.create({ model: "random", messages: [{ role: "user", content: "Hi" }] }),
      (error: unknown) => error instanceof OpenAI.PermissionDeniedError && error.code === "model_not_allowed",
    );
  });

  it("refuses with 429 insufficient_quota once the key's spend cap is reached", async () => {
    const { client } = await meteredAccount("small", ["--spend-cap", "60"]);
    const body = { model: "story", messages: [{ role: "user" as const, content: "Hi" }], max_tokens: 5 };
    await client.chat.completions.create(body);
    let refused: unknown;
    for (let attempt = 0; attempt < 10 && refused === undefined; attempt++) {
      await client.chat.completions.create(body).catch((error: unknown) => (refused = error));
    }
    assert.ok(refused instanceof OpenAI.RateLimitError, String(refused));
    assert.equal((refused as InstanceType<typeof OpenAI.RateLimitError>).code, "insufficient_quota");
    assert.match((refused as Error).message, /spend cap/);
  });

  it("refuses an account without credit before generating", async () => {
    const { client } = await meteredAccount(null);
    const response = await postJson(`${server.url}/v1/chat/completions`, { model: "story", messages: [{ role: "user", content: "Hi" }] }, {
      authorization: `Bearer ${(client as unknown as { apiKey: string }).apiKey}`,
    });
    assert.equal(response.status, 429);
    assert.equal(response.body.error.type, "insufficient_quota");
    assert.equal(response.body.error.code, "insufficient_quota");
  });
});

describe("crash recovery", () => {
  it("leaves no hold and consistent balances after kill -9 mid-stream and a restart", async () => {
    const dataDir = temporaryDirectory();
    const configFile = writeConfig(dataDir);
    const email = "crash@example.com";
    // The server writes the config's plans to the database at start.
    const first = await startServeProcess(["--config", configFile, "--data-dir", dataDir]);
    const account = await cliJson(["accounts", "create", "--email", email, "--data-dir", dataDir]);
    assert.equal((await runCli(["plans", "grant", "--account", email, "--plan", "small", "--data-dir", dataDir])).code, 0);
    const key = await cliJson(["keys", "create", "--account", email, "--data-dir", dataDir]);
    for (let attempt = 0; attempt < 200 && (await fetch(`${first.url}/ready`)).status !== 200; attempt++) await delay(50);
    const response = await fetch(`${first.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key.key}` },
      body: JSON.stringify({ model: "random", messages: [{ role: "user", content: "Go" }], max_tokens: 900, stream: true }),
    });
    const reader = response.body!.getReader();
    await reader.read();
    const during = await ledgerOf(dataDir, account.id);
    assert.equal(during.activeHolds, 1, "the running stream holds credit");
    assert.equal(await first.stop("SIGKILL"), null);
    await reader.cancel().catch(() => {});

    const second = await startServeProcess(["--config", configFile, "--data-dir", dataDir]);
    try {
      const after = await ledgerOf(dataDir, account.id);
      assert.equal(after.activeHolds, 0, "the dead node's hold was closed at start-up");
      // Charged for its last checkpoint, if it lived to write one (test/crash-billing.test.ts has the figures), else nothing.
      const database = await openStore({ dataDir, databaseUrl: "" });
      const records = await database.selectFrom("usage_records").select(["cost", "finish_reason"]).where("account_id", "=", account.id).execute();
      await database.destroy();
      assert.ok(records.length <= 1 && records.every((record) => record.finish_reason === "interrupted"), JSON.stringify(records));
      assert.equal(after.balance, 2000 - records.reduce((sum, record) => sum + Number(record.cost), 0), "charged what its checkpoint recorded, nothing more");
      assert.equal(after.balance, after.sumOfEntries);
      assert.equal(after.lotsRemaining, after.balance);
    } finally {
      await second.stop();
    }
  });
});

describe("graceful shutdown under load", () => {
  it("exits 0, answers every request (finished, cut with shutting_down, or refused), and bills each exactly", async () => {
    const dataDir = temporaryDirectory();
    const configFile = path.join(dataDir, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [{ id: "random", path: randomModel, pricing }],
        plans: [{ id: "big", name: "Big", price: { amount: 100, currency: "usd" }, credit: 1_000_000 }],
      }),
    );
    const email = "shutdown@example.com";
    const server = await startServeProcess(["--config", configFile, "--data-dir", dataDir, "--parallel", "2", "--queue-size", "50", "--shutdown-timeout", "1", "--drain-delay", "0"]);
    const account = await cliJson(["accounts", "create", "--email", email, "--data-dir", dataDir]);
    assert.equal((await runCli(["plans", "grant", "--account", email, "--plan", "big", "--data-dir", dataDir])).code, 0);
    const key = await cliJson(["keys", "create", "--account", email, "--data-dir", dataDir]);
    for (let attempt = 0; attempt < 200 && (await fetch(`${server.url}/ready`)).status !== 200; attempt++) await delay(50);
    // 20 requests of 1,000 to 1,950 tokens on 2 slots: far more work than the shutdown leaves time for.
    const answers = Promise.all(
      Array.from({ length: 20 }, async (_, index) => {
        const stream = index % 2 === 0;
        const response = await fetch(`${server.url}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${key.key}` },
          body: JSON.stringify({ model: "random", messages: [{ role: "user", content: `Go ${index}` }], max_tokens: 1000 + 50 * index, stream }),
        }).catch(() => undefined);
        if (response === undefined) return "refused";
        const text = await response.text();
        if (response.status === 503) return JSON.parse(text).error.code === "shutting_down" ? "refused" : text;
        if (response.status !== 200) return text;
        if (!stream) return "finished";
        if (text.trimEnd().endsWith("data: [DONE]")) return "finished";
        return text.includes('"code":"shutting_down"') ? "cut" : text;
      }),
    );
    await delay(150);
    assert.equal(await server.stop("SIGTERM"), 0, server.stderr());
    const outcomes = await answers;
    assert.ok(outcomes.every((outcome) => ["finished", "cut", "refused"].includes(outcome)), JSON.stringify(outcomes));

    const records = await assertBilledExactly(dataDir, account.id, 1_000_000);
    for (const record of records) {
      if (record.finish_reason === "cancelled") assert.equal(Number(record.status), 503, "a request the shutdown cut is recorded as such");
    }
    assert.ok(outcomes.includes("cut") && outcomes.includes("refused"), `the shutdown cut some and refused some: ${JSON.stringify(outcomes)}`);
  });
});
