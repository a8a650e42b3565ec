/**
 * `GET /api/settings`: what the console needs to know of the server's settings, public (no
 * session or key): today what a credit is worth, so prices and costs can be shown in money.
 */
import type { FastifyInstance } from "fastify";
import type { CreditValue } from "../../../protocol/credit-value.ts";
import type { PublicSettings } from "../../../protocol/service.ts";

export type SettingsRouteOptions = { creditValue: CreditValue | null };

export function registerSettingsRoute(app: FastifyInstance, options: SettingsRouteOptions): void {
  const body: PublicSettings = { object: "settings", credit_value: options.creditValue === null ? null : { ...options.creditValue } };
  app.get("/api/settings", async function publicSettings(): Promise<PublicSettings> {
    return body;
  });
}
