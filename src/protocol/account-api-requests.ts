/**
 * The request schemas of the account API (`/api`): bodies and query strings, validated by the
 * routes with `parseWithSchema` and read by the OpenAPI generator. Their response shapes are
 * the types in `account-api.ts`. Every time is seconds since the epoch (an ISO 8601 date is
 * taken too where a query names a time); query schemas turn times into milliseconds for the
 * server's own use.
 */
import { z } from "zod";
import { MAX_CREDIT } from "./money-bounds.ts";
import { planSchema } from "./plans.ts";

/** Key scopes, narrowest first (the values of `ApiKeyObject.scope`). */
export const KEY_SCOPES = ["inference", "account", "admin"] as const;

/** `POST /api/auth/signin`. */
export const signInRequestSchema = z.object({
  email: z.string().max(254),
  password: z.string().min(1).max(1024),
});

/** `POST /api/auth/signup`. */
export const signUpRequestSchema = signInRequestSchema.extend({
  password: z.string().min(8, "must have at least 8 characters").max(1024),
  /** The setup code `turnpike serve` printed, to become the first admin. */
  setup_code: z.string().max(64).optional(),
});

const positive = z.number().int().min(1).max(Number.MAX_SAFE_INTEGER);
/** Spend caps are credit: bounded like balances. */
const creditCap = z.number().int().min(1).max(MAX_CREDIT, `at most ${MAX_CREDIT} credit units`);

/** `POST /api/keys`. */
export const createKeyRequestSchema = z.object({
  name: z.string().trim().min(1, "give the key a name").max(100),
  /** What the key may reach; default 'account'. */
  scope: z.enum(KEY_SCOPES).optional(),
  /** Seconds since the epoch; null or absent: the key does not expire. */
  expires_at: z.number().int().positive().nullable().optional(),
  models: z.array(z.string().min(1)).max(100).nullable().optional(),
  spend_cap: creditCap.nullable().optional(),
  rpm: positive.nullable().optional(),
  tpm: positive.nullable().optional(),
});

/** `POST /api/admin/accounts/{id}/grant`. */
export const grantPlanRequestSchema = z.object({ plan: z.string().min(1).max(200) });

/** `POST /api/billing/redeem`. */
export const redeemRequestSchema = z.object({ code: z.string().min(1).max(100) });

/** `POST /api/billing/checkout`: the plan to buy. */
export const checkoutRequestSchema = z.object({ plan: z.string().min(1).max(200) });

/** `POST /api/admin/codes`. */
export const createCodesRequestSchema = z.object({ plan: z.string().min(1), count: z.number().int().min(1).max(1000).default(1) });

/** `POST /api/admin/plans`: a whole plan. */
export const createPlanRequestSchema = planSchema;

/** `PATCH /api/admin/plans/{id}`: the fields to change. */
export const editPlanRequestSchema = planSchema.omit({ id: true }).partial();

/** A time in a query: seconds since the epoch or an ISO 8601 date (`2026-11-01` or with a time); parsed to milliseconds. */
const timeQuerySchema = z.union([
  z
    .string()
    .regex(/^\d{1,12}$/)
    .transform((seconds) => Number(seconds) * 1000),
  z
    .string()
    .refine((value) => /^\d{4}-\d{2}-\d{2}/.test(value) && !Number.isNaN(Date.parse(value)), "must be seconds since the epoch or an ISO 8601 date")
    .transform((value) => Date.parse(value)),
]);

/** A page size in a query: a whole number from 1 to `max`, `fallback` when absent. */
function pageLimitSchema(max: number, fallback: number) {
  return z.string().regex(/^\d+$/, "must be a whole number").transform(Number).pipe(z.number().int().min(1).max(max)).default(fallback);
}

/** `GET /api/usage`: sums over `[from, to)` (default the last 30 days). */
export const usageQuerySchema = z.object({
  from: timeQuerySchema.optional(),
  to: timeQuerySchema.optional(),
  group_by: z.enum(["day", "model", "key"]).default("day"),
  /** Admins: an account id, `operator` or `all`. */
  account: z.string().min(1).optional(),
});

/** `GET /api/usage/requests`: the newest first, paged with `after` (the id of the last request of the previous page). */
export const recentRequestsQuerySchema = z.object({
  limit: pageLimitSchema(500, 50),
  /** Only requests made before this time. */
  before: timeQuerySchema.optional(),
  /** The id of the last request of the previous page: the page starts after it. */
  after: z.string().min(1).max(100).optional(),
  account: z.string().min(1).optional(),
});

/** `GET /api/usage/export`: the requests in `[from, to)` as CSV (default the last 30 days; at most `MAX_EXPORT_DAYS`). */
export const usageExportQuerySchema = z.object({
  from: timeQuerySchema.optional(),
  to: timeQuerySchema.optional(),
  /** Admins: an account id, `operator` or `all`. */
  account: z.string().min(1).max(100).optional(),
});

/** The longest range one usage export may cover, in days. */
export const MAX_EXPORT_DAYS = 366;

/** `GET /api/keys` and `GET /api/admin/keys`: the keys newest first, paged with `after` (the id of the last key of the previous page). */
export const keyListQuerySchema = z.object({
  limit: pageLimitSchema(200, 50),
  /** The id of the last key of the previous page: the page starts after it. */
  after: z.string().min(1).max(100).optional(),
});

/** `GET /api/billing/history`: the account's ledger entries newest first, paged with `before` (the id of the last entry of the previous page). */
export const billingHistoryQuerySchema = z.object({
  limit: pageLimitSchema(100, 20),
  before: z.string().min(1).max(100).optional(),
  /** Admins: the account whose history to read. */
  account_id: z.string().min(1).max(100).optional(),
});
