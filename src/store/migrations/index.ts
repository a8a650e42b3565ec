/**
 * Versioned migrations, applied in name order at start and by `turnpike migrate`.
 * Each is written with Kysely's schema builder so it runs on SQLite and PostgreSQL alike.
 */
import type { Migration } from "kysely/migration";
import { migration0001ApiKeys } from "./0001-api-keys.ts";
import { migration0002AccountsAndBilling } from "./0002-accounts-and-billing.ts";
import { migration0003RedemptionCodeDisplay } from "./0003-redemption-code-display.ts";
import { migration0004Sessions } from "./0004-sessions.ts";
import { migration0005InstallationClaims } from "./0005-installation-claims.ts";
import { migration0006KeyScopes } from "./0006-key-scopes.ts";
import { migration0007CheckoutSessions } from "./0007-checkout-sessions.ts";
import { migration0008UsageSource } from "./0008-usage-source.ts";
import { migration0009UsageCheckpoints } from "./0009-usage-checkpoints.ts";
import { migration0010CheckoutReversals } from "./0010-checkout-reversals.ts";
import { migration0011KeyListingIndex } from "./0011-key-listing-index.ts";
import { migration0012Responses } from "./0012-responses.ts";
import { migration0013ResponsesRunningIndex } from "./0013-responses-running-index.ts";
import { migration0014PlanTiers } from "./0014-plan-tiers.ts";
import { migration0015ChangeNotifications } from "./0015-change-notifications.ts";

export const migrations: Record<string, Migration> = {
  "0001-api-keys": migration0001ApiKeys,
  "0002-accounts-and-billing": migration0002AccountsAndBilling,
  "0003-redemption-code-display": migration0003RedemptionCodeDisplay,
  "0004-sessions": migration0004Sessions,
  "0005-installation-claims": migration0005InstallationClaims,
  "0006-key-scopes": migration0006KeyScopes,
  "0007-checkout-sessions": migration0007CheckoutSessions,
  "0008-usage-source": migration0008UsageSource,
  "0009-usage-checkpoints": migration0009UsageCheckpoints,
  "0010-checkout-reversals": migration0010CheckoutReversals,
  "0011-key-listing-index": migration0011KeyListingIndex,
  "0012-responses": migration0012Responses,
  "0013-responses-running-index": migration0013ResponsesRunningIndex,
  "0014-plan-tiers": migration0014PlanTiers,
  "0015-change-notifications": migration0015ChangeNotifications,
};
