/**
 * Plans: what an account buys. Defined by the operator in the config file and editable by
 * admins. Money and credit are integers in their smallest unit; never floats. Credit, days and
 * price have maxima (`money-bounds.ts`), checked here for config files and the admin API alike.
 * A shared shape, so it lives with the protocol: the settings, the admin API's requests, billing
 * and the rate limits all read it, and none of them has to import another for it.
 */
import { z } from "zod";
import { MAX_CREDIT, MAX_PLAN_DAYS, MAX_PRICE_AMOUNT } from "./money-bounds.ts";
import { DEFAULT_SERVICE_TIER_PRICES, SERVICE_TIERS } from "./service-tiers.ts";

/** The largest plan weight: 1000 times an ordinary account's share. */
export const MAX_PLAN_WEIGHT = 1000;
/** The largest service-tier price multiplier (100 × the model's prices). */
export const MAX_TIER_MULTIPLIER = 100;

/** A tier's price multiplier: 0 to 100, in hundredths at most (prices stay integer arithmetic: `multiplierPercent`). */
const tierMultiplierSchema = z
  .number()
  .min(0)
  .max(MAX_TIER_MULTIPLIER)
  .refine((value) => Math.abs(value * 100 - Math.round(value * 100)) < 1e-6, "must have at most two decimals (multipliers are kept in hundredths).");

/** The tiers a plan allows, each with its price multiplier; a tier absent is not allowed; at least one. */
export const serviceTierPricesSchema = z
  .partialRecord(z.enum(SERVICE_TIERS), tierMultiplierSchema)
  .refine((tiers) => Object.values(tiers).some((multiplier) => multiplier !== undefined), "must allow at least one tier (`default`, `flex` or `priority`).");

export const planSchema = z.object({
  id: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, "must start with a letter or digit and hold only letters, digits and . _ -"),
  name: z.string().min(1),
  /** `amount` in the currency's minor unit (cents for USD): 500 is $5.00; at most `MAX_PRICE_AMOUNT`. */
  price: z.object({
    amount: z.number().int().min(0).max(MAX_PRICE_AMOUNT),
    currency: z
      .string()
      .regex(/^[a-z]{3}$/i)
      .transform((value) => value.toLowerCase()),
  }),
  /** Credit units granted per purchase; at most `MAX_CREDIT` (10^15). */
  credit: z.number().int().min(0).max(MAX_CREDIT),
  /** Days the granted credit stays spendable (at most `MAX_PLAN_DAYS`, 3650); null: it does not expire. */
  days: z.number().int().min(1).max(MAX_PLAN_DAYS).nullable().default(null),
  /** Requests per minute; null: no limit. */
  rpm: z.number().int().min(1).nullable().default(null),
  /** Tokens per minute (prompt + completion); null: no limit. */
  tpm: z.number().int().min(1).nullable().default(null),
  /** Model ids the plan may use; null: every model. */
  models: z.array(z.string()).nullable().default(null),
  /** The account's share of a saturated model relative to other accounts' (2: twice the tokens of weight 1); above 0, at most 1000. */
  weight: z.number().gt(0).max(MAX_PLAN_WEIGHT).default(1),
  /** The service tiers the plan allows, each with its price multiplier (1: the model's prices; 0.5: half). Default: `default` alone at 1. */
  service_tiers: serviceTierPricesSchema.default(() => ({ ...DEFAULT_SERVICE_TIER_PRICES })),
});

export type Plan = z.infer<typeof planSchema>;

/**
 * What is out of bounds in a plan read from the database (one saved before the bounds existed),
 * or null when it may be granted as it is.
 */
export function planOutOfBounds(plan: Plan): string | null {
  const checked = planSchema.safeParse(plan);
  if (checked.success) return null;
  const issue = checked.error.issues[0];
  return `The plan '${plan.id}' has '${issue?.path.join(".") ?? "a field"}' out of bounds: ${issue?.message ?? "invalid"}. Edit the plan first.`;
}
