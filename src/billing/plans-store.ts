/**
 * Plans in the database: the operator's config plans are written at start (the file wins
 * for those ids); admins may add more through the API.
 */
import type { Kysely, Selectable } from "kysely";
import type { Database, PlanTable } from "../store/schema.ts";
import type { Plan } from "../protocol/plans.ts";
import { DEFAULT_SERVICE_TIER_PRICES, type ServiceTierPrices } from "../protocol/service-tiers.ts";

function toPlan(row: Selectable<PlanTable>): Plan {
  return {
    id: row.id,
    name: row.name,
    price: { amount: Number(row.price_amount), currency: row.price_currency },
    credit: Number(row.credit),
    days: row.days,
    rpm: row.rpm,
    tpm: row.tpm,
    models: row.models === null ? null : (JSON.parse(row.models) as string[]),
    weight: Number(row.weight),
    service_tiers: row.service_tiers === null ? { ...DEFAULT_SERVICE_TIER_PRICES } : (JSON.parse(row.service_tiers) as ServiceTierPrices),
  };
}

/** Creates or updates a plan. */
export async function savePlan(database: Kysely<Database>, plan: Plan, origin: "config" | "admin", now = Date.now()): Promise<void> {
  const values = {
    name: plan.name,
    price_amount: plan.price.amount,
    price_currency: plan.price.currency,
    credit: plan.credit,
    days: plan.days,
    rpm: plan.rpm,
    tpm: plan.tpm,
    models: plan.models === null ? null : JSON.stringify(plan.models),
    weight: plan.weight,
    service_tiers: JSON.stringify(plan.service_tiers),
    origin,
    updated_at: now,
  };
  await database
    .insertInto("plans")
    .values({ id: plan.id, created_at: now, ...values })
    .onConflict((conflict) => conflict.column("id").doUpdateSet(values))
    .execute();
}

export async function syncConfigPlans(database: Kysely<Database>, plans: readonly Plan[]): Promise<void> {
  for (const plan of plans) await savePlan(database, plan, "config");
}

export async function findPlan(database: Kysely<Database>, id: string): Promise<Plan | undefined> {
  const row = await database.selectFrom("plans").selectAll().where("id", "=", id).executeTakeFirst();
  return row && toPlan(row);
}

/** The plan of an account (the one granted last), in one query; undefined when it has none. */
export async function findAccountPlan(database: Kysely<Database>, accountId: string): Promise<Plan | undefined> {
  const row = await database.selectFrom("plans").innerJoin("accounts", "accounts.plan_id", "plans.id").selectAll("plans").where("accounts.id", "=", accountId).executeTakeFirst();
  return row && toPlan(row);
}

export async function listPlans(database: Kysely<Database>): Promise<Plan[]> {
  return (await database.selectFrom("plans").selectAll().orderBy("price_amount").orderBy("id").execute()).map(toPlan);
}

/** An account's plan and balance, read together: what admission needs before it reserves anything. */
export type AccountStanding = { plan: Plan | undefined; balance: number };

/** The plan (undefined when none) and balance of an account, in one query; undefined when there is no such account. */
export async function findAccountStanding(database: Kysely<Database>, accountId: string): Promise<AccountStanding | undefined> {
  const row = await database
    .selectFrom("accounts")
    .leftJoin("plans", "plans.id", "accounts.plan_id")
    .selectAll("plans")
    .select("accounts.balance as account_balance")
    .where("accounts.id", "=", accountId)
    .executeTakeFirst();
  if (row === undefined) return undefined;
  const { account_balance: balance, ...plan } = row;
  return { plan: plan.id === null ? undefined : toPlan(plan as Selectable<PlanTable>), balance: Number(balance) };
}

