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
import { parseWithSchema } from "../../../protocol/parse.ts";
import { createCodesRequestSchema, createPlanRequestSchema, editPlanRequestSchema, redeemRequestSchema } from "../../../protocol/account-api-requests.ts";
import { accountIdOf, requireAdmin } from "../../middleware/account-auth/account-auth.ts";
import type { AdminCode, AdminPlan, CreatedCode, ListOf, PlanListing, RedeemResponse } from "../../../protocol/account-api.ts";

export type BillingRouteOptions = {
  database: Kysely<Database>;
  authenticate: preHandlerHookHandler;
  /** Called after plans change, so this node's cached list follows at once. */
  onPlansChanged: () => Promise<void>;
};


function planBody(plan: Plan): PlanListing {
  return { object: "plan", ...plan };
}

export function registerBillingRoutes(app: FastifyInstance, options: BillingRouteOptions): void {
  const { database } = options;

  app.get("/api/plans", { preHandler: options.authenticate }, async function plansOnOffer(): Promise<ListOf<PlanListing>> {
    return { object: "list", data: (await listPlans(database)).map(planBody) };
  });

  app.post("/api/billing/redeem", { preHandler: options.authenticate }, async function redeem(request): Promise<RedeemResponse> {
    const accountId = accountIdOf(request, "Redeeming a code");
    const { code } = parseWithSchema(redeemRequestSchema, request.body);
    const { plan } = await redeemCode(database, { code, accountId });
    request.log.info({ account_id: accountId, plan: plan.id }, "code redeemed");
    const account = await describeAccount(database, accountId);
    return { granted: true, plan: planBody(plan), balance: account.balance, credit_expires: account.credit_expires };
  });

  app.get("/api/admin/plans", { preHandler: options.authenticate }, async function adminPlans(request): Promise<ListOf<AdminPlan>> {
    requireAdmin(request);
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
  });

  app.post("/api/admin/plans", { preHandler: options.authenticate }, async function createPlan(request, reply): Promise<PlanListing> {
    requireAdmin(request);
    const plan = parseWithSchema(createPlanRequestSchema, request.body);
    if ((await findPlan(database, plan.id)) !== undefined) throw new PlanExistsError(plan.id);
    await savePlan(database, plan, "admin");
    await options.onPlansChanged();
    request.log.info({ plan: plan.id }, "plan created");
    void reply.code(201);
    return planBody(plan);
  });

  app.patch<{ Params: { id: string } }>("/api/admin/plans/:id", { preHandler: options.authenticate }, async function editPlan(request): Promise<PlanListing> {
    requireAdmin(request);
    const existing = await findPlan(database, request.params.id);
    if (existing === undefined) throw new PlanNotFoundError(request.params.id);
    const changes = parseWithSchema(editPlanRequestSchema, request.body);
    // Only the fields sent change (the schema's defaults would fill the others in).
    const sent = new Set(Object.keys(request.body as object));
    const plan: Plan = { ...existing, ...Object.fromEntries(Object.entries(changes).filter(([field, value]) => sent.has(field) && value !== undefined)) };
    await savePlan(database, plan, "admin");
    await options.onPlansChanged();
    request.log.info({ plan: plan.id }, "plan edited");
    return planBody(plan);
  });

  app.get("/api/admin/codes", { preHandler: options.authenticate }, async function adminCodes(request): Promise<ListOf<AdminCode>> {
    requireAdmin(request);
    const data = (await listCodes(database)).map((row) => ({
      display_prefix: row.displayPrefix,
      plan: row.planId,
      created: Math.floor(row.created / 1000),
      redeemed: row.redeemed === null ? null : Math.floor(row.redeemed / 1000),
      redeemed_by: row.redeemedBy,
    }));
    return { object: "list", data };
  });

  app.post("/api/admin/codes", { preHandler: options.authenticate }, async function makeCodes(request, reply): Promise<ListOf<CreatedCode>> {
    requireAdmin(request);
    const { plan, count } = parseWithSchema(createCodesRequestSchema, request.body);
    const codes = await createCodes(database, { planId: plan, count });
    request.log.info({ plan, count }, "redemption codes created");
    void reply.code(201);
    return { object: "list", data: codes.map((code) => ({ code, plan })) };
  });
}
