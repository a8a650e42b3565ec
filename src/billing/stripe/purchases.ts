/**
 * Stripe purchases in the database. A Checkout session is recorded when Turnpike starts it
 * (account, plan, price, and the credit and days it grants); a paid session is granted once
 * per session (however many events name it), and only when what Stripe says was paid (amount
 * and currency) is what was recorded. Anything else is refused with a reason the webhook
 * logs, and acknowledged to Stripe: delivering it again would not change the answer.
 */
import type { Kysely } from "kysely";
import type { Database } from "../../store/schema.ts";
import { BalanceLimitExceededError } from "../errors.ts";
import { grantCredit } from "../ledger.ts";
import type { Plan } from "../plans.ts";
import type { StripePurchase } from "./webhook.ts";

/** A session as the checkout route hands it over, once Stripe made it. */
export type CheckoutSessionRecord = {
  /** Stripe's session id (`cs_…`). */
  sessionId: string;
  accountId: string;
  /** The plan as sold at this moment: its price, credit and days are what the session grants. */
  plan: Plan;
  now?: number;
};

/** Records a session Turnpike started, before its URL goes to the buyer. */
export async function recordCheckoutSession(database: Kysely<Database>, input: CheckoutSessionRecord): Promise<void> {
  await database
    .insertInto("checkout_sessions")
    .values({
      id: input.sessionId,
      account_id: input.accountId,
      plan_id: input.plan.id,
      amount: input.plan.price.amount,
      currency: input.plan.price.currency.toLowerCase(),
      credit: input.plan.credit,
      days: input.plan.days,
      status: "open",
      event_id: null,
      created_at: input.now ?? Date.now(),
      closed_at: null,
    })
    .execute();
}

/**
 * Why a paid session was not granted:
 * - `already_granted`: this session was granted before (Stripe retried, or sent another event for it);
 * - `unknown_session`: Turnpike did not start (or record) this session;
 * - `mismatch`: the amount, currency, account or plan Stripe reports is not what was recorded;
 * - `unknown_account`: the buying account no longer exists;
 * - `balance_limit_exceeded`: the grant would take the account past `MAX_CREDIT`.
 */
export type PurchaseRefusal = "already_granted" | "unknown_session" | "mismatch" | "unknown_account" | "balance_limit_exceeded";

export type PurchaseOutcome = { granted: true } | { granted: false; reason: PurchaseRefusal; detail?: string };

/**
 * Grants a paid session's recorded credit once, keyed by the session (ledger source
 * `checkout:<session id>`). Never throws for what the event says; database failures throw
 * (the webhook answers 500 and Stripe delivers again later).
 */
export async function grantCheckoutPurchase(database: Kysely<Database>, purchase: StripePurchase, now = Date.now()): Promise<PurchaseOutcome> {
  const session = await database.selectFrom("checkout_sessions").selectAll().where("id", "=", purchase.sessionId).executeTakeFirst();
  if (session === undefined) return { granted: false, reason: "unknown_session" };
  if (session.status === "granted") return { granted: false, reason: "already_granted" };
  const differences: string[] = [];
  if (purchase.amountTotal !== Number(session.amount)) differences.push(`amount_total ${purchase.amountTotal} (expected ${Number(session.amount)})`);
  if (purchase.currency?.toLowerCase() !== session.currency) differences.push(`currency ${purchase.currency} (expected ${session.currency})`);
  if (purchase.accountId !== session.account_id) differences.push("account");
  if (purchase.planId !== session.plan_id) differences.push("plan");
  if (differences.length > 0) return refuse(database, purchase, "mismatch", differences.join(", "), now);
  const account = await database.selectFrom("accounts").select("id").where("id", "=", session.account_id).executeTakeFirst();
  if (account === undefined) return refuse(database, purchase, "unknown_account", undefined, now);
  try {
    const { granted } = await grantCredit(database, {
      accountId: session.account_id,
      amount: Number(session.credit),
      planId: session.plan_id,
      days: session.days,
      source: `checkout:${session.id}`,
      now,
    });
    if (!granted) return { granted: false, reason: "already_granted" };
  } catch (error) {
    if (error instanceof BalanceLimitExceededError) return refuse(database, purchase, "balance_limit_exceeded", error.message, now);
    throw error;
  }
  await database.updateTable("checkout_sessions").set({ status: "granted", event_id: purchase.eventId, closed_at: now }).where("id", "=", session.id).execute();
  return { granted: true };
}

/** Marks the session refused (unless granted meanwhile) and returns the refusal. */
async function refuse(database: Kysely<Database>, purchase: StripePurchase, reason: PurchaseRefusal, detail: string | undefined, now: number): Promise<PurchaseOutcome> {
  await database
    .updateTable("checkout_sessions")
    .set({ status: "refused", event_id: purchase.eventId, closed_at: now })
    .where("id", "=", purchase.sessionId)
    .where("status", "!=", "granted")
    .execute();
  return detail === undefined ? { granted: false, reason } : { granted: false, reason, detail };
}
