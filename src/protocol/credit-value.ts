/**
 * What a credit is worth in money, for display: billing stays in credits, integer throughout.
 * `per_million_credits` is an exact decimal string in the currency's major unit (dollars for
 * `usd`): `{ currency: "usd", per_million_credits: "1" }` means 1,000,000 credits cost 1 USD.
 * Conversions are exact (BigInt over powers of ten, `credit-money.ts`), never floating point.
 */
import { z } from "zod";
import { creditsToMoney, normalizeDecimal, type CreditValue } from "./credit-money.ts";

/** The operator's `credit_value` setting, normalised (lower-case currency, decimal without trailing zeros). */
export type { CreditValue };
export { creditsToMoney };

const DECIMAL = /^\d{1,12}(\.\d{1,12})?$/;

const creditValueObject = z
  .object({
    currency: z
      .string()
      .regex(/^[A-Za-z]{3}$/, "the currency must be a three-letter ISO 4217 code such as usd")
      .transform((currency) => currency.toLowerCase()),
    per_million_credits: z
      .union([z.string(), z.number().transform(String)])
      .pipe(
        z
          .string()
          .trim()
          .regex(DECIMAL, "per_million_credits must be a decimal number such as 1 or 0.50 (at most 12 digits on each side of the point)")
          .refine((text) => /[1-9]/.test(text), "per_million_credits must be more than 0"),
      )
      .transform(normalizeDecimal),
  })
  .strict();

/**
 * `credit_value`: `{ "currency": "usd", "per_million_credits": 1 }` (the config file), or the
 * text `usd:1` (flag, environment, or the file); null, `""` or absent: unset (credits only).
 */
export const creditValueSchema = z.preprocess((input) => {
  if (typeof input !== "string") return input;
  const text = input.trim();
  if (text === "") return null;
  const colon = text.indexOf(":");
  return colon === -1 ? { currency: text, per_million_credits: "" } : { currency: text.slice(0, colon).trim(), per_million_credits: text.slice(colon + 1).trim() };
}, creditValueObject.nullable());

/** Prices in credits per million tokens → the same prices in money (decimal strings per million tokens). */
export function moneyPrices<Prices extends Record<string, number>>(prices: Prices, value: CreditValue): { [Name in keyof Prices]: string } {
  return Object.fromEntries(Object.entries(prices).map(([name, credits]) => [name, creditsToMoney(credits, value)])) as { [Name in keyof Prices]: string };
}
