/**
 * Cheap checks first (issue 9, row 1): a key that may not use the model, one over its rate
 * limit, and one whose account cannot pay are refused before the engine translates a schema,
 * builds a grammar, renders a template or tokenizes anything. Real server, real model, real
 * SQLite; the engine's `prepare` (where all that work happens) is counted.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { Kysely } from "kysely";
import { createAccount } from "../src/accounts/accounts.ts";
import { createApiKey, type CreateKeyOptions } from "../src/auth/api-keys.ts";
import { grantPlan } from "../src/billing/grant-plan.ts";
import { findPlan } from "../src/billing/plans-store.ts";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { postJson, startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

function writeConfig(): string {
  const file = path.join(temporaryDirectory(), "turnpike.json");
  fs.writeFileSync(
    file,
    JSON.stringify({
      models: [
        { id: "story", path: storiesModel, pricing: { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 } },
        { id: "other", path: storiesModel, pricing: { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 } },
      ],
      plans: [{ id: "funded", name: "Funded", price: { amount: 100, currency: "usd" }, credit: 1_000_000 }],
    }),
  );
  return file;
}

/**
 * Issue 9's row 1: a chain of 7 `$defs`, each an `anyOf` of `fanOut` `$ref`s to the next (the last
 * to a string), under a `oneOf`. Checking the `oneOf`'s branches for overlap walked every path
 * (fanOut^7: 1.5 s for 10 on an idle machine, the event loop blocked throughout).
 */
function pathologicalSchema(fanOut: number): Record<string, unknown> {
  const defs: Record<string, unknown> = {};
  for (let level = 0; level < 8; level++) {
    defs[`d${level}`] = level === 7 ? { type: "string" } : { anyOf: Array.from({ length: fanOut }, () => ({ $ref: `#/$defs/d${level + 1}` })) };
  }
  return { $defs: defs, type: "object", properties: { value: { oneOf: [{ $ref: "#/$defs/d0" }, { type: "integer" }] } }, required: ["value"] };
}

const schemaRequest = (model = "story") => ({
  model,
  messages: [{ role: "user", content: "Hello" }],
  max_tokens: 8,
  response_format: { type: "json_schema", json_schema: { name: "answer", schema: pathologicalSchema(10) } },
});

/** Nearly a megabyte of prompt: rendering and tokenizing it is real work. */
const hugePromptRequest = (model = "story") => ({ model, messages: [{ role: "user", content: "Once upon a time ".repeat(60_000) }], max_tokens: 8 });

