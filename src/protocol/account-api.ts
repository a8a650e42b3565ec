/**
 * The wire shapes of the account API (`/api`), shared by the server's routes and the web
 * console (which imports these types). Dependency-free on purpose; the request schemas are in
 * `account-api-requests.ts`. Credit and prices are integer credit units. Every time is an
 * integer count of seconds since the epoch, as in OpenAI's objects (`created`, `last_used`,
 * `expires`, `revoked`, `disabled`, `credit_expires`, `redeemed`, usage's `from` and `to`);
 * durations carry their unit in their name (`latency_ms`).
 */

export type ListOf<T> = { object: "list"; data: T[] };

/** `POST /api/auth/signin|signup`, `GET /api/auth/session`. */
export type SessionObject = { id: string; email: string; role: "admin" | "user"; csrf_token: string };

/** `GET /api/auth/setup`: what the sign-up page should ask for. */
export type AuthSetupObject = {
  object: "auth_setup";
  /** `--signup`: closed lets only the first admin sign up. */
  signup: "open" | "closed";
  /** No admin exists yet: signing up with the setup code `turnpike serve` printed makes the admin. */
  setup_required: boolean;
};

export type PlanObject = {
  id: string;
  name: string;
  /** `amount` in the currency's minor unit (cents for USD). */
  price: { amount: number; currency: string };
  /** Credit units granted per purchase. */
  credit: number;
  /** Days the credit lasts; null: forever. */
  days: number | null;
  rpm: number | null;
  tpm: number | null;
  /** Model ids the plan may use; null: every model. */
  models: string[] | null;
};

/** `GET /api/account`, and admin views of an account. */
export type AccountObject = {
  id: string;
  email: string;
  role: "admin" | "user";
  /** Spendable credit units (running holds excluded). */
  balance: number;
  /** The plan granted last, or null. */
  plan: PlanObject | null;
  /** When the last of the credit expires; null: none expires (or none left). */
  credit_expires: number | null;
  created: number;
  /** When the account was disabled, or null when it is active. */
  disabled: number | null;
};

/** What a key may reach, narrowest first. */
export type KeyScope = "inference" | "account" | "admin";

/** A key as `/api` shows it: never the key itself. */
export type ApiKeyObject = {
  id: string;
  object: "api_key";
  name: string;
  /** The first characters of the key, to tell keys apart. */
  display_prefix: string;
  account_id: string | null;
  /** Admin listings only. */
  account_email?: string | null;
  created: number;
  last_used: number | null;
  expires: number | null;
  revoked: number | null;
  status: "active" | "revoked" | "expired";
  /** 'inference': `/v1` only; 'account': also the account's own `/api`; 'admin': also the admin routes. */
  scope: KeyScope;
  /** The key that created this one over `/api` (it works only while that one does); null: a session or the CLI made it. */
  parent_key_id: string | null;
  /** Model ids the key may use; null: every model its account may use. */
  models: string[] | null;
  /** Most credit units the key may spend; null: no cap of its own. */
  spend_cap: number | null;
  /** Credit units spent so far. */
  spent: number;
  rpm: number | null;
  tpm: number | null;
};

/** `POST /api/keys`: the key, shown this once. */
export type CreatedApiKeyObject = ApiKeyObject & { key: string };

/** One group of `GET /api/usage`. */
export type UsageRow = {
  /** The day (YYYY-MM-DD, UTC), the model id or the key id. */
  group: string;
  requests: number;
  prompt_tokens: number;
  cached_prompt_tokens: number;
  completion_tokens: number;
  /** Credit units charged. */
  cost: number;
};

/** One request of `GET /api/usage/requests`. */
export type RecentRequest = {
  id: string;
  request_id: string;
  /** Seconds since the epoch. Page with `after=<id>` of the last request. */
  created: number;
  key_id: string | null;
  key_name: string | null;
  model: string;
  prompt_tokens: number;
  cached_prompt_tokens: number;
  completion_tokens: number;
  cost: number;
  latency_ms: number;
  /** HTTP status of the response (200 also for streams that ended in an error event). */
  status: number;
  finish_reason: string | null;
  stream: boolean;
};
