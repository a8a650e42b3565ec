/**
 * `GET /api/settings`: what the console needs to know of the server's settings, public (no
 * session or key): today what a credit is worth, so prices and costs can be shown in money.
 */
import type { FastifyInstance } from "fastify";
import type { CreditValue } from "../../../protocol/credit-value.ts";
import { creditValueSchema, publicSettingsSchema, type PublicSettings } from "../../../protocol/service.ts";
import { defineOperation, registerOperations } from "../../operation.ts";

export type SettingsRouteOptions = { creditValue: CreditValue | null };

export const settingsOperation = defineOperation({
  method: "get",
  path: "/api/settings",
  tag: "Service",
  summary: "What the console needs of the server's settings, public: what a credit is worth (`credit_value`, null for credits only).",
  auth: "none",
  success: { status: 200, description: "`{object: \"settings\", credit_value: {currency, per_million_credits} | null}`." },
  response: publicSettingsSchema,
  errors: [],
  schemas: { CreditValue: creditValueSchema, PublicSettings: publicSettingsSchema },
  async handler(_call, { body }: { body: PublicSettings }): Promise<PublicSettings> {
    return body;
  },
});

export function registerSettingsRoute(app: FastifyInstance, options: SettingsRouteOptions): void {
  const body: PublicSettings = { object: "settings", credit_value: options.creditValue === null ? null : { ...options.creditValue } };
  registerOperations(app, [settingsOperation], { context: { body } });
}