describe("cheap checks come before schema translation, grammar, rendering and tokenizing", () => {
  let test: TestServer;
  let database: Kysely<Database>;
  let prepared = 0;

  before(async () => {
    test = await startTestServer({ configFile: writeConfig() });
    database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
    // Count the engine's expensive step on the running server.
    for (const id of ["story", "other"]) {
      const engine = test.server.catalog.get(id).engine;
      const prepare = engine.prepare.bind(engine);
      engine.prepare = (request) => {
        prepared++;
        return prepare(request);
      };
    }
  });
  after(async () => {
    await database?.destroy();
    await test?.close();
  });

  async function keyOf(plan: string | null, options: Omit<CreateKeyOptions, "accountId"> = {}): Promise<string> {
    const account = await createAccount(database, { email: `cheap-${Math.random().toString(36).slice(2)}@example.com` });
    if (plan !== null) await grantPlan(database, { accountId: account.id, plan: (await findPlan(database, plan))!, source: `test:${account.id}` });
    return (await createApiKey(database, { name: "cheap", accountId: account.id, ...options })).key;
  }

  async function send(key: string, body: unknown) {
    return postJson(`${test.baseURL}/chat/completions`, body, { authorization: `Bearer ${key}` });
  }


  it("refuses a zero-credit account's pathological schema and huge prompt with insufficient_quota, never preparing them", async () => {
    const key = await keyOf(null);
    const before = prepared;
    for (const body of [schemaRequest(), hugePromptRequest(), { ...schemaRequest(), stream: true }]) {
      const response = await send(key, body);
      assert.equal(response.status, 429, response.text.slice(0, 300));
      assert.equal(response.body.error.code, "insufficient_quota");
      assert.equal(response.body.error.type, "insufficient_quota");
    }
    assert.equal(prepared, before, "the engine prepared nothing for an account that cannot pay");
    const holds = await database.selectFrom("holds").select("id").execute();
    assert.equal(holds.length, 0, "no hold was written for the refusals");
  });

  it("refuses a key that may not use the model with 403 before preparing anything", async () => {
    const key = await keyOf("funded", { models: ["other"] });
    const before = prepared;
    for (const body of [schemaRequest(), hugePromptRequest()]) {
      const response = await send(key, body);
      assert.equal(response.status, 403, response.text.slice(0, 300));
      assert.equal(response.body.error.code, "model_not_allowed");
    }
    assert.equal(prepared, before);
  });

  it("refuses a key over its requests per minute with 429 before preparing anything", async () => {
    const key = await keyOf("funded", { rpm: 1 });
    const first = await send(key, { model: "story", messages: [{ role: "user", content: "Hello" }], max_tokens: 4 });
    assert.equal(first.status, 200, first.text);
    const before = prepared;
    for (const body of [schemaRequest(), hugePromptRequest()]) {
      const response = await send(key, body);
      assert.equal(response.status, 429, response.text.slice(0, 300));
      assert.equal(response.body.error.code, "rate_limit_exceeded");
    }
    assert.equal(prepared, before);
  });

  it("still serves and bills a funded key's request, charging its exact tokens against the limits", async () => {
    const key = await keyOf("funded", { tpm: 5_000 });
    const response = await send(key, { model: "story", messages: [{ role: "user", content: "Hello" }], max_tokens: 20 });
    assert.equal(response.status, 200, response.text);
    const reserved = response.body.usage.prompt_tokens + 20;
    assert.equal(Number(response.headers.get("x-ratelimit-remaining-tokens")), 5_000 - reserved, "the limit was charged the exact prompt + max_tokens");
  });

  it("refuses, once tokenized, a request whose exact count no longer fits the token limit", async () => {
    // The lower bound (a few tokens per byte) fits 300 tokens; the exact prompt does not.
    const key = await keyOf("funded", { tpm: 300 });
    const response = await send(key, { model: "story", messages: [{ role: "user", content: "Once upon a time there was a girl. ".repeat(30) }], max_tokens: 8 });
    assert.equal(response.status, 429, response.text.slice(0, 300));
    assert.match(response.body.error.message, /Request too large/);
    const small = await send(key, { model: "story", messages: [{ role: "user", content: "Hi" }], max_tokens: 8 });
    assert.equal(small.status, 200, small.text);
    // Exactly this request's tokens are charged: the refused one's were all given back.
    assert.equal(Number(small.headers.get("x-ratelimit-remaining-tokens")), 300 - small.body.usage.prompt_tokens - 8, "the refused request's tokens were given back");
  });

  /**
   * Sends the headers of a large body and only its first bytes, then waits for an answer: one that
   * comes proves the server decided without reading (let alone parsing) the body.
   */
  function answerBeforeBody(key: string, declaredBytes: number): Promise<{ status: number; text: string }> {
    const url = new URL(test.baseURL);
    return new Promise((resolve, reject) => {
      const socket = net.connect(Number(url.port), url.hostname);
      let received = "";
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new Error(`no answer before the body was sent (got ${JSON.stringify(received.slice(0, 200))})`));
      }, 10_000);
      socket.on("connect", () => {
        socket.write(
          `POST /v1/chat/completions HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${key}\r\n` +
            `Content-Type: application/json\r\nContent-Length: ${declaredBytes}\r\n\r\n{"model":"story","messages":[`,
        );
      });
      socket.on("data", (chunk) => {
        received += chunk.toString("latin1");
        const headerEnd = received.indexOf("\r\n\r\n");
        const length = /content-length: (\d+)/i.exec(received)?.[1];
        if (headerEnd < 0 || length === undefined || received.length < headerEnd + 4 + Number(length)) return;
        clearTimeout(timer);
        socket.destroy();
        resolve({ status: Number(received.slice(9, 12)), text: received.slice(headerEnd + 4) });
      });
      socket.on("error", (error) => {
        clearTimeout(timer);
        reject(error);
      });
    });
  }

  it("refuses a large body from an unknown key or an account without credit before reading it", async () => {
    const unknown = await answerBeforeBody("tp-not-a-key", 5_000_000);
    assert.equal(unknown.status, 401, unknown.text);
    assert.equal(JSON.parse(unknown.text).error.code, "invalid_api_key");
    const before = prepared;
    const broke = await answerBeforeBody(await keyOf(null), 5_000_000);
    assert.equal(broke.status, 429, broke.text);
    assert.equal(JSON.parse(broke.text).error.code, "insufficient_quota");
    const spent = await answerBeforeBody(await keyOf("funded", { spendCap: 1 }).then(async (key) => {
      await database.updateTable("api_keys").set({ spent: 1 }).where("name", "=", "cheap").where("spend_cap", "=", 1).execute();
      return key;
    }), 5_000_000);
    assert.equal(spent.status, 429, spent.text);
    assert.equal(JSON.parse(spent.text).error.code, "insufficient_quota");
    assert.match(JSON.parse(spent.text).error.message, /spend cap/);
    assert.equal(prepared, before);
  });

  it("still reads a large body from a funded account (the refusal is the context's, after parsing)", async () => {
    const key = await keyOf("funded");
    const response = await send(key, hugePromptRequest());
    assert.equal(response.status, 400, response.text.slice(0, 300));
    assert.equal(response.body.error.code, "context_length_exceeded");
  });
});
