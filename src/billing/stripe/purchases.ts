/**
 * Stripe purchases in the database. A Checkout session is recorded when Turnpike starts it
 * (account, plan, price, and the credit and days it grants); a paid session is granted once
 * per session (however many events name it), and only when what Stripe says was paid (amount
 * and currency) is what was recorded. Anything else is refused with a reason the webhook
 * logs, and acknowledged to Stripe: delivering it again would not change the answer. An open
 * session is handed out again to its account for the same plan (`findOpenCheckoutSession`).
 * Refunds and disputes of a granted session are `reversals.ts`'s.
 */
import type { Kysely } from "kysely";
import type { Database } from "../../store/schema.ts";
import { BalanceLimitExceededError } from "../errors.ts";
import { grantCredit } from "../ledger.ts";
import type { Plan } from "../../protocol/plans.ts";
import type { ClosedSession, StripePurchase } from "./webhook.ts";

/** A session as the checkout route hands it over, once Stripe made it. */
export type CheckoutSessionRecord = {
  /** Stripe's session id (`cs_…`). */
  sessionId: string;
  accountId: string;
  /** The plan as sold at this moment: its price, credit and days are what the session grants. */
  plan: Plan;
  /** The Checkout URL Stripe gave it, handed out again while the session is open. */
  url?: string;
  now?: number;
};

/**
 * How long after it was made a session is handed out again. Stripe's sessions expire 24 hours
 * after they are made (its default, which checkout keeps); the hour left leaves the buyer time to pay.
 */
export const CHECKOUT_REUSE_MS = 23 * 60 * 60 * 1000;

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
      url: input.url ?? null,
    })
    .execute();
}

/**
 * The account's open session for the plan as it is sold now (same price, credit and days), made
 * less than `CHECKOUT_REUSE_MS` ago and not paid, refused nor expired as far as Turnpike knows:
 * checkout hands it out again instead of asking Stripe for another. Undefined when there is none.
 */
export async function findOpenCheckoutSession(
  database: Kysely<Database>,
  input: { accountId: string; plan: Plan; now?: number },
): Promise<{ id: string; url: string } | undefined> {
  const { plan } = input;
  const now = input.now ?? Date.now();
  const row = await database
    .selectFrom("checkout_sessions")
    .select(["id", "url"])
    .where("account_id", "=", input.accountId)
    .where("plan_id", "=", plan.id)
    .where("status", "=", "open")
    .where("url", "is not", null)
    .where("created_at", ">", now - CHECKOUT_REUSE_MS)
    .where("amount", "=", plan.price.amount)
    .where("currency", "=", plan.price.currency.toLowerCase())
    .where("credit", "=", plan.credit)
    .where((expression) => (plan.days === null ? expression("days", "is", null) : expression("days", "=", plan.days)))
    .orderBy("created_at", "desc")
    .limit(1)
    .executeTakeFirst();
  return row === undefined || row.url === null ? undefined : { id: row.id, url: row.url };
}

/**
 * Marks a session that can no longer be paid (`ClosedSession`): it is not handed out again. A
 * granted or refused session keeps its status; a pending one may still be granted.
 */
export async function closeCheckoutSession(database: Kysely<Database>, closed: ClosedSession, now = Date.now()): Promise<void> {
  await database
    .updateTable("checkout_sessions")
    .set({ status: closed.status, closed_at: now })
    .where("id", "=", closed.sessionId)
    .where("status", "in", closed.status === "failed" ? ["open", "pending"] : ["open"])
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
  if (session.status === "granted") {
    // Granted before its payment intent was kept (before 0010): keep it now, for refunds.
    if (session.payment_intent === null && purchase.paymentIntentId !== null) {
      await database.updateTable("checkout_sessions").set({ payment_intent: purchase.paymentIntentId }).where("id", "=", session.id).where("payment_intent", "is", null).execute();
    }
    return { granted: false, reason: "already_granted" };
  }
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
    // Granted by an earlier delivery that stopped before it marked the session: mark it now.
    if (!granted) {
      await markGranted(database, session.id, purchase, now);
      return { granted: false, reason: "already_granted" };
    }
  } catch (error) {
    if (error instanceof BalanceLimitExceededError) return refuse(database, purchase, "balance_limit_exceeded", error.message, now);
    throw error;
  }
  await markGranted(database, session.id, purchase, now);
  return { granted: true };
}

/** Marks the session granted, with the payment intent that refunds and disputes will name. */
async function markGranted(database: Kysely<Database>, sessionId: string, purchase: StripePurchase, now: number): Promise<void> {
  await database
    .updateTable("checkout_sessions")
    .set({ status: "granted", event_id: purchase.eventId, closed_at: now, payment_intent: purchase.paymentIntentId })
    .where("id", "=", sessionId)
    .execute();
}

/** Marks the session refused (unless granted meanwhile) and returns the refusal. */
async function refuse(database: Kysely<Database>, purchase: StripePurchase, reason: PurchaseRefusal, detail: string | undefined, now: number): Promise<PurchaseOutcome> {
  await database
    .updateTable("checkout_sessions")
    .set({ status: "refused", event_id: purchase.eventId, closed_at: now, payment_intent: purchase.paymentIntentId })
    .where("id", "=", purchase.sessionId)
    .where("status", "!=", "granted")
    .execute();
  return detail === undefined ? { granted: false, reason } : { granted: false, reason, detail };
}
