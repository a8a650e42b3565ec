/**
 * The tables, as Kysely sees them. Times are integer milliseconds since the epoch;
 * `null` in an optional time means "never" (not revoked, no expiry, not used yet).
 * Money and credit are integers in their smallest unit.
 */
import type { ColumnType } from "kysely";

export type ApiKeyTable = {
  id: string;
  name: string;
  /** The first characters of the key, shown so people can tell keys apart. Never enough to use it. */
  display_prefix: string;
  /** SHA-256 of the whole key, hex. The key itself is never stored. */
  key_hash: string;
  /** Owner account; null for the built-in operator account (not metered). */
  account_id: string | null;
  created_at: number;
  revoked_at: number | null;
  expires_at: number | null;
  last_used_at: number | null;
  /** Most credit this key may spend in total; null: no cap of its own. */
  spend_cap: number | null;
  /** Credit spent by settled requests. */
  spent: number;
  /** Credit held by requests still running. */
  reserved: number;
  /** Requests per minute; null: no limit of its own. */
  rpm: number | null;
  /** Tokens per minute; null: no limit of its own. */
  tpm: number | null;
  /** JSON array of model ids the key may use; null: every model its account may use. */
  models: string | null;
  /** What the key may reach: 'inference' (/v1), 'account' (also the account's /api), 'admin' (also admin routes). */
  scope: "inference" | "account" | "admin";
  /** The key that created this one over /api; null when a session or the CLI did. */
  parent_key_id: string | null;
};

export type AccountTable = {
  id: string;
  email: string;
  /** scrypt hash (`scrypt$N$r$p$salt$hash`); null: the account cannot sign in. */
  password_hash: string | null;
  role: "admin" | "user";
  /** Spendable credit: grants minus charges minus expiries minus running holds. Never negative. */
  balance: number;
  /** The plan granted last; its limits apply to the account. */
  plan_id: string | null;
  created_at: number;
  disabled_at: number | null;
};

export type PlanTable = {
  id: string;
  name: string;
  price_amount: number;
  price_currency: string;
  credit: number;
  /** Days the credit lasts; null: forever. */
  days: number | null;
  rpm: number | null;
  tpm: number | null;
  /** JSON array of model ids; null: every model. */
  models: string | null;
  /** The accounts' share of a saturated model relative to others' (1: an ordinary share). */
  weight: ColumnType<number, number | undefined, number>;
  /** JSON object: each allowed service tier's price multiplier (`{"default":1,"flex":0.5}`); null: `default` alone at 1. */
  service_tiers: ColumnType<string | null, string | null | undefined, string | null>;
  /** `config` (from the operator's file) or `admin` (made through the API). */
  origin: string;
  created_at: number;
  updated_at: number;
};

/** Credit granted at once (a purchase, a code, an admin grant), spent oldest-expiring first. */
export type CreditLotTable = {
  id: string;
  account_id: string;
  plan_id: string | null;
  granted: number;
  /** Not yet charged or expired; includes credit held by running requests. */
  remaining: number;
  expires_at: number | null;
  /** What granted it, unique: `checkout:<Stripe session id>` (`stripe:<event id>` before 0007), `code:<hash>`, `admin:<id>`. Makes grants idempotent. */
  source: string;
  created_at: number;
};

export type LedgerEntryKind = "grant" | "hold" | "release" | "settle" | "expiry" | "refund";

/** Append-only. An account's balance is the sum of its entries' amounts. */
export type LedgerEntryTable = {
  id: string;
  account_id: string;
  kind: LedgerEntryKind;
  /** Signed: grants and releases add, holds, charges, expiries and refunds (credit a refunded purchase gave back) subtract. */
  amount: number;
  lot_id: string | null;
  hold_id: string | null;
  created_at: number;
};

export type HoldTable = {
  id: string;
  account_id: string;
  key_id: string | null;
  /** Credit reserved: the request's worst case. */
  amount: number;
  status: "active" | "settled" | "released";
  /** Charged at settlement. */
  cost: number | null;
  /** The node that placed it; holds of dead nodes are released. */
  node_id: string;
  expires_at: number;
  created_at: number;
  closed_at: number | null;
};

export type NodeTable = {
  id: string;
  hostname: string;
  pid: number;
  started_at: number;
  last_seen_at: number;
};

export type UsageRecordTable = {
  id: string;
  request_id: string;
  account_id: string | null;
  key_id: string | null;
  model: string;
  prompt_tokens: number;
  cached_prompt_tokens: number;
  completion_tokens: number;
  /** The part of `completion_tokens` spent on reasoning (0 by default). */
  reasoning_tokens: ColumnType<number, number | undefined, number>;
  /** Where the counts came from: `counted`, `upstream` or `estimated` (null: counted, before this was recorded). */
  usage_source: ColumnType<string | null, string | null | undefined, string | null>;
  cost: number;
  latency_ms: number;
  /** HTTP status of the response (200 also for streams that ended in an error event). */
  status: number;
  finish_reason: string | null;
  stream: number;
  created_at: number;
  /** The hold (credit lease) it was charged against; null for free requests and older records. */
  hold_id: ColumnType<string | null, string | null | undefined, string | null>;
  /** The service tier it was served in (`default`, `flex`, `priority`); null: recorded before tiers (`default`). */
  service_tier: ColumnType<string | null, string | null | undefined, string | null>;
};

/**
 * A running request's progress, written every checkpoint interval while it generates: the
 * sweeper turns the checkpoints of a dead node's holds into usage records and charges them.
 * `id` is the usage record's id to be; the final record replaces it in one transaction.
 */
