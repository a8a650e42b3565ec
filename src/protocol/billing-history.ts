/** The objects of `GET /api/billing/history` (see `billing/history.ts`). */

/** Where an entry came from, as people say it. */
export type HistorySource = "purchase" | "code" | "admin" | "grant" | "usage" | "expiry" | "refund";

export type HistoryEntry = {
  object: "billing.entry";
  id: string;
  /** The ledger's kind: grant, settle (a charge for usage), expiry or refund. */
  kind: "grant" | "settle" | "expiry" | "refund";
  source: HistorySource;
  description: string;
  /** Credit units, signed: grants add, charges and expiries subtract. */
  amount: number;
  /** Credit units: the running sum of the listed entries up to and including this one. */
  balance_after: number;
  /** The plan of the granted (or expired) credit; null for usage. */
  plan: string | null;
  /** The key a charge was made with; null otherwise (or for a key since deleted). */
  key_name: string | null;
  /** Seconds since the epoch. */
  created: number;
};

