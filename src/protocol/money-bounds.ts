/**
 * The bounds on money and credit. Every amount Turnpike stores is an integer well inside
 * JavaScript's exact range (2^53 ≈ 9.007 × 10^15), so sums of them (a balance plus what its
 * running requests hold, a key's spend) never lose precision nor overflow a database read.
 * Plans, redemption codes, grants, key spend caps and balances are checked against these.
 */

/**
 * The most credit units a plan may grant, a key's spend cap may allow, and an account may hold
 * (its balance plus what its running requests hold): 10^15. A grant that would pass it is
 * refused with 409 `balance_limit_exceeded`.
 */
export const MAX_CREDIT = 1_000_000_000_000_000;

/** The longest a plan's credit may last: 3650 days (ten years). */
export const MAX_PLAN_DAYS = 3650;

/**
 * The highest plan price, in the currency's minor unit: 10^12 (ten billion dollars in cents).
 * Stripe refuses far less than that; the bound keeps the number exact everywhere.
 */
export const MAX_PRICE_AMOUNT = 1_000_000_000_000;
