/**
 * Redemption codes on both stores: single use, even when redeemed concurrently.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createAccount } from "../accounts/accounts.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../test/helpers/databases.ts";
import { checkLedger } from "./ledger.ts";
import { createCodes, generateCode, hashCode, listCodes, normalizeCode, redeemCode } from "./codes.ts";
import { BalanceLimitExceededError, CodeAlreadyRedeemedError, CodeNotFoundError, PlanNotFoundError, PlanOutOfBoundsError } from "./errors.ts";
import { grantCredit } from "./ledger.ts";
import { MAX_CREDIT } from "../protocol/money-bounds.ts";
import { savePlan } from "./plans-store.ts";

describe("code format", () => {
  it("makes readable codes with 100 random bits", () => {
    const code = generateCode();
    assert.match(code, /^TP-[0-9A-HJKMNP-TV-Z]{5}(-[0-9A-HJKMNP-TV-Z]{5}){3}$/);
    assert.notEqual(generateCode(), code);
  });
  it("accepts codes typed loosely: case, dashes, spaces, O for 0 and I or L for 1", () => {
    assert.equal(normalizeCode("tp-ab0c1-xyz"), "AB0C1XYZ");
    assert.equal(hashCode("TP-AB0C1-XYZ"), hashCode(" ab oc i-xyz"));
  });
});

for (const backend of backends) {
  describe(`redemption codes (${backend})`, () => {
    let store: TestDatabase;
    before(async () => {
      store = await openTestDatabase(backend);
      await savePlan(store.database, { id: "gift", name: "Gift", price: { amount: 0, currency: "usd" }, credit: 700, days: 10, rpm: null, tpm: null, models: null, weight: 1, service_tiers: { default: 1 } }, "admin");
    });
    after(async () => {
      await store?.close();
    });
    const account = () => createAccount(store.database, { email: `code-${Math.random()}@example.com` });

    it("stores only hashes and prefixes, and grants the plan once", async () => {
      const [code] = await createCodes(store.database, { planId: "gift", count: 1 });
      const rows = await store.database.selectFrom("redemption_codes").selectAll().execute();
      assert.ok(rows.every((row) => !JSON.stringify(row).includes(normalizeCode(code!))), "the code itself is not stored");
      const owner = await account();
      const { plan } = await redeemCode(store.database, { code: code!, accountId: owner.id });
      assert.equal(plan.id, "gift");
      await assert.rejects(redeemCode(store.database, { code: code!, accountId: owner.id }), CodeAlreadyRedeemedError);
      const check = await checkLedger(store.database, owner.id);
      assert.equal(check.balance, 700);
      assert.equal(check.sumOfEntries, 700);
      const listed = (await listCodes(store.database)).find((row) => code!.startsWith(row.displayPrefix));
      assert.equal(listed?.redeemedBy, owner.id);
    });

    it("lets exactly one of many concurrent redemptions win", async () => {
      const [code] = await createCodes(store.database, { planId: "gift", count: 1 });
      const owners = await Promise.all(Array.from({ length: 6 }, account));
      const results = await Promise.allSettled(owners.map((owner) => redeemCode(store.database, { code: code!, accountId: owner.id })));
      assert.equal(results.filter((result) => result.status === "fulfilled").length, 1);
      for (const result of results) if (result.status === "rejected") assert.ok(result.reason instanceof CodeAlreadyRedeemedError, String(result.reason));
      const balances = await Promise.all(owners.map(async (owner) => (await checkLedger(store.database, owner.id)).balance));
      assert.equal(balances.reduce((sum, balance) => sum + balance, 0), 700);
    });

    it("refuses unknown codes and unknown plans", async () => {
      const owner = await account();
      await assert.rejects(redeemCode(store.database, { code: generateCode(), accountId: owner.id }), CodeNotFoundError);
      await assert.rejects(createCodes(store.database, { planId: "nope", count: 1 }), PlanNotFoundError);
    });

    it("refuses a redemption that would take the balance past MAX_CREDIT, and leaves the code unredeemed", async () => {
      const [code] = await createCodes(store.database, { planId: "gift", count: 1 });
      const full = await account();
      await grantCredit(store.database, { accountId: full.id, amount: MAX_CREDIT, source: `admin:${full.id}` });
      await assert.rejects(redeemCode(store.database, { code: code!, accountId: full.id }), BalanceLimitExceededError);
      assert.equal((await checkLedger(store.database, full.id)).balance, MAX_CREDIT);
      const other = await account();
      await redeemCode(store.database, { code: code!, accountId: other.id });
      assert.equal((await checkLedger(store.database, other.id)).balance, 700);
    });

    it("makes no codes for a plan saved out of bounds before the bounds existed", async () => {
      // savePlan takes a plan as given; the database may hold one from an older release.
      await savePlan(store.database, { id: "legacy", name: "Legacy", price: { amount: 0, currency: "usd" }, credit: 9007199254740991, days: null, rpm: null, tpm: null, models: null, weight: 1, service_tiers: { default: 1 } }, "admin");
      await assert.rejects(createCodes(store.database, { planId: "legacy", count: 1 }), PlanOutOfBoundsError);
    });
  });
}
