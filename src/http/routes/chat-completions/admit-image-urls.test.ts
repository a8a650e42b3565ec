/**
 * admitChatCompletion and the image URL policy (issue 19 row 8): the hosts of image URLs are
 * looked up after the cheap refusals (an account that cannot pay costs no lookup) and before the
 * engine's `prepare` (which may already send the messages upstream to count them); a refused URL
 * writes no hold and gives the rate-limit tokens back. Real metering and limits, on SQLite and
 * PostgreSQL; a scripted vision engine; a fake resolver that records its calls.
 */
import { refusal } from "../../../../test/helpers/api-error.ts";
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createAccount } from "../../../accounts/accounts.ts";
import { createApiKey, type ApiKeyRecord, type CreateKeyOptions } from "../../../auth/api-keys.ts";
import { grantCredit } from "../../../billing/ledger.ts";
import { Metering } from "../../../billing/metering.ts";
import { Catalog } from "../../../catalog/catalog.ts";
import { FakeEngine } from "../../../engines/fake/fake-engine.ts";
import { MemoryRateLimiter } from "../../../limits/memory.ts";
import { RequestLimits } from "../../../limits/request-limits.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../../../test/helpers/databases.ts";
import { ImageUrlGuard } from "../../image-urls/image-url-guard.ts";
import { admitChatCompletion } from "./admit.ts";

const withImage = (url: string) => ({
  model: "eyes",
  messages: [{ role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image_url", image_url: { url } }] }],
  max_tokens: 10,
});

for (const backend of backends) {
  describe(`admitChatCompletion with image URLs (${backend})`, () => {
    let store: TestDatabase;
    let engine: FakeEngine;
    const lookups: string[] = [];
    let dependencies: Parameters<typeof admitChatCompletion>[0];

    before(async () => {
      store = await openTestDatabase(backend);
      engine = new FakeEngine({ contextLength: 4096, capabilities: { inputModalities: ["text", "image"] } });
      dependencies = {
        catalog: new Catalog([
          { id: "eyes", ownedBy: "test", created: 0, engine, configuredContextLength: 4096, pricing: { prompt: 1_000_000, cachedPrompt: 500_000, completion: 2_000_000 }, outputModalities: ["text"] },
        ]),
        metering: new Metering({ database: store.database, nodeId: () => "node-test", holdTtlMs: 60_000 }),
        limits: new RequestLimits(new MemoryRateLimiter()),
        imageUrls: new ImageUrlGuard({
          policy: "public-https",
          resolve: async (hostname) => {
            lookups.push(hostname);
            return hostname === "images.example.com" ? ["93.184.216.34"] : ["169.254.169.254"];
          },
        }),
      };
    });
    after(async () => {
      await store?.close();
    });

    async function keyOf(credit: number, options: Omit<CreateKeyOptions, "accountId"> = {}): Promise<ApiKeyRecord> {
      const account = await createAccount(store.database, { email: `admit-images-${Math.random().toString(36).slice(2)}@example.com` });
      if (credit > 0) await grantCredit(store.database, { accountId: account.id, amount: credit, source: `test:${account.id}` });
      return createApiKey(store.database, { name: "admit-images", accountId: account.id, ...options });
    }
    const admit = (key: ApiKeyRecord, body: unknown) => admitChatCompletion(dependencies, { body, key, requestId: `req_${Math.random()}` });
    const holdsOf = async (key: ApiKeyRecord) => store.database.selectFrom("holds").select("amount").where("key_id", "=", key.id).execute();

    it("refuses an account that cannot pay before looking any image host up", async () => {
      const before = lookups.length;
      const error = await refusal(admit(await keyOf(0), withImage("https://metadata.example.com/x.png")));
      assert.equal(error.code, "insufficient_quota");
      assert.equal(lookups.length, before);
    });

    it("refuses a private image host before prepare, writing no hold and giving the tokens back", async () => {
      const key = await keyOf(1_000_000, { tpm: 200, rpm: 2 });
      const prepared = engine.prepared;
      const error = await refusal(admit(key, withImage("https://metadata.example.com/x.png")));
      assert.equal(error.status, 400);
      assert.equal(error.code, "image_url_not_allowed");
      assert.equal(error.param, "messages[0].content[1].image_url.url");
      assert.equal(engine.prepared, prepared, "prepare never ran");
      assert.deepEqual(await holdsOf(key), []);
      const admitted = await admit(key, withImage("https://images.example.com/cat.png"));
      assert.equal(engine.prepared, prepared + 1);
      assert.equal(admitted.limited.headers["x-ratelimit-remaining-requests"], "0", "the refused request counted");
      assert.equal(admitted.limited.headers["x-ratelimit-remaining-tokens"], String(200 - admitted.job.prepared.promptTokens - 10), "its tokens came back");
      await admitted.admission.settle({ usage: null, status: 500, finishReason: null, latencyMs: 1 });
      await admitted.limited.finish(0);
    });
  });
}
