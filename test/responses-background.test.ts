/**
 * Background responses (`background: true`) end to end on the scripted fake engine, whose gates
 * stop a generation at an exact token: the create answers `queued` at once, `GET` polls it to its
 * end, it is billed once and exactly; a cancel stops generation and bills what was generated; the
 * client leaving changes nothing; a delete stops it for good; a refusal by a full engine leaves it
 * failed, billed nothing; what a background response cannot serve is refused before it runs.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import type { Kysely } from "kysely";
import { FakeEngine, FakeGate, type ScriptStep } from "../src/engines/fake/fake-engine.ts";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { billedExactly, costOfUsage, meteredKey } from "./helpers/metered.ts";
import { postJson, startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";

const pricing = { prompt: 1_000_000, cached_prompt: 250_000, completion: 3_000_000 };
const CREDIT = 1_000_000;

/** A gate that also says when a generation reached it. */
class WatchedGate extends FakeGate {
  reached: Promise<void>;
  #reached!: () => void;
  constructor() {
    super();
    this.reached = new Promise((resolve) => (this.#reached = resolve));
  }
  override wait(signal: AbortSignal): Promise<void> {
    this.#reached();
    return super.wait(signal);
  }
}

const words = (count: number, from = 0): ScriptStep[] => Array.from({ length: count }, (_, index) => ({ text: ` w${from + index}` }));

describe("background responses", { timeout: 60_000 }, () => {
  let server: TestServer;
  let database: Kysely<Database>;
  /** The steps the next generations follow (set by each test). */
  let steps: ScriptStep[] = words(3);
  const engine = new FakeEngine({ capacity: 2, queueSize: 0, cachedPromptTokens: 4, script: () => [{ steps }] });

  before(async () => {
    const directory = temporaryDirectory();
    const configFile = path.join(directory, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [{ id: "fake", path: path.join(directory, "fake.gguf"), pricing }],
        plans: [{ id: "funded", name: "Funded", price: { amount: 100, currency: "usd" }, credit: CREDIT }],
      }),
    );
    server = await startTestServer({ configFile, engines: { fake: engine } });
    database = await openStore({ dataDir: server.dataDir, databaseUrl: "" });
  });
  after(async () => {
    await database?.destroy();
    await server?.close();
  });

  const create = (key: string, body: Record<string, unknown>) => postJson(`${server.baseURL}/responses`, { model: "fake", input: "Tell me a story.", ...body }, { authorization: `Bearer ${key}` });
  const get = async (key: string, id: string) => {
    const response = await fetch(`${server.baseURL}/responses/${id}`, { headers: { authorization: `Bearer ${key}` } });
    return { status: response.status, body: (await response.json()) as any };
  };
  /** Polls `GET` until the response is no longer queued or in progress. */
  const settled = async (key: string, id: string) => {
    for (let attempt = 0; attempt < 400; attempt++) {
      const { body } = await get(key, id);
      if (body.status !== "queued" && body.status !== "in_progress") return body;
      await delay(25);
    }
    throw new Error(`response ${id} never ended`);
  };

  it("answers queued at once, is polled to completed, and is billed once, exactly", async () => {
    const { accountId, key } = await meteredKey(database, "funded");
    const gate = new WatchedGate();
    steps = [...words(2), { gate }, ...words(3, 2)];
    const created = await create(key, { background: true, max_output_tokens: 100 });
    assert.equal(created.status, 200, created.text);
    assert.equal(created.body.status, "queued");
    assert.equal(created.body.background, true);
    await gate.reached;
    const running = await get(key, created.body.id);
    assert.equal(running.body.status, "in_progress", "stored in progress once the engine took it");
    gate.release();
    const done = await settled(key, created.body.id);
    assert.equal(done.status, "completed");
    assert.equal(done.output[0].content[0].text, " w0 w1 w2 w3 w4");
    assert.equal(done.usage.output_tokens, 5);
    assert.equal(done.usage.input_tokens_details.cached_tokens, 4);
    const { records, balance } = await billedExactly(database, accountId, CREDIT, pricing, 1);
    assert.equal(records[0]!.completion_tokens, 5);
    assert.equal(records[0]!.cached_prompt_tokens, 4);
    assert.equal(
      CREDIT - balance,
      costOfUsage(pricing, { promptTokens: done.usage.input_tokens, cachedPromptTokens: done.usage.input_tokens_details.cached_tokens, completionTokens: done.usage.output_tokens }),
      "the balance dropped by the response's own usage at the prices (cached at the cached price)",
    );
    await delay(300);
    await billedExactly(database, accountId, CREDIT, pricing, 1);
  });

  it("stops generating when cancelled, bills what was generated and stores it cancelled", async () => {
    const { accountId, key } = await meteredKey(database, "funded");
    const gate = new WatchedGate();
    steps = [...words(3), { gate }, ...words(500, 3)];
    const started = engine.started;
    const created = await create(key, { background: true, max_output_tokens: 4000 });
    assert.equal(created.body.status, "queued");
    await gate.reached;
    const cancelled = await postJson(`${server.baseURL}/responses/${created.body.id}/cancel`, {}, { authorization: `Bearer ${key}` });
    assert.equal(cancelled.status, 200, cancelled.text);
    assert.equal(cancelled.body.status, "cancelled");
    assert.equal(cancelled.body.usage.output_tokens, 3);
    assert.equal(engine.started, started + 1);
    assert.equal(engine.signals.at(-1)!.aborted, true, "the engine's generation was stopped");
    const stored = await get(key, created.body.id);
    assert.deepEqual(stored.body, cancelled.body, "GET shows what the cancel answered");
    const { records } = await billedExactly(database, accountId, CREDIT, pricing, 1);
    assert.equal(records[0]!.completion_tokens, 3, "billed the three tokens generated");
    // A second cancel finds it ended: the same response, nothing more billed.
    const again = await postJson(`${server.baseURL}/responses/${created.body.id}/cancel`, {}, { authorization: `Bearer ${key}` });
    assert.equal(again.body.status, "cancelled");
    await billedExactly(database, accountId, CREDIT, pricing, 1);
  });

  it("refuses to cancel a response that is not a background one", async () => {
    const { key } = await meteredKey(database, "funded");
    steps = words(2);
    const created = await create(key, { max_output_tokens: 16 });
    assert.equal(created.body.status, "completed", created.text);
    const refused = await postJson(`${server.baseURL}/responses/${created.body.id}/cancel`, {}, { authorization: `Bearer ${key}` });
    assert.equal(refused.status, 400);
    assert.equal(refused.body.error.code, "response_not_cancellable");
    assert.equal((await get(key, created.body.id)).body.status, "completed");
  });

  it("runs on when its client goes away", async () => {
    const { accountId, key } = await meteredKey(database, "funded");
    const gate = new WatchedGate();
    steps = [...words(2), { gate }, ...words(4, 2)];
    const controller = new AbortController();
    const response = await fetch(`${server.baseURL}/responses`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify({ model: "fake", input: "Tell me a story.", background: true, max_output_tokens: 100 }),
      signal: controller.signal,
    });
    const { id } = (await response.json()) as { id: string };
    await gate.reached;
    controller.abort();
    await delay(100);
    gate.release();
    const done = await settled(key, id);
    assert.equal(done.status, "completed");
    assert.equal(done.usage.output_tokens, 6);
    const { records } = await billedExactly(database, accountId, CREDIT, pricing, 1);
    assert.equal(records[0]!.completion_tokens, 6);
  });