export type UsageCheckpointTable = {
  id: string;
  hold_id: string;
  request_id: string;
  account_id: string | null;
  key_id: string | null;
  model: string;
  prompt_tokens: number;
  cached_prompt_tokens: number;
  completion_tokens: number;
  reasoning_tokens: number;
  usage_source: string | null;
  cost: number;
  stream: number;
  created_at: number;
  updated_at: number;
  /** The service tier it is served in; null: written before tiers. */
  service_tier: string | null;
};

export type RedemptionCodeTable = {
  /** SHA-256 of the code, hex; the code itself is printed once. */
  code_hash: string;
  plan_id: string;
  created_at: number;
  redeemed_at: number | null;
  redeemed_by: string | null;
  /** The code's first characters, for telling codes apart; never enough to redeem one. */
  display_prefix: string | null;
};

/** A console session. The token lives only in the browser's cookie; this row holds its hash. */
export type SessionTable = {
  /** SHA-256 of the session token, hex. */
  token_hash: string;
  account_id: string;
  created_at: number;
  expires_at: number;
};

export type InstallationClaimTable = {
  /** What was claimed, once per installation (e.g. `first_admin`). */
  name: string;
  account_id: string;
  created_at: number;
};

/** A Stripe Checkout session Turnpike started: what it sells, at what price, and whether it was granted. */
export type CheckoutSessionTable = {
  /** Stripe's session id (`cs_…`). */
  id: string;
  account_id: string;
  plan_id: string;
  /** The price charged, in the currency's minor unit, as recorded when the session was made. */
  amount: number;
  /** Lowercase ISO code. */
  currency: string;
  /** Credit units the session grants once paid, and for how many days (null: no expiry). */
  credit: number;
  days: number | null;
  /**
   * `open` (not paid yet), `granted`, `refused` (paid, but the payment did not match or could not
   * be granted), `expired` (Stripe said it expired unpaid), `pending` (completed, its payment still
   * clearing) or `failed` (that payment failed). Only `open` sessions are handed out again.
   */
  status: "open" | "granted" | "refused" | "expired" | "pending" | "failed";
  /** The Stripe event (`evt_…`) that granted or refused it. */
  event_id: string | null;
  created_at: number;
  /** When it was granted or refused. */
  closed_at: number | null;
  /** The payment intent (`pi_…`) that paid it, which refunds and disputes name; null until paid (or paid before 0010). */
  payment_intent: ColumnType<string | null, string | null | undefined, string | null>;
  /** The Checkout URL Stripe gave it, handed out again while it is open; null before 0010. */
  url: ColumnType<string | null, string | null | undefined, string | null>;
};

/**
 * Credit taken back from a purchase because its payment was refunded or disputed: one row per
 * refund event or per dispute, in the transaction that wrote its ledger entry.
 */
export type CheckoutReversalTable = {
  /** What makes it happen once: `refund:<event id>` or `dispute:<dispute id>`. */
  id: string;
  /** The Checkout session whose purchase it reverses. */
  session_id: string;
  account_id: string;
  kind: "refund" | "dispute";
  /** The Stripe event (`evt_…`) that reversed it. */
  event_id: string;
  /** Money: the charge's refunded amount so far (refund) or the disputed amount, in the currency's minor unit. */
  amount: number;
  /** Credit units this reversal accounts for: the purchase's credit in proportion to `amount`. */
  share: number;
  /** Credit units taken back (at most what was unspent). */
  taken: number;
  /** Credit units of the share spent already (`share - taken`), reported to the operator. */
  spent: number;
  /** The ledger entry (kind `refund`) that took `taken` back. */
  entry_id: string;
  created_at: number;
};

/** A Responses API status: `queued` and `in_progress` only for background responses still running. */
export type StoredResponseStatus = "queued" | "in_progress" | "completed" | "incomplete" | "failed" | "cancelled";

/**
 * A stored response of the Responses API (`responses/store.ts`): what its request added to the
 * conversation and the response resource as `GET /v1/responses/{id}` returns it, both JSON text.
 */
export type ResponseTable = {
  /** `resp_…` */
  id: string;
  /** Owner account; null for the operator's keys. Another account never sees the row. */
  account_id: string | null;
  key_id: string | null;
  model: string;
  status: StoredResponseStatus;
  created_at: number;
  updated_at: number;
  /** `created_at` + the retention setting: the sweeper deletes the row then, and reads ignore it from then on. */
  expires_at: number;
  /** The response this one continues; null: the first of its conversation. */
  previous_response_id: string | null;
  /** 1: runs without a client (`background: true`); 0 otherwise. */
  background: number;
  /** 1: `POST /v1/responses/{id}/cancel` asked the node running it to stop; 0 otherwise. */
  cancel_requested: ColumnType<number, number | undefined, number>;
  /** UTF-8 bytes of `input_items` plus `response` (capped by `MAX_STORED_RESPONSE_BYTES`). */
  size_bytes: number;
  /** JSON array: the items this response's request added (each with its `id`), in input order. */
  input_items: string;
  /** JSON object: the response resource. */
  response: string;
};

export type Database = {
  installation_claims: InstallationClaimTable;
  api_keys: ApiKeyTable;
  accounts: AccountTable;
  plans: PlanTable;
  credit_lots: CreditLotTable;
  ledger_entries: LedgerEntryTable;
  holds: HoldTable;
  nodes: NodeTable;
  usage_records: UsageRecordTable;
  usage_checkpoints: UsageCheckpointTable;
  redemption_codes: RedemptionCodeTable;
  sessions: SessionTable;
  checkout_sessions: CheckoutSessionTable;
  checkout_reversals: CheckoutReversalTable;
  responses: ResponseTable;
};
