/**
 * An account as people see it: balance (credit due to expire is expired first), the plan
 * granted last, and when the credit runs out. Shared by `turnpike accounts show` and `GET /api/account`.
 */
import type { Kysely } from "kysely";
import type { Database } from "../store/schema.ts";
import type { AccountObject } from "../protocol/account-api.ts";
import { expireDueCredit } from "../billing/ledger.ts";
import { findPlan } from "../billing/plans-store.ts";
import { AccountNotFoundError, findAccountById } from "./accounts.ts";

/** What `describeAccount` gives: the `/api` account object. */
export type AccountDescription = AccountObject;

export async function describeAccount(database: Kysely<Database>, accountId: string): Promise<AccountDescription> {
  await expireDueCredit(database, accountId);
  const account = await findAccountById(database, accountId);
  if (account === undefined) throw new AccountNotFoundError(`with id '${accountId}'`);
  const lot = await database
    .selectFrom("credit_lots")
    .select(["expires_at"])
    .where("account_id", "=", account.id)
    .where("remaining", ">", 0)
    .orderBy("expires_at", "desc")
    .executeTakeFirst();
  const plan = account.planId === null ? null : ((await findPlan(database, account.planId)) ?? null);
  return {
    id: account.id,
    email: account.email,
    role: account.role,
    balance: account.balance,
    plan,
    credit_expires: lot?.expires_at == null ? null : Math.floor(Number(lot.expires_at) / 1000),
    created: Math.floor(account.created / 1000),
    disabled: account.disabled === null ? null : Math.floor(account.disabled / 1000),
  };
}