  it("stops for good when deleted while running: the row does not come back", async () => {
    const { accountId, key } = await meteredKey(database, "funded");
    const gate = new WatchedGate();
    steps = [...words(2), { gate }, ...words(50, 2)];
    const created = await create(key, { background: true, max_output_tokens: 1000 });
    await gate.reached;
    const deleted = await fetch(`${server.baseURL}/responses/${created.body.id}`, { method: "DELETE", headers: { authorization: `Bearer ${key}` } });
    assert.equal(deleted.status, 200);
    const { records } = await billedExactly(database, accountId, CREDIT, pricing, 1);
    assert.equal(records[0]!.completion_tokens, 2, "billed what was generated before the delete");
    await server.server.responses.drain();
    assert.equal((await get(key, created.body.id)).status, 404, "its last state was not written back");
    const rows = await database.selectFrom("responses").select("id").where("id", "=", created.body.id).execute();
    assert.equal(rows.length, 0);
  });

  it("is stored failed, billed nothing, when the engine refuses it for a full queue", async () => {
    const { key: busyKey } = await meteredKey(database, "funded");
    const { accountId, key } = await meteredKey(database, "funded");
    const gates = [new WatchedGate(), new WatchedGate()];
    // Both slots taken, no queue: the next one is refused as it starts.
    const holders = [];
    for (const gate of gates) {
      steps = [{ gate }];
      holders.push(await create(busyKey, { background: true, max_output_tokens: 16 }));
      await gate.reached;
    }
    const refused = await create(key, { background: true, max_output_tokens: 16 });
    assert.equal(refused.body.status, "queued", "admitted before the engine refused it");
    const failed = await settled(key, refused.body.id);
    assert.equal(failed.status, "failed");
    assert.equal(typeof failed.error.code, "string");
    assert.equal(failed.usage, null);
    // Recorded as chat completions record a queue refusal: no tokens, nothing charged.
    const { records, balance } = await billedExactly(database, accountId, CREDIT, pricing, 1);
    assert.deepEqual([records[0]!.completion_tokens, records[0]!.cost, records[0]!.status], [0, 0, 503]);
    assert.equal(balance, CREDIT);
    for (const gate of gates) gate.release();
    for (const holder of holders) assert.equal((await settled(busyKey, holder.body.id)).status, "completed");
  });

