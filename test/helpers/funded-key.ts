/**
 * An account with `credit` granted and a verified key of its own, for tests of metering that call
 * the billing code directly (no server).
 */
import assert from "node:assert/strict";
import type { Kysely } from "kysely";
import { createAccount } from "../../src/accounts/accounts.ts";
import { createApiKey, verifyApiKey, type ApiKeyRecord } from "../../src/auth/api-keys.ts";
import { grantCredit } from "../../src/billing/ledger.ts";
import type { Database } from "../../src/store/schema.ts";

export async function fundedKey(database: Kysely<Database>, credit: number, label = "funded"): Promise<{ accountId: string; key: ApiKeyRecord }> {
  const account = await createAccount(database, { email: `${label}-${Math.random().toString(36).slice(2)}@example.com` });
  if (credit > 0) await grantCredit(database, { accountId: account.id, amount: credit, source: `test:${account.id}` });
  const created = await createApiKey(database, { accountId: account.id });
  const verified = await verifyApiKey(database, created.key);
  assert.ok(verified.ok);
  return { accountId: account.id, key: verified.key };
}
