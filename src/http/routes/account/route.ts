/** `GET /api/account`: the caller's account: balance, plan, when the credit expires. */
import type { FastifyInstance, preHandlerHookHandler } from "fastify";
import type { Kysely } from "kysely";
import type { Database } from "../../../store/schema.ts";
import { describeAccount } from "../../../accounts/describe-account.ts";
import { accountObjectSchema } from "../../../protocol/account-api.ts";
import { accountIdOf } from "../../middleware/account-auth/account-auth.ts";
import { defineOperation, registerOperations } from "../../operation.ts";

export type AccountRouteOptions = { database: Kysely<Database>; authenticate: preHandlerHookHandler };

export const showAccountOperation = defineOperation({
  method: "get",
  path: "/api/account",
  tag: "Account",
  summary: "The account: balance, plan, when the credit expires.",
  auth: "account",
  success: { status: 200, description: "An account object." },
  response: accountObjectSchema,
  errors: ["account_required"],
  schemas: { Account: accountObjectSchema },
  async handler({ request, reply }, options: AccountRouteOptions) {
    reply.header("cache-control", "no-store");
    return describeAccount(options.database, accountIdOf(request, "An account's balance"));
  },
});

export function registerAccountRoute(app: FastifyInstance, options: AccountRouteOptions): void {
  registerOperations(app, [showAccountOperation], { context: options, authenticate: { account: options.authenticate } });
}