  it("streams its events while it runs, and runs on to completed when the streaming client goes away", async () => {
    const { accountId, key } = await meteredKey(database, "funded");
    const gate = new WatchedGate();
    steps = [...words(2), { gate }, ...words(4, 2)];
    const controller = new AbortController();
    const response = await fetch(`${server.baseURL}/responses`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify({ model: "fake", input: "Tell me a story.", background: true, stream: true, max_output_tokens: 100 }),
      signal: controller.signal,
    });
    assert.equal(response.status, 200);
    assert.match(response.headers.get("content-type") ?? "", /^text\/event-stream/);
    // Read until the first two words arrived, then leave.
    const reader = response.body!.getReader();
    let text = "";
    while (!text.includes(" w1")) {
      const { value, done } = await reader.read();
      assert.ok(done !== true, "the stream ended before the words");
      text += new TextDecoder().decode(value);
    }
    const created = JSON.parse(text.split("\n").find((line) => line.startsWith("data: ") && line.includes('"response.created"'))!.slice(6)) as { response: { id: string; background: boolean } };
    assert.equal(created.response.background, true);
    await gate.reached;
    controller.abort();
    await delay(100);
    gate.release();
    const done = await settled(key, created.response.id);
    assert.equal(done.status, "completed", "the client's leaving did not stop it");
    assert.equal(done.output[0].content[0].text, " w0 w1 w2 w3 w4 w5");
    const { records } = await billedExactly(database, accountId, CREDIT, pricing, 1);
    assert.equal(records[0]!.completion_tokens, 6);
  });

  it("streams a background response to its end like any stream, its last event what GET returns", async () => {
    const { key } = await meteredKey(database, "funded");
    steps = words(3);
    const response = await fetch(`${server.baseURL}/responses`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify({ model: "fake", input: "Tell me a story.", background: true, stream: true, max_output_tokens: 100 }),
    });
    const events = (await response.text())
      .split("\n")
      .filter((line) => line.startsWith("data: ") && line !== "data: [DONE]")
      .map((line) => JSON.parse(line.slice(6)) as { type: string; response?: { id: string } });
    const terminal = events.at(-1)!;
    assert.equal(terminal.type, "response.completed");
    assert.deepEqual((await get(key, terminal.response!.id)).body, terminal.response);
  });

  it("refuses background with store: false before anything runs or is stored", async () => {
    const { accountId, key } = await meteredKey(database, "funded");
    const prepared = engine.prepared;
    const unstored = await create(key, { background: true, store: false });
    assert.equal(unstored.status, 400, unstored.text);
    assert.equal(unstored.body.error.param, "store");
    assert.equal(engine.prepared, prepared, "nothing was prepared");
    const rows = await database.selectFrom("responses").select("id").where("account_id", "=", accountId).execute();
    assert.equal(rows.length, 0, "nothing was stored");
    await billedExactly(database, accountId, CREDIT, pricing, 0);
  });
});
