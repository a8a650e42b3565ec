/**
 * Plans and redemption: `GET /api/plans` (on offer), `POST /api/billing/redeem`, and the admin
 * API the console uses: `GET|POST /api/admin/plans`, `PATCH /api/admin/plans/:id`,
 * `GET|POST /api/admin/codes`.
 */
import type { FastifyInstance, preHandlerHookHandler } from "fastify";
import type { Kysely } from "kysely";
import type { Database } from "../../../store/schema.ts";
import type { Plan } from "../../../protocol/plans.ts";
import { findPlan, listPlans, savePlan } from "../../../billing/plans-store.ts";
import { createCodes, listCodes, redeemCode } from "../../../billing/codes.ts";
import { describeAccount } from "../../../accounts/describe-account.ts";
import { PlanExistsError, PlanNotFoundError } from "../../../billing/errors.ts";
import { createCodesRequestSchema, createPlanRequestSchema, editPlanRequestSchema, redeemRequestSchema } from "../../../protocol/account-api-requests.ts";
import { accountIdOf } from "../../middleware/account-auth/account-auth.ts";
import {
  adminCodeListSchema,
  adminCodeSchema,
  adminPlanListSchema,
  adminPlanSchema,
  createdCodeListSchema,
  createdCodeSchema,
  planListingSchema,
  planListSchema,
  planObjectSchema,
  redeemResponseSchema,
  type AdminCode,
  type AdminPlan,
  type CreatedCode,
  type ListOf,
  type PlanListing,
  type RedeemResponse,
} from "../../../protocol/account-api.ts";
import { defineOperation, registerOperations } from "../../operation.ts";

export type BillingRouteOptions = {
  database: Kysely<Database>;
  authenticate: preHandlerHookHandler;
  /** Called after plans change, so this node's cached list follows at once. */
  onPlansChanged: () => Promise<void>;
};


function planBody(plan: Plan): PlanListing {
  return { object: "plan", ...plan };
}

export const plansOnOfferOperation = defineOperation({
  method: "get",
  path: "/api/plans",
  tag: "Billing",
  summary: "The plans on offer.",
  auth: "account",
  success: { status: 200, description: "A list of `plan` objects." },
  response: planListSchema,
  errors: [],
  schemas: { PlanTerms: planObjectSchema, Plan: planListingSchema, PlanList: planListSchema },
  async handler(_call, { database }: BillingRouteOptions): Promise<ListOf<PlanListing>> {
    return { object: "list", data: (await listPlans(database)).map(planBody) };
  },
});

export const redeemOperation = defineOperation({
  method: "post",
  path: "/api/billing/redeem",
  tag: "Billing",
  summary: "Redeem a code: grants its plan once.",
  auth: "account",
  body: redeemRequestSchema,
  example: { code: "TP-ABCD-EFGH-JKLM" },
  success: { status: 200, description: "`{granted, plan, balance, credit_expires}`." },
  response: redeemResponseSchema,
  errors: ["account_required", "code_not_found", "code_already_redeemed", "plan_not_found", "plan_out_of_bounds", "balance_limit_exceeded"],
  schemas: { RedeemRequest: redeemRequestSchema, RedeemResult: redeemResponseSchema },
  async handler({ request, body }, { database }: BillingRouteOptions): Promise<RedeemResponse> {
    const accountId = accountIdOf(request, "Redeeming a code");
    const { code } = body();
    const { plan } = await redeemCode(database, { code, accountId });
    request.log.info({ account_id: accountId, plan: plan.id }, "code redeemed");
    const account = await describeAccount(database, accountId);
    return { granted: true, plan: planBody(plan), balance: account.balance, credit_expires: account.credit_expires };
  },
});

export const adminPlansOperation = defineOperation({
  method: "get",
  path: "/api/admin/plans",
  tag: "Admin",
  summary: "Every plan, with where it came from (config or admin).",
  auth: "admin",
  success: { status: 200, description: "A list of `plan` objects with `origin`, `created`, `updated` (seconds)." },
  response: adminPlanListSchema,
  errors: [],
  schemas: { AdminPlan: adminPlanSchema, AdminPlanList: adminPlanListSchema },
  async handler(_call, { database }: BillingRouteOptions): Promise<ListOf<AdminPlan>> {
    const rows = await database.selectFrom("plans").select(["id", "origin", "created_at", "updated_at"]).execute();
    const meta = new Map(rows.map((row) => [row.id, row]));
    return {
      object: "list",
      data: (await listPlans(database)).map((plan) => ({
        ...planBody(plan),
        origin: meta.get(plan.id)?.origin === "config" ? "config" : "admin",
        created: Math.floor(Number(meta.get(plan.id)?.created_at ?? 0) / 1000),
        updated: Math.floor(Number(meta.get(plan.id)?.updated_at ?? 0) / 1000),
      })),
    };
  },
});

