/** How the console writes numbers, money, credit and times. */
import { creditsToMoney, type CreditValue } from "../../src/protocol/credit-money.ts";
import { costOf as exactCostOf } from "../../src/protocol/price.ts";

/** What a credit is worth (`GET /api/settings`), and its exact conversion: the server's own arithmetic. */
export { creditsToMoney, type CreditValue };

const integer = new Intl.NumberFormat("en-US");

export function formatNumber(value: number): string {
  return integer.format(value);
}

/** Credit units are integers: shown whole, with separators. */
export function formatCredits(value: number): string {
  return `${integer.format(value)} credits`;
}

/** A price in the currency's minor unit (cents for USD). */
export function formatMoney(price: { amount: number; currency: string }): string {
  const currency = price.currency.toUpperCase();
  let digits = 2;
  try {
    digits = new Intl.NumberFormat("en-US", { style: "currency", currency }).resolvedOptions().maximumFractionDigits ?? 2;
    return new Intl.NumberFormat("en-US", { style: "currency", currency }).format(price.amount / 10 ** digits);
  } catch {
    return `${(price.amount / 100).toFixed(2)} ${currency}`;
  }
}

/** Times from `/api` are seconds since the epoch, every one of them. */
export function toDate(seconds: number): Date {
  return new Date(seconds * 1000);
}

export function formatDate(time: number | null | undefined): string {
  if (time === null || time === undefined) return "—";
  return toDate(time).toLocaleDateString(undefined, { year: "numeric", month: "short", day: "numeric" });
}

export function formatDateTime(time: number | null | undefined): string {
  if (time === null || time === undefined) return "—";
  return toDate(time).toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

/** "3 minutes ago", "in 2 days". */
export function formatRelative(time: number | null | undefined, now = Date.now()): string {
  if (time === null || time === undefined) return "Never";
  const difference = toDate(time).getTime() - now;
  const units: Array<[Intl.RelativeTimeFormatUnit, number]> = [
    ["year", 365 * 86_400_000],
    ["month", 30 * 86_400_000],
    ["day", 86_400_000],
    ["hour", 3_600_000],
    ["minute", 60_000],
  ];
  const format = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  for (const [unit, size] of units) {
    if (Math.abs(difference) >= size) return format.format(Math.round(difference / size), unit);
  }
  return "just now";
}

/** A price in credit units per million tokens, with its unit: "100 credits / 1M tokens". */
export function formatPrice(perMillion: number): string {
  return perMillion === 0 ? "Free" : `${integer.format(perMillion)} credits / 1M tokens`;
}

/**
 * An amount of money given as an exact decimal string ("0.00025"), in `currency` (ISO 4217):
 * amounts of a cent or more with 2 to 4 decimals ("$2.5031"), smaller ones to 3 significant
 * digits ("$0.00025"), so a price per million tokens never shows as $0.00.
 */
export function formatMoneyAmount(amount: string, currency: string): string {
  const code = currency.toUpperCase();
  try {
    const digits = new Intl.NumberFormat("en-US", { style: "currency", currency: code }).resolvedOptions().maximumFractionDigits ?? 2;
    // A Number only to choose the format; the amount itself is formatted from its exact digits.
    const size = Math.abs(Number(amount));
    const small = size !== 0 && size < 10 ** -digits;
    const options: Intl.NumberFormatOptions = small ? { maximumSignificantDigits: 3 } : { minimumFractionDigits: digits, maximumFractionDigits: Math.max(digits, 4) };
    return new Intl.NumberFormat("en-US", { style: "currency", currency: code, ...options }).format(amount as Intl.StringNumericLiteral);
  } catch {
    return `${amount} ${code}`;
  }
}

/** A price per million tokens in money, with its unit: "$0.15 / 1M tokens". */
export function formatMoneyPrice(amount: string, currency: string): string {
  return Number(amount) === 0 ? "Free" : `${formatMoneyAmount(amount, currency)} / 1M tokens`;
}

/** A cost in a table cell: in money when the server says what a credit is worth, else the whole credits ("1,234"). */
export function formatCost(credits: number, creditValue: CreditValue | null): string {
  return creditValue === null ? integer.format(credits) : formatMoneyAmount(creditsToMoney(credits, creditValue), creditValue.currency);
}

/**
 * A chart's value for `credits`: the money they are worth, in the currency's major unit, with a
 * credit value (a Number, fine for drawing; labels use `formatCost` on the credits), else the credits.
 */
export function chartCost(credits: number, creditValue: CreditValue | null): number {
  return creditValue === null ? credits : Number(creditsToMoney(credits, creditValue));
}

/** An axis tick of money in `currency`: to 3 significant digits ("$0.0025", "$12.5"), compact from a thousand ("$1.2K"). */
export function formatMoneyTick(value: number, currency: string): string {
  const code = currency.toUpperCase();
  try {
    return new Intl.NumberFormat("en-US", { style: "currency", currency: code, maximumSignificantDigits: 3, notation: Math.abs(value) >= 1000 ? "compact" : "standard" }).format(value);
  } catch {
    return `${value} ${code}`;
  }
}

/** A total spent: "$1.23 (1,234,567 credits)" with a credit value, "1,234,567 credits" without. */
export function formatSpent(credits: number, creditValue: CreditValue | null): string {
  return creditValue === null ? formatCredits(credits) : `${formatCost(credits, creditValue)} (${formatCredits(credits)})`;
}

/** The cost of a call, in the wire's field names: the server's own formula (`src/protocol/price.ts`), exact. */
export function costOf(pricing: { prompt: number; cached_prompt: number; completion: number }, usage: { prompt_tokens: number; completion_tokens: number; cached_tokens?: number }): number {
  return exactCostOf(
    { prompt: pricing.prompt, cachedPrompt: pricing.cached_prompt, completion: pricing.completion },
    { promptTokens: usage.prompt_tokens, cachedPromptTokens: usage.cached_tokens ?? 0, completionTokens: usage.completion_tokens },
  );
}
