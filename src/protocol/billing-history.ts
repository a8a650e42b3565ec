/** The objects of `GET /api/billing/history` (see `billing/history.ts`). */
import { z } from "zod";

/** Where an entry came from, as people say it. */
export const historySourceSchema = z.enum(["purchase", "code", "admin", "grant", "usage", "expiry", "refund"]);
export type HistorySource = z.infer<typeof historySourceSchema>;

export const historyEntrySchema = z.object({
  object: z.literal("billing.entry"),
  id: z.string(),
  /** The ledger's kind: grant, settle (a charge for usage), expiry or refund. */
  kind: z.enum(["grant", "settle", "expiry", "refund"]).describe("The ledger's kind: grant, settle (a charge for usage), expiry or refund."),
  source: historySourceSchema,
  description: z.string(),
  /** Credit units, signed: grants add, charges and expiries subtract. */
  amount: z.number().int().describe("Credit units, signed: grants add, charges and expiries subtract."),
  /** Credit units: the running sum of the listed entries up to and including this one. */
  balance_after: z.number().int().describe("Credit units: the balance after this entry."),
  /** The plan of the granted (or expired) credit; null for usage. */
  plan: z.string().nullable(),
  /** The key a charge was made with; null otherwise (or for a key since deleted). */
  key_name: z.string().nullable(),
  /** Seconds since the epoch. */
  created: z.number().int(),
});
export type HistoryEntry = z.infer<typeof historyEntrySchema>;

/** `GET /api/billing/history`: a page; the next one is `before=<the last entry's id>`. */
export const historyPageSchema = z.object({ object: z.literal("list"), data: z.array(historyEntrySchema), has_more: z.boolean() });
export type HistoryPage = z.infer<typeof historyPageSchema>;
