/**
 * The wire shapes of the account API (`/api`), as zod schemas (the OpenAPI document shows them;
 * the contract test checks real answers against them) and the types the server's routes and the
 * web console use (the console imports only the types, so no zod reaches its bundle). The request
 * schemas are in `account-api-requests.ts`. Credit and prices are integer credit units. Every time
 * is an integer count of seconds since the epoch, as in OpenAI's objects (`created`, `last_used`,
 * `expires`, `revoked`, `disabled`, `credit_expires`, `redeemed`, usage's `from` and `to`);
 * durations carry their unit in their name (`latency_ms`). Money is an exact decimal string in the
 * currency's major unit (`cost_money`), present only when the server has a `credit_value`.
 */
import { z } from "zod";

const seconds = () => z.number().int();
const credits = () => z.number().int();

export type ListOf<T> = { object: "list"; data: T[] };

/** `{object: "list", data}` of `item`. */
export function listSchemaOf<Item extends z.ZodType>(item: Item) {
  return z.object({ object: z.literal("list"), data: z.array(item) });
}

/** `{object: "list", data, has_more}` of `item`: a page of a list, the next one asked for with a cursor. */
export function pageSchemaOf<Item extends z.ZodType>(item: Item) {
  return z.object({ object: z.literal("list"), data: z.array(item), has_more: z.boolean() });
}

/** A page of a list (`pageSchemaOf`). */
export type PageOf<T> = { object: "list"; data: T[]; has_more: boolean };

export const roleSchema = z.enum(["admin", "user"]);

/** `POST /api/auth/signin|signup`, `GET /api/auth/session`. */
export const sessionObjectSchema = z.object({
  id: z.string(),
  email: z.string(),
  role: roleSchema,
  /** Send it as `x-csrf-token` on state-changing calls. */
  csrf_token: z.string().describe("Send it as `x-csrf-token` on state-changing calls."),
});
export type SessionObject = z.infer<typeof sessionObjectSchema>;

/** `POST /api/auth/signout`. */
export const signedOutSchema = z.object({ signed_out: z.literal(true) });
export type SignedOut = z.infer<typeof signedOutSchema>;

/** `GET /api/auth/setup`: what the sign-up page should ask for. */
export const authSetupObjectSchema = z.object({
  object: z.literal("auth_setup"),
  /** `--signup`: closed lets only the first admin sign up. */
  signup: z.enum(["open", "closed"]),
  /** No admin exists yet: signing up with the setup code `turnpike serve` printed makes the admin. */
  setup_required: z.boolean(),
});
export type AuthSetupObject = z.infer<typeof authSetupObjectSchema>;

export const planObjectSchema = z.object({
  id: z.string(),
  name: z.string(),
  /** `amount` in the currency's minor unit (cents for USD). */
  price: z.object({ amount: z.number().int().describe("In the currency's minor unit (cents for USD)."), currency: z.string() }),
  /** Credit units granted per purchase. */
  credit: credits().describe("Credit units granted per purchase."),
  /** Days the credit lasts; null: forever. */
  days: z.number().int().nullable().describe("Days the credit lasts; null: forever."),
  rpm: z.number().int().nullable(),
  tpm: z.number().int().nullable(),
  /** Model ids the plan may use; null: every model. */
  models: z.array(z.string()).nullable().describe("Model ids the plan may use; null: every model."),
  /** The accounts' share of a saturated model relative to others' (1: an ordinary share). */
  weight: z.number().describe("The accounts' share of a saturated model relative to other accounts' (1: an ordinary share)."),
  /** Each service tier the plan allows, with its price multiplier; a tier absent is not allowed. */
  service_tiers: z
    .object({ priority: z.number().optional(), default: z.number().optional(), flex: z.number().optional() })
    .describe("Each service tier the plan allows, with its price multiplier (1: the model's prices); a tier absent is not allowed."),
});
export type PlanObject = z.infer<typeof planObjectSchema>;

/** A plan as `/api/plans` and the plan routes answer it: with `object`. */
export const planListingSchema = planObjectSchema.extend({ object: z.literal("plan") });
export type PlanListing = z.infer<typeof planListingSchema>;

