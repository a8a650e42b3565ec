/** The bodies of the service routes beside `/v1` and `/api`: health, readiness, public settings, the OpenAPI document. */
import { z } from "zod";

/** `GET /health`. */
export const healthSchema = z.object({ status: z.literal("ok") });
export type Health = z.infer<typeof healthSchema>;

/** `GET /ready`: 200 when every model is ready, else 503 with the same body. */
export const readinessSchema = z.object({
  status: z.enum(["ready", "not_ready", "draining", "shutting_down"]),
  models: z.record(z.string(), z.enum(["ready", "degraded", "loading", "downloading", "unavailable"])).describe("Each model's state, by id."),
});
export type Readiness = z.infer<typeof readinessSchema>;

/** What a credit is worth: 1,000,000 credits cost `per_million_credits` (an exact decimal string) of `currency`. */
export const creditValueSchema = z.object({ currency: z.string().describe("ISO 4217, lower case."), per_million_credits: z.string() });

/** `GET /api/settings`. */
export const publicSettingsSchema = z.object({
  object: z.literal("settings"),
  /** Null: credits only. */
  credit_value: creditValueSchema.nullable().describe("What a credit is worth; null: credits only."),
});
export type PublicSettings = z.infer<typeof publicSettingsSchema>;

/** `GET /openapi.json`: its top level (the rest is OpenAPI 3.1's). */
export const openApiDocumentSchema = z.object({
  openapi: z.string(),
  info: z.object({ title: z.string(), version: z.string(), description: z.string() }),
  jsonSchemaDialect: z.string(),
  tags: z.array(z.object({ name: z.string(), description: z.string() })),
  paths: z.record(z.string(), z.unknown()),
  components: z.record(z.string(), z.unknown()),
  "x-error-catalog": z.array(z.unknown()),
});
