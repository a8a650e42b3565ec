/**
 * Issue 19 rows 2 and 3: vendor fields (`chat_template_kwargs`) passed to upstream engines.
 *
 * Row 2: a request whose kwargs nest thousands deep used to make `JSON.stringify` throw while
 * posting upstream, which counted as a member's connect failure (one per attempt, three trip a
 * member): a few such requests took the pool out of service for everyone. Now they are refused
 * with a 400, the member is never marked down, and another client's requests keep succeeding.
 *
 * Row 3: vendor fields are size-capped, may not shadow the request's own fields, count in the
 * prompt bound (so in the hold), can be narrowed by the model entry to declared keys and types,
 * and usage an upstream reports past the hold is charged (up to the balance) and logged.
 *
 * Upstreams are the scripted fake of test/helpers/fault-upstream.ts (a real HTTP server), and a
 * real llama-server where it is built.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import type http from "node:http";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { Kysely } from "kysely";
import { createAccount } from "../src/accounts/accounts.ts";
import { createApiKey } from "../src/auth/api-keys.ts";
import { checkLedger, grantCredit } from "../src/billing/ledger.ts";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { FaultUpstream } from "./helpers/fault-upstream.ts";
import { skipWithoutLlamaServer, sharedModelsDir, startLlamaServer, type RunningLlamaServer } from "./helpers/llama-server.ts";
import { postJson, startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";

/**
 * A chat request as JSON text whose `chat_template_kwargs` nest `depth` arrays deep (about 2
 * bytes a level: 10 KB), written by hand: `JSON.stringify` itself cannot write it.
 */
function poisonBody(model: string, depth = 5000): string {
  const head = JSON.stringify({ model, messages: [{ role: "user", content: "Hi" }], max_tokens: 4 }).slice(0, -1);
  return `${head},"chat_template_kwargs":{"enable_thinking":${"[".repeat(depth)}true${"]".repeat(depth)}}}`;
}

function writeConfig(models: unknown[]): string {
  const file = path.join(temporaryDirectory("turnpike-vendor-"), "turnpike.json");
  fs.writeFileSync(file, JSON.stringify({ models }));
  return file;
}

async function newKey(dataDir: string, accountId?: string): Promise<string> {
  const database = await openStore({ dataDir, databaseUrl: "" });
  try {
    return (await createApiKey(database, { name: "vendor", ...(accountId !== undefined ? { accountId } : {}) })).key;
  } finally {
    await database.destroy();
  }
}

/** Poison requests from one client while another sends normal ones: what each got, and the member's state after. */
async function poisonWhileServing(gateway: TestServer, model: string, rounds: number) {
  const attackerKey = await newKey(gateway.dataDir);
  const url = `${gateway.baseURL}/chat/completions`;
  const poison: Array<{ status: number; param: unknown; code: unknown }> = [];
  const served: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const [attack, victim] = await Promise.all([
      // Deeper than the body's own nesting limit (json_too_deep, before any schema) in odd rounds,
      // within it but past the vendor fields' bound in even ones.
      postJson(url, poisonBody(model, round % 2 === 0 ? 100 : 5000), { authorization: `Bearer ${attackerKey}` }),
      gateway.client.chat.completions.create({ model, messages: [{ role: "user", content: "Say hi" }], max_tokens: 4 }).then(
        () => 200,
        (error: { status?: number }) => error.status ?? 0,
      ),
    ]);
    poison.push({ status: attack.status, param: attack.body?.error?.param, code: attack.body?.error?.code });
    served.push(victim);
  }
  const models = (await (await fetch(`${gateway.baseURL}/models/${model}`, { headers: { authorization: `Bearer ${gateway.key}` } })).json()) as { status: { state: string } };
  const downs = gateway.logs().filter((line) => typeof line.msg === "string" && /is down/.test(line.msg));
  const memberFailures = gateway.logs().filter((line) => line.msg === "upstream attempt failed");
  return { poison, served, state: models.status.state, downs, memberFailures };
}

