/**
 * `GET /api/billing/history` and `GET /api/usage/export` against a real server on SQLite: the
 * balance after each history entry is the running sum of the ledger's entries; pages join up;
 * the CSV export has the same records and totals as `/api/usage`, quotes a key name with a comma
 * and a quote, refuses absurd ranges, and shows nobody another account's rows.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import { openStore } from "../src/store/open.ts";
import { expireDueCredit, grantCredit } from "../src/billing/ledger.ts";
import { exportUsageRecords, type ExportedRecord } from "../src/billing/usage-export.ts";
import { startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { ConsoleClient, writeConsoleConfig } from "./helpers/console.ts";

const DAY = 86_400_000;
const KEY_NAME = 'build,"ci" box';

let test: TestServer;
let admin: ConsoleClient;
let alice: ConsoleClient;
let bob: ConsoleClient;
let aliceId = "";
let aliceKey = "";

/** Parses RFC 4180 CSV (quoted fields with doubled quotes, CRLF or LF line ends). */
function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let field = "";
  let quoted = false;
  for (let index = 0; index < text.length; index++) {
    const character = text[index]!;
    if (quoted) {
      if (character === '"' && text[index + 1] === '"') (field += '"'), index++;
      else if (character === '"') quoted = false;
      else field += character;
    } else if (character === '"') quoted = true;
    else if (character === ",") row.push(field), (field = "");
    else if (character === "\n") row.push(field), rows.push(row), (row = []), (field = "");
    else if (character !== "\r") field += character;
  }
  if (field !== "" || row.length > 0) row.push(field), rows.push(row);
  return rows;
}

before(async () => {
  // Standing leases off: the history is read right after the requests, one charge a request (a lease's charge lands when it closes).
  test = await startTestServer({ configFile: writeConsoleConfig(temporaryDirectory()), flags: { models: undefined, standing_lease_idle: "0" } });
  admin = new ConsoleClient(test.url);
  alice = new ConsoleClient(test.url);
  bob = new ConsoleClient(test.url);
  assert.equal((await admin.signUpAdmin(test, "admin@example.com")).status, 201);
  assert.equal((await alice.signUp("alice@example.com")).status, 201);
  assert.equal((await bob.signUp("bob@example.com")).status, 201);
  aliceId = (await alice.get("/api/account")).body.id;
  const created = await alice.post("/api/keys", { name: KEY_NAME });
  assert.equal(created.status, 201, created.text);
  aliceKey = created.body.key;

  // A grant, some usage, a redeemed code, and credit that expired.
  assert.equal((await admin.post(`/api/admin/accounts/${aliceId}/grant`, { plan: "starter" })).status, 200);
  const client = new OpenAI({ baseURL: test.baseURL, apiKey: aliceKey, maxRetries: 0 });
  for (const content of ["Once upon a time", "A cat", "The sun"]) {
    await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content }], max_tokens: 3 });
  }
  const codes = await admin.post("/api/admin/codes", { plan: "pro" });
  assert.equal(codes.status, 201, codes.text);
  assert.equal((await alice.post("/api/billing/redeem", { code: codes.body.data[0].code })).status, 200);
  const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
  try {
    await grantCredit(database, { accountId: aliceId, amount: 300, source: "admin:expiring-test", days: 1, now: Date.now() - 2 * DAY });
    await expireDueCredit(database, aliceId);
  } finally {
    await database.destroy();
  }
  await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "Last" }], max_tokens: 2 });
  // Their holds are settled, and their usage recorded, in the group commit after each answer.
  await test.server.usageWritten();
});
after(async () => {
  await test?.close();
});

