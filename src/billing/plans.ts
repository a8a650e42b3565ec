/**
 * Plans: what an account buys. Defined by the operator in the config file and editable by
 * admins. Money and credit are integers in their smallest unit; never floats.
 */
import { z } from "zod";

export const planSchema = z.object({
  id: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, "must start with a letter or digit and hold only letters, digits and . _ -"),
  name: z.string().min(1),
  /** `amount` in the currency's minor unit (cents for USD): 500 is $5.00. */
  price: z.object({ amount: z.number().int().min(0), currency: z.string().regex(/^[a-z]{3}$/i).transform((value) => value.toLowerCase()) }),
  /** Credit units granted per purchase. */
  credit: z.number().int().min(0),
  /** Days the granted credit stays spendable; null: it does not expire. */
  days: z.number().int().min(1).nullable().default(null),
  /** Requests per minute; null: no limit. */
  rpm: z.number().int().min(1).nullable().default(null),
  /** Tokens per minute (prompt + completion); null: no limit. */
  tpm: z.number().int().min(1).nullable().default(null),
  /** Model ids the plan may use; null: every model. */
  models: z.array(z.string()).nullable().default(null),
});

export type Plan = z.infer<typeof planSchema>;