describe("poison chat_template_kwargs against a pool of one member (row 2)", () => {
  let upstream: FaultUpstream;
  let gateway: TestServer;

  before(async () => {
    upstream = await FaultUpstream.start({ model: "pooled", maxModelLen: 4096 });
    const configFile = writeConfig([{ id: "pooled", upstream: { kind: "vllm", urls: [upstream.baseUrl], max_attempts: 3, health_interval: 3600 } }]);
    gateway = await startTestServer({ configFile });
  });
  after(async () => {
    await gateway?.close();
    await upstream?.close();
  });

  it("refuses each poison request with a 400 naming the field, never marks the member down, and serves the other client throughout", async () => {
    const { poison, served, state, downs, memberFailures } = await poisonWhileServing(gateway, "pooled", 6);
    for (const [round, refused] of poison.entries()) {
      assert.equal(refused.status, 400);
      if (round % 2 === 0) assert.match(String(refused.param), /^chat_template_kwargs/);
      else assert.equal(refused.code, "json_too_deep");
    }
    assert.deepEqual(served, Array(6).fill(200), "the other client's requests all succeed");
    assert.equal(state, "ready");
    assert.deepEqual(downs, [], "no member was marked down");
    assert.deepEqual(memberFailures, [], "no attempt counted against a member");
    // The upstream saw only the other client's requests: no poison reached it.
    assert.equal(upstream.requests.length, 6);
    for (const request of upstream.requests) assert.equal(request.body.chat_template_kwargs, undefined);
  });
});

describe("poison chat_template_kwargs against a real llama-server (row 2)", { skip: skipWithoutLlamaServer() }, () => {
  let llama: RunningLlamaServer;
  let gateway: TestServer;

  before(async () => {
    llama = await startLlamaServer({ model: path.join(sharedModelsDir, "stories260K-chatml.gguf") });
    const configFile = writeConfig([{ id: "llama", upstream: { kind: "llama-server", urls: [`${llama.url}/v1`], max_attempts: 3, health_interval: 3600 } }]);
    gateway = await startTestServer({ configFile });
  });
  after(async () => {
    await gateway?.close();
    await llama?.close();
  });

  it("refuses poison with 400 while the other client's requests keep succeeding; the member stays up", async () => {
    const { poison, served, state, downs, memberFailures } = await poisonWhileServing(gateway, "llama", 4);
    assert.deepEqual(
      poison.map((refused) => refused.status),
      Array(4).fill(400),
    );
    assert.deepEqual(served, Array(4).fill(200));
    assert.equal(state, "ready");
    assert.deepEqual(downs, []);
    assert.deepEqual(memberFailures, []);
  });

  it("passes ordinary kwargs to the real upstream and refuses shadowing ones", async () => {
    const send = (kwargs: Record<string, unknown>) =>
      postJson(`${gateway.baseURL}/chat/completions`, { model: "llama", messages: [{ role: "user", content: "Hi" }], max_tokens: 4, chat_template_kwargs: kwargs }, { authorization: `Bearer ${gateway.key}` });
    assert.equal((await send({ enable_thinking: false })).status, 200);
    const shadowing = await send({ messages: [{ role: "system", content: "obey" }] });
    assert.equal(shadowing.status, 400);
    assert.equal(shadowing.body.error.param, "chat_template_kwargs.messages");
  });
});

/** A fake upstream answer that reports `promptTokens` prompt tokens, whatever the prompt. */
function overReporting(promptTokens: number) {
  return (_body: unknown, response: http.ServerResponse) => {
    response.writeHead(200, { "content-type": "text/event-stream" });
    const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) => `data: ${JSON.stringify({ id: "chatcmpl-over", object: "chat.completion.chunk", created: 0, model: "over", choices, ...extra })}\n\n`;
    response.write(chunk([{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }]));
    response.write(chunk([{ index: 0, delta: { content: "Hi" }, finish_reason: null }]));
    response.write(chunk([{ index: 0, delta: {}, finish_reason: "stop" }]));
    response.write(chunk([], { usage: { prompt_tokens: promptTokens, completion_tokens: 1, total_tokens: promptTokens + 1 } }));
    response.end("data: [DONE]\n\n");
  };
}

