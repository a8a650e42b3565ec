/** How the console writes numbers, money, credit and times. */

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

/** Credit units per million tokens. */
export function formatPrice(perMillion: number): string {
  return perMillion === 0 ? "Free" : `${integer.format(perMillion)} / 1M`;
}

/** The cost of a call, as the server computes it: tokens × prices per million, rounded up. */
export function costOf(pricing: { prompt: number; cached_prompt: number; completion: number }, usage: { prompt_tokens: number; completion_tokens: number; cached_tokens?: number }): number {
  const cached = Math.min(usage.cached_tokens ?? 0, usage.prompt_tokens);
  const total = (usage.prompt_tokens - cached) * pricing.prompt + cached * pricing.cached_prompt + usage.completion_tokens * pricing.completion;
  return Math.ceil(total / 1_000_000);
}
