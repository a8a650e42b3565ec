/**
 * A banner on the API Keys and Playground pages while the account's credit is zero or low, with
 * the balance and the way out: buy a plan or redeem a code (both on Billing).
 *
 * "Low" is under what 100 typical requests cost: a typical request being 1,000 prompt and 500
 * completion tokens on the priciest model on offer (`LOW_BALANCE_REQUESTS`, `TYPICAL_REQUEST`).
 * With only free models, only a zero balance is low.
 */
import type { Account, List, Model } from "../api.ts";
import { costOf, formatCredits, formatNumber } from "../format.ts";
import { Link } from "../router.tsx";
import { useApi } from "./ui.tsx";

/** How many typical requests the balance must cover not to be called low. */
export const LOW_BALANCE_REQUESTS = 100;
/** The tokens of a typical request. */
export const TYPICAL_REQUEST = { prompt_tokens: 1000, completion_tokens: 500 };

/** The credit a typical request costs on the priciest model (0 when all are free). */
export function typicalRequestCost(models: readonly Model[]): number {
  return Math.max(0, ...models.map((model) => costOf(model.pricing, TYPICAL_REQUEST)));
}

/** Whether a balance is low: zero, or under what `LOW_BALANCE_REQUESTS` typical requests cost. */
export function isLowBalance(balance: number, typicalCost: number): boolean {
  return balance <= 0 || balance < typicalCost * LOW_BALANCE_REQUESTS;
}

export function BalanceBanner() {
  const account = useApi<Account>("/api/account");
  const models = useApi<List<Model>>("/api/models");
  if (!account.data || !models.data) return null;
  const typical = typicalRequestCost(models.data.data);
  const { balance } = account.data;
  if (!isLowBalance(balance, typical)) return null;
  const empty = balance <= 0;
  return (
    <div className={empty ? "banner empty" : "banner low"} role="status" data-testid="balance-banner">
      <div>
        <strong>{empty ? "Your account has no credit." : "Your credit is running low."}</strong>{" "}
        {empty ? (
          <>Your balance is {formatCredits(0)}, so calls to the API are refused (429 insufficient_quota) until you add credit.</>
        ) : (
          <>
            Your balance is {formatCredits(balance)}: about {formatNumber(typical === 0 ? 0 : Math.floor(balance / typical))} typical requests.
          </>
        )}
      </div>
      <div className="banner-actions">
        <Link className="button small primary" to="/billing">
          Buy a plan
        </Link>
        <Link className="button small" to="/billing#redeem-code">
          Redeem a code
        </Link>
      </div>
    </div>
  );
}
