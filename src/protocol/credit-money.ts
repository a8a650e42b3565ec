/**
 * Credits in money, exactly: the arithmetic the server (`/v1/models` prices, `/api/usage`'s
 * `cost_money`) and the console (costs, totals, charts) share. Billing stays in integer credits;
 * money is display. Dependency-free, so the console bundles it as it is.
 */

/** What a credit is worth: 1,000,000 credits cost `per_million_credits` (an exact decimal string, major unit) of `currency`. */
export type CreditValue = { readonly currency: string; readonly per_million_credits: string };

/** The exact decimal `text` without leading or trailing zeros ("01.50" → "1.5"). */
export function normalizeDecimal(text: string): string {
  const [whole = "0", fraction = ""] = text.split(".");
  const wholeDigits = whole.replace(/^0+(?=\d)/, "");
  const fractionDigits = fraction.replace(/0+$/, "");
  return fractionDigits === "" ? wholeDigits : `${wholeDigits}.${fractionDigits}`;
}

/** `credits` worth of money under `value`, as an exact decimal string in the currency's major unit ("0.000125"). */
export function creditsToMoney(credits: number | bigint, value: CreditValue): string {
  const [whole = "0", fraction = ""] = value.per_million_credits.split(".");
  const mantissa = BigInt(`${whole}${fraction}`);
  const digits = fraction.length + 6;
  const product = BigInt(credits) * mantissa;
  const negative = product < 0n;
  const text = (negative ? -product : product).toString().padStart(digits + 1, "0");
  const amount = normalizeDecimal(`${text.slice(0, -digits)}.${text.slice(-digits)}`);
  return negative ? `-${amount}` : amount;
}
