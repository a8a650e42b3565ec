/**
 * Turnpike's settings: one schema, validated once at start, then frozen. Every setting, its
 * flag, environment variable and default come from the table in `options.ts`.
 */
import { z } from "zod";
import { planSchema } from "../protocol/plans.ts";
import { serveOptions, type ServeOptions } from "./options.ts";

export { DEFAULT_MODEL, modelEntrySchema, pricingSchema } from "./model-entry.ts";
export type { ModelEntry } from "./model-entry.ts";

type SettingsShape = { [Key in keyof ServeOptions]: z.ZodPrefault<ServeOptions[Key]["schema"]> };

/** Each setting's schema, its default filled in (and validated like any other value) when no source gives one. */
function settingsShape(): SettingsShape {
  const shape: Record<string, z.ZodType> = {};
  for (const [key, spec] of Object.entries(serveOptions)) shape[key] = (spec.schema as z.ZodType).prefault(spec.default);
  return shape as SettingsShape;
}

export const settingsSchema = z.object({
  ...settingsShape(),
  /** Plans on offer; only from the config file. */
  plans: z.array(planSchema).default([]),
});

export type Settings = z.infer<typeof settingsSchema>;
