/** `GET /api/account`: the caller's account: balance, plan, when the credit expires. */
import type { FastifyInstance, preHandlerHookHandler } from "fastify";
import type { Kysely } from "kysely";
import type { Database } from "../../../store/schema.ts";
import { describeAccount, type AccountDescription } from "../../../accounts/describe-account.ts";
import { accountIdOf } from "../../middleware/account-auth/account-auth.ts";

export type AccountRouteOptions = { database: Kysely<Database>; authenticate: preHandlerHookHandler };

export function registerAccountRoute(app: FastifyInstance, options: AccountRouteOptions): void {
  app.get("/api/account", { preHandler: options.authenticate }, async function showOwnAccount(request, reply): Promise<AccountDescription> {
    reply.header("cache-control", "no-store");
    return describeAccount(options.database, accountIdOf(request, "An account's balance"));
  });
}