describe("GET /api/billing/history", () => {
  it("lists grants, charges and expiries newest first, each with the balance after it as the ledger sums it", async () => {
    const history = await alice.get("/api/billing/history?limit=100");
    assert.equal(history.status, 200, history.text);
    assert.equal(history.body.has_more, false);
    const entries = history.body.data as Array<{ id: string; kind: string; source: string; amount: number; balance_after: number; created: number; description: string }>;
    assert.deepEqual(new Set(entries.map((entry) => entry.source)), new Set(["admin", "usage", "code", "expiry"]));
    assert.ok(entries.every((entry) => Number.isInteger(entry.created) && entry.created < 1e11), "times in seconds");

    const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
    try {
      const ledger = await database
        .selectFrom("ledger_entries")
        .select(["id", "amount", "kind"])
        .where("account_id", "=", aliceId)
        .where("kind", "in", ["grant", "settle", "expiry", "refund"])
        .orderBy("created_at")
        .orderBy("id")
        .execute();
      let running = 0;
      const expected = ledger.map((entry) => ((running += Number(entry.amount)), { id: entry.id, amount: Number(entry.amount), balance_after: running })).reverse();
      assert.deepEqual(
        entries.map((entry) => ({ id: entry.id, amount: entry.amount, balance_after: entry.balance_after })),
        expected,
      );
      const everything = await database.selectFrom("ledger_entries").select((expression) => expression.fn.sum<number>("amount").as("total")).where("account_id", "=", aliceId).executeTakeFirstOrThrow();
      assert.equal(entries[0]!.balance_after, Number(everything.total), "no request runs: the newest balance is the ledger's");
    } finally {
      await database.destroy();
    }
    assert.equal(entries[0]!.balance_after, (await alice.get("/api/account")).body.balance);
    const expiry = entries.find((entry) => entry.source === "expiry")!;
    assert.equal(expiry.amount, -300);
    assert.match(entries.find((entry) => entry.source === "code")!.description, /Redeemed a code: Pro/);
    assert.equal(entries.find((entry) => entry.source === "usage")!.description, `Usage with key "${KEY_NAME}"`);
  });

  it("pages with before=<id>, the pages joining up with the same balances", async () => {
    const whole = (await alice.get("/api/billing/history?limit=100")).body.data;
    const paged = [];
    let before = "";
    for (;;) {
      const page = await alice.get(`/api/billing/history?limit=2${before === "" ? "" : `&before=${before}`}`);
      assert.equal(page.status, 200, page.text);
      paged.push(...page.body.data);
      if (!page.body.has_more) break;
      before = page.body.data.at(-1).id;
    }
    assert.deepEqual(paged, whole);
  });

  it("answers OpenAI-shaped errors: a bad cursor, a bad limit, another account for a user", async () => {
    const cursor = await alice.get("/api/billing/history?before=le_nothing");
    assert.equal(cursor.status, 400);
    assert.deepEqual(Object.keys(cursor.body.error).sort(), ["code", "message", "param", "type"]);
    assert.equal(cursor.body.error.param, "before");
    assert.equal((await alice.get("/api/billing/history?limit=0")).status, 400);
    assert.equal((await bob.get(`/api/billing/history?account_id=${aliceId}`)).status, 403);
    assert.deepEqual((await bob.get("/api/billing/history")).body.data, []);
    const named = await admin.get(`/api/billing/history?account_id=${aliceId}&limit=100`);
    assert.equal(named.status, 200);
    assert.deepEqual(named.body.data, (await alice.get("/api/billing/history?limit=100")).body.data);
    assert.equal((await admin.get("/api/billing/history?account_id=acct_missing")).status, 404);
  });
});