/** `GET /api/admin/plans`: where each plan came from. */
export const adminPlanSchema = planListingSchema.extend({ origin: z.enum(["config", "admin"]), created: seconds(), updated: seconds() });
export type AdminPlan = z.infer<typeof adminPlanSchema>;

/** `GET /api/account`, and admin views of an account. */
export const accountObjectSchema = z.object({
  id: z.string(),
  email: z.string(),
  role: roleSchema,
  /** Spendable credit units (running holds excluded). */
  balance: credits().describe("Spendable credit units (running holds excluded)."),
  /** The plan granted last, or null. */
  plan: planObjectSchema.nullable(),
  /** When the last of the credit expires; null: none expires (or none left). */
  credit_expires: seconds().nullable(),
  created: seconds(),
  /** When the account was disabled, or null when it is active. */
  disabled: seconds().nullable(),
});
export type AccountObject = z.infer<typeof accountObjectSchema>;

/** `POST /api/admin/accounts/{id}/grant`: the account after the grant. */
export const grantedAccountSchema = accountObjectSchema.extend({ granted: z.boolean() });
export type GrantedAccount = z.infer<typeof grantedAccountSchema>;

/** One account of `GET /api/admin/accounts`. */
export const adminAccountSchema = z.object({
  id: z.string(),
  email: z.string(),
  role: roleSchema,
  balance: credits(),
  /** The plan granted last; only `{id, name}` when that plan is no longer on offer. */
  plan: z.union([planObjectSchema, z.object({ id: z.string(), name: z.string() })]).nullable(),
  /** Keys not revoked (expired ones included). */
  active_keys: z.number().int(),
  created: seconds(),
  disabled: seconds().nullable(),
});
export type AdminAccount = z.infer<typeof adminAccountSchema>;

/** What a key may reach, narrowest first. */
export const keyScopeSchema = z.enum(["inference", "account", "admin"]);
export type KeyScope = z.infer<typeof keyScopeSchema>;

/** A key as `/api` shows it: never the key itself. */
export const apiKeyObjectSchema = z.object({
  id: z.string(),
  object: z.literal("api_key"),
  name: z.string(),
  /** The first characters of the key, to tell keys apart. */
  display_prefix: z.string(),
  account_id: z.string().nullable(),
  /** Admin listings only. */
  account_email: z.string().nullable().optional(),
  created: seconds(),
  last_used: seconds().nullable(),
  expires: seconds().nullable(),
  revoked: seconds().nullable(),
  status: z.enum(["active", "revoked", "expired"]),
  /** 'inference': `/v1` only; 'account': also the account's own `/api`; 'admin': also the admin routes. */
  scope: keyScopeSchema,
  /** The key that created this one over `/api` (it works only while that one does); null: a session or the CLI made it. */
  parent_key_id: z.string().nullable(),
  /** Model ids the key may use; null: every model its account may use. */
  models: z.array(z.string()).nullable(),
  /** Most credit units the key may spend; null: no cap of its own. */
  spend_cap: credits().nullable(),
  /** Credit units spent so far. */
  spent: credits(),
  rpm: z.number().int().nullable(),
  tpm: z.number().int().nullable(),
});
export type ApiKeyObject = z.infer<typeof apiKeyObjectSchema>;

/** `GET /api/admin/keys`: every key with its owner's email (null: an operator key). */
export const adminApiKeyObjectSchema = apiKeyObjectSchema.extend({ account_email: z.string().nullable() });
export type AdminApiKeyObject = z.infer<typeof adminApiKeyObjectSchema>;

/** `POST /api/keys`: the key, shown this once. */
export const createdApiKeyObjectSchema = apiKeyObjectSchema.extend({ key: z.string() });
export type CreatedApiKeyObject = z.infer<typeof createdApiKeyObjectSchema>;

/** `cost` (credits) also in money: only when the server has a `credit_value`. */
const costMoney = z.string().optional().describe("`cost` in the response's `currency`, an exact decimal string; only when the server has a credit value.");
/** The currency of the rows' `cost_money`: only when the server has a `credit_value`. */
const responseCurrency = z.string().optional().describe("The currency of `cost_money` (ISO 4217, lower case); only when the server has a credit value.");

