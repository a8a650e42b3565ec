/**
 * admitChatCompletion: the cheap refusals (model permission, rate limits, quota) come before the
 * engine's `prepare`, and rate limits end up charged the exact count. A scripted engine counts
 * `prepare`; metering and limits are the real ones, on SQLite and PostgreSQL.
 */
import { refusal } from "../../../../test/helpers/api-error.ts";
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createAccount } from "../../../accounts/accounts.ts";
import { createApiKey, type ApiKeyRecord, type CreateKeyOptions } from "../../../auth/api-keys.ts";
import { grantCredit } from "../../../billing/ledger.ts";
import { Metering } from "../../../billing/metering.ts";
import { Catalog, type CatalogModel } from "../../../catalog/catalog.ts";
import type { Engine, GenerationRequest } from "../../../engines/engine.ts";
import { FakeEngine, fakePromptTokens } from "../../../engines/fake/fake-engine.ts";
import { MemoryRateLimiter } from "../../../limits/memory.ts";
import { RequestLimits } from "../../../limits/request-limits.ts";
import { InvalidRequestError } from "../../../protocol/errors.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../../../test/helpers/databases.ts";
import { admitChatCompletion } from "./admit.ts";

const CONTEXT = 2048;

function model(id: string, engine: Engine): CatalogModel {
  return {
    id,
    ownedBy: "test",
    created: 0,
    engine,
    configuredContextLength: CONTEXT,
    // 1 credit per prompt token, 2 per completion token.
    pricing: { prompt: 1_000_000, cachedPrompt: 500_000, completion: 2_000_000 },
    outputModalities: ["text"],
  };
}

const ask = (content = "Hello there", extra: Record<string, unknown> = {}) => ({ model: "story", messages: [{ role: "user", content }], max_tokens: 10, ...extra });