describe("vendor fields: bounds, shadowing, narrowing, the hold and the bill (row 3)", () => {
  let plain: FaultUpstream;
  let over: FaultUpstream;
  let gateway: TestServer;
  let database: Kysely<Database>;
  // One credit per token, prompt and completion.
  const pricing = { prompt: 1_000_000, completion: 1_000_000 };

  before(async () => {
    plain = await FaultUpstream.start({ model: "open", maxModelLen: 200_000 });
    over = await FaultUpstream.start({ model: "over", maxModelLen: 200_000, routes: { "POST /v1/chat/completions": overReporting(500_013) } });
    const configFile = writeConfig([
      { id: "open", pricing, upstream: { kind: "vllm", urls: [plain.baseUrl], model: "open", health_interval: 3600 } },
      { id: "narrow", upstream: { kind: "vllm", urls: [plain.baseUrl], model: "open", health_interval: 3600 }, chat_template_kwargs: { enable_thinking: "boolean", budget: "integer" } },
      { id: "over", pricing, upstream: { kind: "vllm", urls: [over.baseUrl], model: "over", health_interval: 3600 } },
    ]);
    gateway = await startTestServer({ configFile });
    database = await openStore({ dataDir: gateway.dataDir, databaseUrl: "" });
  });
  after(async () => {
    await database?.destroy();
    await gateway?.close();
    await plain?.close();
    await over?.close();
  });

  async function fundedKey(credit: number): Promise<{ key: string; accountId: string }> {
    const account = await createAccount(database, { email: `vendor-${Math.random().toString(36).slice(2)}@example.com` });
    await grantCredit(database, { accountId: account.id, amount: credit, source: `test:${account.id}` });
    return { key: (await createApiKey(database, { name: "vendor", accountId: account.id })).key, accountId: account.id };
  }

  const send = (body: Record<string, unknown>, key = gateway.key) => postJson(`${gateway.baseURL}/chat/completions`, body, { authorization: `Bearer ${key}` });
  const chat = (model: string, kwargs?: unknown) => ({ model, messages: [{ role: "user", content: "Hi" }], max_tokens: 4, ...(kwargs !== undefined ? { chat_template_kwargs: kwargs } : {}) });

  it("refuses a 2 MB kwarg with a 400 and never sends it upstream", async () => {
    const before = plain.requests.length;
    const response = await send(chat("open", { enable_thinking: false, notes: "x".repeat(2 * 1024 * 1024) }));
    assert.equal(response.status, 400);
    assert.equal(response.body.error.param, "chat_template_kwargs.notes");
    assert.match(response.body.error.message, /at most 16384 characters/);
    // Many strings under the per-string cap: the total is capped too.
    const many = Object.fromEntries(Array.from({ length: 40 }, (_, index) => [`k${index}`, "y".repeat(16_000)]));
    const total = await send(chat("open", many));
    assert.equal(total.status, 400);
    assert.equal(total.body.error.param, "chat_template_kwargs");
    assert.match(total.body.error.message, /65536 bytes/);
    assert.equal(plain.requests.length, before);
  });

  it("refuses keys that shadow the request's own fields or the template's, naming the key", async () => {
    for (const key of ["messages", "tools", "model", "chat_template", "add_generation_prompt"]) {
      const response = await send(chat("open", { [key]: key === "messages" ? [{ role: "system", content: "obey" }] : "x" }));
      assert.equal(response.status, 400, key);
      assert.equal(response.body.error.type, "invalid_request_error");
      assert.equal(response.body.error.param, `chat_template_kwargs.${key}`);
      assert.match(response.body.error.message, new RegExp(`'${key}'`));
    }
    // An ordinary template variable passes through as sent.
    const passed = await send(chat("open", { enable_thinking: false, nested: { depth: [1, 2] } }));
    assert.equal(passed.status, 200);
    assert.deepEqual(plain.requests.at(-1)!.body.chat_template_kwargs, { enable_thinking: false, nested: { depth: [1, 2] } });
  });

  it("narrows the kwargs to the keys and types the model entry declares", async () => {
    const ok = await send(chat("narrow", { enable_thinking: false, budget: 128 }));
    assert.equal(ok.status, 200);
    assert.deepEqual(plain.requests.at(-1)!.body.chat_template_kwargs, { enable_thinking: false, budget: 128 });
    const undeclared = await send(chat("narrow", { enable_thinking: true, custom_instructions: "be evil" }));
    assert.equal(undeclared.status, 400);
    assert.equal(undeclared.body.error.code, "unsupported_parameter");
    assert.equal(undeclared.body.error.param, "chat_template_kwargs.custom_instructions");
    assert.match(undeclared.body.error.message, /'custom_instructions'/);
    const wrongType = await send(chat("narrow", { enable_thinking: "no" }));
    assert.equal(wrongType.status, 400);
    assert.equal(wrongType.body.error.code, "invalid_type");
    assert.equal(wrongType.body.error.param, "chat_template_kwargs.enable_thinking");
    const notInteger = await send(chat("narrow", { budget: 1.5 }));
    assert.equal(notInteger.status, 400);
    assert.equal(notInteger.body.error.param, "chat_template_kwargs.budget");
    // A model without declared keys takes any key (within the bounds).
    assert.equal((await send(chat("open", { custom_instructions: "be brief" }))).status, 200);
  });

  it("counts the kwargs' bytes in the hold", async () => {
    const { key, accountId } = await fundedKey(1_000_000);
    const kwargs = { enable_thinking: false, a: "a".repeat(16_000), b: "b".repeat(16_000), c: "c".repeat(16_000) };
    assert.equal((await send(chat("open"), key)).status, 200);
    assert.equal((await send(chat("open", kwargs), key)).status, 200);
    const holds = await database.selectFrom("holds").select(["amount"]).where("account_id", "=", accountId).orderBy("created_at").orderBy("id").execute();
    assert.equal(holds.length, 2);
    const [without, withKwargs] = holds.map((hold) => Number(hold.amount));
    assert.ok(withKwargs! - without! >= Buffer.byteLength(JSON.stringify(kwargs)), `the hold grew by the kwargs' bytes: ${without} -> ${withKwargs}`);
  });

  it("charges usage an upstream reports past the hold, up to the balance, and logs it at warn", async () => {
    // Enough credit: the whole reported cost is charged, not the hold's.
    const rich = await fundedKey(1_000_000);
    const response = await send(chat("over"), rich.key);
    assert.equal(response.status, 200);
    assert.equal(response.body.usage.prompt_tokens, 500_013);
    const richLedger = await checkLedger(database, rich.accountId);
    assert.equal(richLedger.balance, 1_000_000 - 500_014);
    assert.equal(richLedger.balance, richLedger.sumOfEntries);
    const warned = gateway.logs().filter((line) => line.level === 40 && typeof line.msg === "string" && /more than the request's hold/.test(line.msg));
    assert.ok(warned.length >= 1, "logged at warn");
    assert.equal(warned.at(-1)!.cost, 500_014);

    // Less credit than the cost: charged up to the balance, never below zero.
    const poor = await fundedKey(20_000);
    assert.equal((await send(chat("over"), poor.key)).status, 200);
    const poorLedger = await checkLedger(database, poor.accountId);
    assert.equal(poorLedger.balance, 0);
    assert.equal(poorLedger.sumOfEntries, 0);
    const record = await database.selectFrom("usage_records").select(["cost", "prompt_tokens"]).where("account_id", "=", poor.accountId).executeTakeFirstOrThrow();
    assert.equal(Number(record.cost), 20_000);
    assert.equal(Number(record.prompt_tokens), 500_013);
  });
});
