/**
 * Grants a plan to an account: its credit, for its days, once per source. The way an admin
 * grant or a redemption code turns into credit (a Stripe purchase grants what its checkout
 * session recorded, `stripe/purchases.ts`). Past the maximum balance it throws 409
 * `balance_limit_exceeded`, granting nothing.
 */
import type { Kysely } from "kysely";
import type { Database } from "../store/schema.ts";
import { grantCredit } from "./ledger.ts";
import type { Plan } from "../protocol/plans.ts";

/**
 * @param source unique per grant (`admin:<id>`, `code:<hash>`): a second
 *   grant with the same source does nothing and returns `granted: false`.
 */
export async function grantPlan(database: Kysely<Database>, input: { accountId: string; plan: Plan; source: string }): Promise<{ granted: boolean }> {
  const { granted } = await grantCredit(database, {
    accountId: input.accountId,
    amount: input.plan.credit,
    planId: input.plan.id,
    days: input.plan.days,
    source: input.source,
  });
  return { granted };
}