for (const backend of backends) {
  describe(`admitChatCompletion (${backend})`, () => {
    let store: TestDatabase;
    let engine: FakeEngine;
    let dependencies: Parameters<typeof admitChatCompletion>[0];

    before(async () => {
      store = await openTestDatabase(backend);
      engine = new FakeEngine({ contextLength: CONTEXT });
      dependencies = {
        catalog: new Catalog([model("story", engine), model("other", engine)]),
        metering: new Metering({ database: store.database, nodeId: () => "node-test", holdTtlMs: 60_000 }),
        limits: new RequestLimits(new MemoryRateLimiter()),
      };
    });
    after(async () => {
      await store?.close();
    });

    async function keyOf(credit: number, options: Omit<CreateKeyOptions, "accountId"> = {}): Promise<ApiKeyRecord> {
      const account = await createAccount(store.database, { email: `admit-${Math.random().toString(36).slice(2)}@example.com` });
      if (credit > 0) await grantCredit(store.database, { accountId: account.id, amount: credit, source: `test:${account.id}` });
      return createApiKey(store.database, { name: "admit", accountId: account.id, ...options });
    }

    const admit = (key: ApiKeyRecord, body: unknown) => admitChatCompletion(dependencies, { body, key, requestId: `req_${Math.random()}` });
    const holdsOf = async (key: ApiKeyRecord) => store.database.selectFrom("holds").select("amount").where("key_id", "=", key.id).execute();

    it("refuses an account that cannot pay the least the hold would take, writing no hold and preparing nothing", async () => {
      const before = engine.prepared;
      // "Hello there": at least 3 prompt tokens + 10 completion tokens = 23 credits.
      for (const credit of [0, 22]) {
        const key = await keyOf(credit);
        const error = await refusal(admit(key, ask()));
        assert.equal(error.status, 429);
        assert.equal(error.code, "insufficient_quota");
        assert.deepEqual(await holdsOf(key), []);
      }
      assert.equal(engine.prepared, before);
    });

    it("refuses a key whose spend cap cannot cover the least before preparing", async () => {
      const key = await keyOf(1_000_000, { spendCap: 5 });
      const before = engine.prepared;
      const error = await refusal(admit(key, ask()));
      assert.equal(error.code, "insufficient_quota");
      assert.match(error.message, /spend cap/);
      assert.equal(engine.prepared, before);
    });

    it("refuses a key that may not use the model before charging its limits or preparing", async () => {
      const key = await keyOf(1_000_000, { models: ["other"], rpm: 1 });
      const before = engine.prepared;
      const error = await refusal(admit(key, ask()));
      assert.equal(error.status, 403);
      assert.equal(error.code, "model_not_allowed");
      assert.equal(engine.prepared, before);
      // Its one request a minute was not used.
      await admit(key, ask("Hello", { model: "other" }));
    });

    it("refuses a key over its requests per minute before preparing", async () => {
      const key = await keyOf(1_000_000, { rpm: 1 });
      await admit(key, ask());
      const before = engine.prepared;
      const error = await refusal(admit(key, ask()));
      assert.equal(error.code, "rate_limit_exceeded");
      assert.equal(engine.prepared, before);
    });

    it("admits a funded request: holds its exact worst case and charges its exact tokens against the limits", async () => {
      const key = await keyOf(1_000_000, { tpm: 10_000 });
      const admitted = await admit(key, ask("Hello there", { n: 2 }));
      // 10 + ceil(11 / 4) = 13 prompt tokens; 2 choices × 10.
      assert.equal(admitted.job.prepared.promptTokens, 13);
      assert.equal(admitted.admission.reserved, 13 + 2 * 2 * 10);
      assert.equal(admitted.limited.headers["x-ratelimit-remaining-tokens"], String(10_000 - 13 - 20));
      await admitted.admission.settle({ usage: null, status: 500, finishReason: null, latencyMs: 1 });
      await admitted.limited.finish(0);
    });

    it("refuses once tokenized a request whose exact tokens exceed the token limit, giving back what it charged", async () => {
      // At least 25 tokens by the bound (100 characters / 4) + 10; exactly 10 more.
      const key = await keyOf(1_000_000, { tpm: 40 });
      const error = await refusal(admit(key, ask("x".repeat(100))));
      assert.equal(error.code, "rate_limit_exceeded");
      assert.match(error.message, /Request too large/);
      assert.deepEqual(await holdsOf(key), []);
      // The lower bound's 35 tokens came back: a 20-token request fits.
      const admitted = await admit(key, ask("x".repeat(4)));
      assert.equal(admitted.limited.headers["x-ratelimit-remaining-tokens"], String(40 - 11 - 10));
      await admitted.admission.settle({ usage: null, status: 500, finishReason: null, latencyMs: 1 });
    });

    it("charges the limits once, with the exact tokens, when the engine knows its prompt charge from the bound (an upstream's)", async () => {
      // An engine whose prepare counts what its bound already says (as the upstream engine's does with max_tokens).
      class BoundCharged extends FakeEngine {
        chargedPrompt(request: GenerationRequest): number | undefined {
          return request.maxTokens === undefined ? undefined : fakePromptTokens(request);
        }
      }
      const charged = new BoundCharged({ contextLength: CONTEXT });
      const consumed: number[] = [];
      const limiter = new MemoryRateLimiter();
      const consume = limiter.consume.bind(limiter);
      limiter.consume = (checks) => {
        consumed.push(checks.length);
        return consume(checks);
      };
      const once = { ...dependencies, catalog: new Catalog([model("story", charged)]), limits: new RequestLimits(limiter) };
      const key = await keyOf(1_000_000, { tpm: 10_000 });
      const admitted = await admitChatCompletion(once, { body: ask("Hello there"), key, requestId: "req_once" });
      assert.equal(admitted.job.prepared.promptTokens, 13);
      assert.equal(admitted.limited.headers["x-ratelimit-remaining-tokens"], String(10_000 - 13 - 10), "the exact charge");
      assert.deepEqual(consumed, [1], "one charge: nothing left to raise");
      await admitted.admission.settle({ usage: null, status: 500, finishReason: null, latencyMs: 1 });
      await admitted.limited.finish(0);
      // An engine that counts in prepare (llama.cpp's tokenizer), new to this process: the lower bound, then the raise.
      consumed.length = 0;
      const counting = { ...once, catalog: new Catalog([model("story", new FakeEngine({ contextLength: CONTEXT }))]) };
      const raised = await admitChatCompletion(counting, { body: ask("Hello there"), key, requestId: "req_twice" });
      assert.equal(consumed.length, 2, "the lower bound at admission, then the raise to what prepare counted");
      assert.equal(raised.limited.headers["x-ratelimit-remaining-tokens"], String(10_000 - 13 - 10), "the same exact charge (the first request gave its tokens back)");
      await raised.admission.settle({ usage: null, status: 500, finishReason: null, latencyMs: 1 });
      await raised.limited.finish(0);
      // Once it counted a prompt, the next is charged a guess learnt from it (3 by the bound, 10 more
      // counted: 3 + 13), and what prepare counts (13) is given back to, not raised to: one charge.
      consumed.length = 0;
      const guessed = await admitChatCompletion(counting, { body: ask("Hello there"), key, requestId: "req_guessed" });
      assert.deepEqual(consumed, [1], "one charge: the guess covered the exact count");
      assert.equal(guessed.limited.headers["x-ratelimit-remaining-tokens"], String(10_000 - 13 - 10), "the exact charge once the guess's rest went back");
      await guessed.admission.settle({ usage: null, status: 500, finishReason: null, latencyMs: 1 });
      await guessed.limited.finish(0);
      // Every token came back: the guess's rest at once, the rest at finish.
      const next = await admitChatCompletion(once, { body: ask("Hello there"), key, requestId: "req_after" });
      assert.equal(next.limited.headers["x-ratelimit-remaining-tokens"], String(10_000 - 13 - 10));
      await next.admission.settle({ usage: null, status: 500, finishReason: null, latencyMs: 1 });
      await next.limited.finish(0);
    });

    it("never refuses on the guess: a limit that cannot take it is charged the lower bound, then the exact count", async () => {
      const counting = new FakeEngine({ contextLength: CONTEXT });
      const consumed: number[] = [];
      const limiter = new MemoryRateLimiter();
      const consume = limiter.consume.bind(limiter);
      limiter.consume = (checks) => {
        consumed.push(checks[0]!.cost);
        return consume(checks);
      };
      const limited = { ...dependencies, catalog: new Catalog([model("story", counting)]), limits: new RequestLimits(limiter) };
      // 25 tokens a minute: "Hello there" is 13 + 10; the guess after the first (16 + 10) is too large for the limit.
      const key = await keyOf(1_000_000, { tpm: 25 });
      for (const requestId of ["req_learn", "req_fall_back"]) {
        const admitted = await admitChatCompletion(limited, { body: ask("Hello there"), key, requestId });
        assert.equal(admitted.limited.headers["x-ratelimit-remaining-tokens"], String(25 - 13 - 10));
        await admitted.admission.settle({ usage: null, status: 500, finishReason: null, latencyMs: 1 });
        await admitted.limited.finish(0);
      }
      assert.deepEqual(consumed, [13, 10, 26, 13, 10], "learn: bound, raise; then the guess (refused, charging nothing), bound, raise");
      // A request the exact count does not fit is refused as before, by the raise.
      const error = await refusal(admitChatCompletion(limited, { body: ask("x".repeat(60)), key, requestId: "req_too_large" }));
      assert.match(error.message, /Request too large/);
    });

    it("gives the tokens back when prepare refuses the request, keeping its request counted", async () => {
      const key = await keyOf(1_000_000, { tpm: 100, rpm: 2 });
      engine.prepareFailure = new InvalidRequestError("bad schema", "response_format");
      try {
        const error = await refusal(admit(key, ask()));
        assert.equal(error.status, 400);
      } finally {
        engine.prepareFailure = undefined;
      }
      const admitted = await admit(key, ask());
      assert.equal(admitted.limited.headers["x-ratelimit-remaining-tokens"], String(100 - 13 - 10), "all 100 tokens were there again");
      assert.equal(admitted.limited.headers["x-ratelimit-remaining-requests"], "0", "the refused request counted");
      await admitted.admission.settle({ usage: null, status: 500, finishReason: null, latencyMs: 1 });
    });
  });
}