/** One group of `GET /api/usage`. */
export const usageRowSchema = z.object({
  /** The day (YYYY-MM-DD, UTC), the model id or the key id. */
  group: z.string().describe("The day (YYYY-MM-DD, UTC), the model id or the key id."),
  requests: z.number().int(),
  prompt_tokens: z.number().int(),
  cached_prompt_tokens: z.number().int(),
  completion_tokens: z.number().int(),
  /** Credit units charged. */
  cost: credits().describe("Credit units charged."),
  cost_money: costMoney,
});
export type UsageRow = z.infer<typeof usageRowSchema>;

/** `GET /api/usage`. */
export const usageResponseSchema = z.object({
  object: z.literal("list"),
  group_by: z.enum(["day", "model", "key"]),
  from: seconds(),
  to: seconds(),
  currency: responseCurrency,
  data: z.array(usageRowSchema),
});
export type UsageResponse = z.infer<typeof usageResponseSchema>;

/** One request of `GET /api/usage/requests`. */
export const recentRequestSchema = z.object({
  id: z.string(),
  request_id: z.string(),
  /** Seconds since the epoch. Page with `after=<id>` of the last request. */
  created: seconds(),
  key_id: z.string().nullable(),
  key_name: z.string().nullable(),
  model: z.string(),
  prompt_tokens: z.number().int(),
  cached_prompt_tokens: z.number().int(),
  completion_tokens: z.number().int(),
  cost: credits(),
  cost_money: costMoney,
  latency_ms: z.number().int(),
  /** HTTP status of the response (200 also for streams that ended in an error event). */
  status: z.number().int(),
  finish_reason: z.string().nullable(),
  stream: z.boolean(),
  /** The service tier that served it: `default`, `flex` or `priority`. */
  service_tier: z.string(),
});
export type RecentRequest = z.infer<typeof recentRequestSchema>;

/** `GET /api/usage/requests`. */
export const recentRequestsResponseSchema = z.object({
  object: z.literal("list"),
  currency: responseCurrency,
  data: z.array(recentRequestSchema),
  has_more: z.boolean(),
});
export type RecentRequestsResponse = z.infer<typeof recentRequestsResponseSchema>;

/** `POST /api/billing/redeem`. */
export const redeemResponseSchema = z.object({
  granted: z.literal(true),
  plan: planListingSchema,
  balance: credits(),
  credit_expires: seconds().nullable(),
});
export type RedeemResponse = z.infer<typeof redeemResponseSchema>;

/** `POST /api/billing/checkout`: the Checkout session to send the buyer to. */
export const checkoutSessionSchema = z.object({ id: z.string(), url: z.string() });
export type CheckoutSession = z.infer<typeof checkoutSessionSchema>;

/** `POST /api/billing/stripe/webhook`: `granted` when the event was a purchase. */
export const webhookReplySchema = z.object({ received: z.literal(true), granted: z.boolean().optional() });
export type WebhookReply = z.infer<typeof webhookReplySchema>;

/** One code of `GET /api/admin/codes` (never the code itself). */
export const adminCodeSchema = z.object({
  display_prefix: z.string(),
  plan: z.string(),
  created: seconds(),
  redeemed: seconds().nullable(),
  redeemed_by: z.string().nullable().describe("The account that redeemed it."),
});
export type AdminCode = z.infer<typeof adminCodeSchema>;

/** One code of `POST /api/admin/codes`, shown this once. */
export const createdCodeSchema = z.object({ code: z.string(), plan: z.string() });
export type CreatedCode = z.infer<typeof createdCodeSchema>;

/** The lists the `/api` operations answer (`{object: "list", data}`), one object each so the OpenAPI document names each once. */
export const apiKeyListSchema = pageSchemaOf(apiKeyObjectSchema);
export const adminApiKeyListSchema = pageSchemaOf(adminApiKeyObjectSchema);
export const planListSchema = listSchemaOf(planListingSchema);
export const adminPlanListSchema = listSchemaOf(adminPlanSchema);
export const adminAccountListSchema = listSchemaOf(adminAccountSchema);
export const adminCodeListSchema = listSchemaOf(adminCodeSchema);
export const createdCodeListSchema = listSchemaOf(createdCodeSchema);