export const createPlanOperation = defineOperation({
  method: "post",
  path: "/api/admin/plans",
  tag: "Admin",
  summary: "Create a plan.",
  auth: "admin",
  body: createPlanRequestSchema,
  example: { id: "starter", name: "Starter", price: { amount: 500, currency: "usd" }, credit: 5_000_000, days: 30, rpm: 60, tpm: 100_000, models: null },
  success: { status: 201, description: "The `plan` object." },
  response: planListingSchema,
  errors: ["plan_exists"],
  schemas: { CreatePlanRequest: createPlanRequestSchema, Plan: planListingSchema },
  async handler({ request, body }, options: BillingRouteOptions): Promise<PlanListing> {
    const plan = body();
    if ((await findPlan(options.database, plan.id)) !== undefined) throw new PlanExistsError(plan.id);
    await savePlan(options.database, plan, "admin");
    await options.onPlansChanged();
    request.log.info({ plan: plan.id }, "plan created");
    return planBody(plan);
  },
});

export const editPlanOperation = defineOperation({
  method: "patch",
  path: "/api/admin/plans/{id}",
  tag: "Admin",
  summary: "Change some fields of a plan.",
  auth: "admin",
  body: editPlanRequestSchema,
  example: { credit: 6_000_000, rpm: 120 },
  success: { status: 200, description: "The `plan` object." },
  response: planListingSchema,
  errors: ["plan_not_found"],
  schemas: { EditPlanRequest: editPlanRequestSchema, Plan: planListingSchema },
  async handler({ request, params, body }, options: BillingRouteOptions): Promise<PlanListing> {
    const existing = await findPlan(options.database, params.id);
    if (existing === undefined) throw new PlanNotFoundError(params.id);
    const changes = body();
    // Only the fields sent change (the schema's defaults would fill the others in).
    const sent = new Set(Object.keys(request.body as object));
    const plan: Plan = { ...existing, ...Object.fromEntries(Object.entries(changes).filter(([field, value]) => sent.has(field) && value !== undefined)) };
    await savePlan(options.database, plan, "admin");
    await options.onPlansChanged();
    request.log.info({ plan: plan.id }, "plan edited");
    return planBody(plan);
  },
});

export const adminCodesOperation = defineOperation({
  method: "get",
  path: "/api/admin/codes",
  tag: "Admin",
  summary: "Redemption codes by display prefix, with who redeemed them when.",
  auth: "admin",
  success: { status: 200, description: "A list of codes; `created` and `redeemed` in seconds." },
  response: adminCodeListSchema,
  errors: [],
  schemas: { AdminCode: adminCodeSchema, AdminCodeList: adminCodeListSchema },
  async handler(_call, { database }: BillingRouteOptions): Promise<ListOf<AdminCode>> {
    const data = (await listCodes(database)).map((row) => ({
      display_prefix: row.displayPrefix,
      plan: row.planId,
      created: Math.floor(row.created / 1000),
      redeemed: row.redeemed === null ? null : Math.floor(row.redeemed / 1000),
      redeemed_by: row.redeemedBy,
    }));
    return { object: "list", data };
  },
});

export const createCodesOperation = defineOperation({
  method: "post",
  path: "/api/admin/codes",
  tag: "Admin",
  summary: "Make single-use redemption codes for a plan (shown once).",
  auth: "admin",
  body: createCodesRequestSchema,
  example: { plan: "starter", count: 10 },
  success: { status: 201, description: "A list of `{code, plan}`." },
  response: createdCodeListSchema,
  errors: ["plan_not_found", "plan_out_of_bounds"],
  schemas: { CreateCodesRequest: createCodesRequestSchema, CreatedCode: createdCodeSchema, CreatedCodeList: createdCodeListSchema },
  async handler({ request, body }, { database }: BillingRouteOptions): Promise<ListOf<CreatedCode>> {
    const { plan, count } = body();
    const codes = await createCodes(database, { planId: plan, count });
    request.log.info({ plan, count }, "redemption codes created");
    return { object: "list", data: codes.map((code) => ({ code, plan })) };
  },
});

/** The plans and codes on sale (tag Billing), and their administration (tag Admin), in the document's order. */
export const BILLING_OPERATIONS = [plansOnOfferOperation, redeemOperation];
export const ADMIN_PLAN_OPERATIONS = [adminPlansOperation, createPlanOperation, editPlanOperation, adminCodesOperation, createCodesOperation];

export function registerBillingRoutes(app: FastifyInstance, options: BillingRouteOptions): void {
  registerOperations(app, [...BILLING_OPERATIONS, ...ADMIN_PLAN_OPERATIONS], { context: options, authenticate: { account: options.authenticate } });
}