describe("GET /api/usage/export", () => {
  const from = new Date(Date.now() - 2 * DAY).toISOString().slice(0, 10);
  const to = new Date(Date.now() + DAY).toISOString().slice(0, 10);

  it("streams a CSV attachment with the same records and totals as /api/usage", async () => {
    const response = await alice.get(`/api/usage/export?from=${from}&to=${to}`);
    assert.equal(response.status, 200, response.text);
    assert.match(response.headers.get("content-type") ?? "", /^text\/csv/);
    assert.match(response.headers.get("content-disposition") ?? "", /^attachment; filename="turnpike-usage-.+\.csv"$/);
    const [header, ...rows] = parseCsv(response.text);
    assert.deepEqual(header, [
      "time", "request_id", "account_id", "key_name", "key_prefix", "model", "prompt_tokens", "cached_prompt_tokens",
      "completion_tokens", "cost_credits", "latency_ms", "status", "finish_reason", "stream", "service_tier",
    ]);
    assert.equal(rows.length, 4);
    const column = (name: string) => header!.indexOf(name);
    assert.ok(rows.every((row) => row.length === header!.length));
    assert.ok(rows.every((row) => row[column("key_name")] === KEY_NAME), "the name with a comma and a quote survives quoting");
    assert.ok(response.text.includes('"build,""ci"" box"'));
    assert.ok(rows.every((row) => row[column("service_tier")] === "default"), "served in the default tier");
    assert.ok(rows.every((row) => /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/.test(row[column("time")]!)));

    const recent = await alice.get("/api/usage/requests?limit=100");
    assert.deepEqual(new Set(rows.map((row) => row[column("request_id")])), new Set(recent.body.data.map((row: { request_id: string }) => row.request_id)));
    const sums = (await alice.get(`/api/usage?group_by=model&from=${from}&to=${to}`)).body.data[0];
    const total = (name: string) => rows.reduce((sum, row) => sum + Number(row[column(name)]), 0);
    assert.equal(total("prompt_tokens"), sums.prompt_tokens);
    assert.equal(total("cached_prompt_tokens"), sums.cached_prompt_tokens);
    assert.equal(total("completion_tokens"), sums.completion_tokens);
    assert.equal(total("cost_credits"), sums.cost);
  });

  it("reads the records a page at a time, in time order, none twice", async () => {
    const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
    try {
      const range = { accountId: aliceId, from: Date.parse(from), to: Date.parse(to) };
      const whole: ExportedRecord[] = [];
      for await (const record of exportUsageRecords(database, range)) whole.push(record);
      const paged = [];
      for await (const record of exportUsageRecords(database, { ...range, pageSize: 1 })) paged.push(record);
      assert.equal(whole.length, 4);
      assert.deepEqual(paged, whole);
      assert.ok(whole.every((record, index) => index === 0 || record.created_at >= whole[index - 1]!.created_at));
    } finally {
      await database.destroy();
    }
  });

  it("takes seconds since the epoch as well as ISO dates", async () => {
    const seconds = await alice.get(`/api/usage/export?from=${Math.floor(Date.parse(from) / 1000)}&to=${Math.floor(Date.parse(to) / 1000)}`);
    const iso = await alice.get(`/api/usage/export?from=${from}&to=${to}`);
    assert.equal(seconds.status, 200);
    assert.equal(seconds.text, iso.text);
  });

  it("refuses absurd ranges and bad times with an OpenAI-shaped 400", async () => {
    const long = await alice.get("/api/usage/export?from=2000-01-01&to=2026-01-01");
    assert.equal(long.status, 400);
    assert.equal(long.body.error.code, "range_too_long");
    assert.equal(long.body.error.param, "from");
    assert.equal(long.body.error.type, "invalid_request_error");
    assert.equal((await alice.get(`/api/usage/export?from=${to}&to=${from}`)).status, 400);
    assert.equal((await alice.get("/api/usage/export?from=yesterday")).status, 400);
  });

  it("is account-scoped: others see only the header, admins may name an account", async () => {
    const others = await bob.get(`/api/usage/export?from=${from}&to=${to}`);
    assert.equal(others.status, 200);
    assert.equal(parseCsv(others.text).length, 1);
    assert.equal((await bob.get(`/api/usage/export?account=${aliceId}`)).status, 403);
    const named = await admin.get(`/api/usage/export?from=${from}&to=${to}&account=${aliceId}`);
    assert.equal(named.text, (await alice.get(`/api/usage/export?from=${from}&to=${to}`)).text);
  });
});
