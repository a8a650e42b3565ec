/**
 * Metered accounts for in-process server tests, and the exact-billing check the billing tests
 * make: every hold settled, the balance equal to its entries and to the credit less exactly what
 * the usage records charge, each record charged its tokens times the prices.
 */
import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import type { Kysely } from "kysely";
import { createAccount } from "../../src/accounts/accounts.ts";
import { createApiKey, type CreateKeyOptions } from "../../src/auth/api-keys.ts";
import { checkLedger } from "../../src/billing/ledger.ts";
import { grantPlan } from "../../src/billing/grant-plan.ts";
import { findPlan } from "../../src/billing/plans-store.ts";
import { costOf } from "../../src/protocol/price.ts";
import type { Database } from "../../src/store/schema.ts";

/** Credit units per million tokens, as a config file's model `pricing` names them. */
export type ConfigPricing = { prompt: number; cached_prompt: number; completion: number };

/** An account on `plan` (none: no credit) and a key of it. */
export async function meteredKey(database: Kysely<Database>, plan: string | null, options: Omit<CreateKeyOptions, "accountId"> = {}): Promise<{ accountId: string; key: string; keyId: string }> {
  const account = await createAccount(database, { email: `metered-${Math.random().toString(36).slice(2)}@example.com` });
  if (plan !== null) await grantPlan(database, { accountId: account.id, plan: (await findPlan(database, plan))!, source: `test:${account.id}` });
  const created = await createApiKey(database, { name: "metered", accountId: account.id, ...options });
  return { accountId: account.id, key: created.key, keyId: created.id };
}

/** What `usage` costs at `pricing` (tokens as the Responses API or chat completions report them). */
export function costOfUsage(pricing: ConfigPricing, usage: { promptTokens: number; cachedPromptTokens: number; completionTokens: number }): number {
  return costOf({ prompt: pricing.prompt, cachedPrompt: pricing.cached_prompt, completion: pricing.completion }, usage);
}

export type UsageRecordRow = { request_id: string; prompt_tokens: number; cached_prompt_tokens: number; completion_tokens: number; cost: number; finish_reason: string | null; status: number };

/**
 * Waits (up to 10 s) until the account has no open hold and `records` usage records, then checks
 * the books exactly; returns the records (oldest first) and the balance.
 */
export async function billedExactly(database: Kysely<Database>, accountId: string, credit: number, pricing: ConfigPricing, records: number): Promise<{ records: UsageRecordRow[]; balance: number }> {
  const read = async () => {
    const books = await checkLedger(database, accountId);
    const rows = await database.selectFrom("usage_records").selectAll().where("account_id", "=", accountId).orderBy("created_at").execute();
    return { books, rows };
  };
  let state = await read();
  for (let attempt = 0; attempt < 400 && (state.books.activeHolds > 0 || state.rows.length < records); attempt++) {
    await delay(25);
    state = await read();
  }
  const { books, rows } = state;
  assert.equal(books.activeHolds, 0, "every hold was settled");
  assert.equal(rows.length, records, "one usage record a request, none twice");
  assert.equal(books.balance, books.sumOfEntries);
  const normalised = rows.map((row) => ({
    request_id: row.request_id,
    prompt_tokens: Number(row.prompt_tokens),
    cached_prompt_tokens: Number(row.cached_prompt_tokens),
    completion_tokens: Number(row.completion_tokens),
    cost: Number(row.cost),
    finish_reason: row.finish_reason,
    status: Number(row.status),
  }));
  for (const row of normalised) {
    // A request refused as it started (a full queue) is recorded with its prompt and charged nothing.
    if (row.finish_reason === null && row.completion_tokens === 0) {
      assert.equal(row.cost, 0, `a refusal is charged nothing: ${JSON.stringify(row)}`);
      continue;
    }
    assert.equal(row.cost, costOfUsage(pricing, { promptTokens: row.prompt_tokens, cachedPromptTokens: row.cached_prompt_tokens, completionTokens: row.completion_tokens }), `billed exactly: ${JSON.stringify(row)}`);
  }
  assert.equal(books.balance, credit - normalised.reduce((sum, row) => sum + row.cost, 0), "the balance is the credit less exactly what the records charged");
  return { records: normalised, balance: books.balance };
}
