/**
 * Refunds and disputes of Stripe purchases: the purchase's credit goes back with the money.
 *
 * A refund or dispute names the payment intent that paid a granted Checkout session (kept when
 * it was granted). It accounts for the session's credit in proportion to the money: a full
 * refund for all of it, half the price refunded for half (rounded up), a dispute for the
 * disputed amount. Of that share, what the purchase's lot has left unspent is taken back (never
 * past the balance: credit that running requests reserve stays theirs); the rest had been
 * spent, and is reported (the route logs it at warn, the history entry says it). A refund event
 * counts once however often it is delivered, and since Stripe sends the running total refunded,
 * each refund takes only what the total adds to the refunds before it; a dispute counts once,
 * whichever of its events comes first. Together they never account for more than the purchase.
 */
import type { Kysely } from "kysely";
import type { Database } from "../../store/schema.ts";
import { takeBackLotCredit } from "../ledger.ts";
import { ledgerStatementsOf } from "../ledger-statements/index.ts";
import type { StripeReversal } from "./webhook.ts";

/**
 * What a refund or dispute did:
 * - `reversed`: `share` credits were accounted for, `taken` of them taken back, `spent` had been spent;
 * - `already_reversed`: this refund event or dispute counted before (a redelivery);
 * - `unknown_payment`: no session Turnpike granted was paid by this payment intent (another
 *   product's payment, a session paid before 0010, or an event that came before its purchase's);
 * - `not_granted`: the session was paid but never granted (its refusal was logged then);
 * - `unknown_account`: the buying account is gone.
 */
export type ReversalOutcome =
  | { result: "reversed"; sessionId: string; accountId: string; planId: string; share: number; taken: number; spent: number }
  | { result: "already_reversed" | "unknown_payment" | "not_granted" | "unknown_account"; sessionId?: string; accountId?: string };

/** ⌈credit × part / whole⌉, exactly (credit and money stay integers; the product may pass 2^53). */
function proportion(credit: number, part: number, whole: number): number {
  if (whole <= 0 || part >= whole) return credit;
  const numerator = BigInt(credit) * BigInt(part);
  const denominator = BigInt(whole);
  return Number((numerator + denominator - 1n) / denominator);
}

/**
 * Takes back the credit a refund or dispute accounts for, once per `reversal.key`, in one
 * transaction with its record and ledger entry. Never throws for what the event says;
 * database failures throw (the webhook answers 500 and Stripe delivers again later).
 */
export async function reverseCheckoutPurchase(database: Kysely<Database>, reversal: StripeReversal, now = Date.now()): Promise<ReversalOutcome> {
  if (reversal.paymentIntentId === null) return { result: "unknown_payment" };
  const session = await database
    .selectFrom("checkout_sessions")
    .select(["id", "account_id", "plan_id", "amount", "credit", "status"])
    .where("payment_intent", "=", reversal.paymentIntentId)
    .orderBy("created_at", "desc")
    .executeTakeFirst();
  if (session === undefined) return { result: "unknown_payment" };
  const about = { sessionId: session.id, accountId: session.account_id };
  if (session.status !== "granted") return { result: "not_granted", ...about };
  const lot = await database.selectFrom("credit_lots").select("id").where("source", "=", `checkout:${session.id}`).executeTakeFirst();
  if (lot === undefined) return { result: "not_granted", ...about };
  const credit = Number(session.credit);

  return database.transaction().execute(async (transaction): Promise<ReversalOutcome> => {
    // The account's row is locked first: reversals of one purchase run one after another, so
    // the shares read below cannot be counted by two of them at once.
    if ((await ledgerStatementsOf(transaction).lockAccount(transaction, session.account_id)) === undefined) return { result: "unknown_account", ...about };
    const counted = await transaction.selectFrom("checkout_reversals").select("id").where("id", "=", reversal.key).executeTakeFirst();
    if (counted !== undefined) return { result: "already_reversed", ...about };
    const earlier = await transaction.selectFrom("checkout_reversals").select(["kind", "share"]).where("session_id", "=", session.id).execute();
    const accounted = earlier.reduce((sum, row) => sum + Number(row.share), 0);
    const refunded = earlier.filter((row) => row.kind === "refund").reduce((sum, row) => sum + Number(row.share), 0);
    // A refund's running total says how much of the purchase all its refunds account for.
    const target =
      reversal.kind === "refund"
        ? proportion(credit, reversal.amount, reversal.chargeAmount ?? Number(session.amount)) - refunded
        : proportion(credit, reversal.amount, Number(session.amount));
    const share = Math.max(0, Math.min(target, credit - accounted));
    const takenBack = await takeBackLotCredit(transaction, { accountId: session.account_id, lotId: lot.id, amount: share, now });
    if (takenBack === undefined) return { result: "unknown_account", ...about };
    const spent = share - takenBack.taken;
    await transaction
      .insertInto("checkout_reversals")
      .values({
        id: reversal.key,
        session_id: session.id,
        account_id: session.account_id,
        kind: reversal.kind,
        event_id: reversal.eventId,
        amount: reversal.amount,
        share,
        taken: takenBack.taken,
        spent,
        entry_id: takenBack.entryId,
        created_at: now,
      })
      .execute();
    return { result: "reversed", ...about, planId: session.plan_id, share, taken: takenBack.taken, spent };
  });
}
