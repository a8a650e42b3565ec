/**
 * Money is bounded, end to end on a real server: plans past the maxima are refused at the admin
 * API, a grant or a redemption that would take a balance past MAX_CREDIT is refused with 409
 * `balance_limit_exceeded`, and the admin's account list never answers 500 on a big number
 * (issue 9, row 8: two grants of a plan with credit 2^53 - 1 made every GET /api/admin/accounts a 500).
 */
import { assertError } from "./helpers/api-error.ts";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { createAccount } from "../src/accounts/accounts.ts";
import { MAX_CREDIT, MAX_PLAN_DAYS } from "../src/protocol/money-bounds.ts";
import { openStore } from "../src/store/open.ts";
import { ConsoleClient } from "./helpers/console.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

let test: TestServer;
let admin: ConsoleClient;
let user: ConsoleClient;
let userId: string;

before(async () => {
  const configFile = path.join(temporaryDirectory(), "turnpike.json");
  fs.writeFileSync(
    configFile,
    JSON.stringify({
      models: [{ id: "stories260K", path: storiesModel }],
      plans: [
        { id: "max", name: "Max", price: { amount: 0, currency: "usd" }, credit: MAX_CREDIT },
        { id: "small", name: "Small", price: { amount: 0, currency: "usd" }, credit: 10 },
      ],
    }),
  );
  test = await startTestServer({ configFile, flags: { models: undefined } });
  const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
  try {
    await createAccount(database, { email: "admin@example.com", password: "correct horse battery", role: "admin" });
    userId = (await createAccount(database, { email: "user@example.com", password: "correct horse battery" })).id;
  } finally {
    await database.destroy();
  }
  admin = new ConsoleClient(test.url);
  user = new ConsoleClient(test.url);
  assert.equal((await admin.signIn("admin@example.com")).status, 200);
  assert.equal((await user.signIn("user@example.com")).status, 200);
});
after(async () => {
  await test?.close();
});

describe("money bounds", () => {
  it("refuses plans past the maxima at the admin API with a 400 naming the field", async () => {
    const plan = { id: "huge", name: "Huge", price: { amount: 500, currency: "usd" }, credit: 9007199254740991 };
    assertError(await admin.post("/api/admin/plans", plan), 400, "invalid_request_error", "credit");
    assertError(await admin.post("/api/admin/plans", { ...plan, credit: MAX_CREDIT + 1 }), 400, "invalid_request_error", "credit");
    assertError(await admin.post("/api/admin/plans", { ...plan, credit: 10, days: MAX_PLAN_DAYS + 1 }), 400, "invalid_request_error", "days");
    assertError(await admin.post("/api/admin/plans", { ...plan, credit: 10, price: { amount: 1e15, currency: "usd" } }), 400, "invalid_request_error", "price.amount");
    assertError(await admin.request("PATCH", "/api/admin/plans/small", { credit: 9007199254740991 }), 400, "invalid_request_error", "credit");
    assertError(await admin.request("PATCH", "/api/admin/plans/small", { days: 1_000_000 }), 400, "invalid_request_error", "days");
    const plans = await admin.get("/api/admin/plans");
    assert.equal(plans.status, 200);
    assert.deepEqual(
      plans.body.data.map((listed: { id: string; credit: number }) => [listed.id, listed.credit]).sort(),
      [
        ["max", MAX_CREDIT],
        ["small", 10],
      ],
    );
  });

  it("refuses a grant that would take a balance past MAX_CREDIT with 409, and the account list keeps answering", async () => {
    const first = await admin.post(`/api/admin/accounts/${userId}/grant`, { plan: "max" });
    assert.equal(first.status, 200, first.text);
    assert.equal(first.body.balance, MAX_CREDIT);
    assertError(await admin.post(`/api/admin/accounts/${userId}/grant`, { plan: "max" }), 409, "balance_limit_exceeded");
    assertError(await admin.post(`/api/admin/accounts/${userId}/grant`, { plan: "small" }), 409, "balance_limit_exceeded");
    const accounts = await admin.get("/api/admin/accounts");
    assert.equal(accounts.status, 200, accounts.text);
    assert.equal(accounts.body.data.find((account: { id: string }) => account.id === userId).balance, MAX_CREDIT);
  });

  it("refuses a redemption past MAX_CREDIT with 409 and leaves the code unredeemed", async () => {
    const made = await admin.post("/api/admin/codes", { plan: "small", count: 1 });
    assert.equal(made.status, 201, made.text);
    const code = made.body.data[0].code as string;
    assertError(await user.post("/api/billing/redeem", { code }), 409, "balance_limit_exceeded");
    const codes = await admin.get("/api/admin/codes");
    assert.equal(codes.body.data.find((row: { display_prefix: string }) => code.startsWith(row.display_prefix)).redeemed, null);
  });

  it("lists an account whose balance passed 2^53 before the bounds existed instead of answering 500", async () => {
    const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
    try {
      const legacy = await createAccount(database, { email: "legacy@example.com" });
      await database.updateTable("accounts").set({ balance: 2 ** 53 + 2 }).where("id", "=", legacy.id).execute();
    } finally {
      await database.destroy();
    }
    const accounts = await admin.get("/api/admin/accounts");
    assert.equal(accounts.status, 200, accounts.text);
    assert.equal(accounts.body.data.find((account: { email: string }) => account.email === "legacy@example.com").balance, 2 ** 53 + 2);
  });
});
