/**
 * Usage in money for `/api/usage`: each row's `cost` (credits) also as `cost_money`, an exact
 * decimal string in the currency of the `credit_value` setting. Without one, rows are as they are.
 */
import { creditsToMoney, type CreditValue } from "../protocol/credit-value.ts";

/** `rows` with `cost_money` beside `cost`, when a credit value is set. */
export function withMoneyCosts<Row extends { cost: number }>(rows: Row[], creditValue: CreditValue | null): Array<Row & { cost_money?: string }> {
  if (creditValue === null) return rows;
  return rows.map((row) => ({ ...row, cost_money: creditsToMoney(row.cost, creditValue) }));
}

/** `{currency}` for a response whose rows carry `cost_money`; nothing without a credit value. */
export function moneyCurrency(creditValue: CreditValue | null): { currency?: string } {
  return creditValue === null ? {} : { currency: creditValue.currency };
}
