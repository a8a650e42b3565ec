import type { z } from "zod";
import { InvalidRequestError } from "./errors.ts";

/** Formats a zod path as OpenAI does for `param`: `messages[0].content`. */
export function formatParamPath(path: ReadonlyArray<PropertyKey>): string | null {
  let formatted = "";
  for (const segment of path) {
    if (typeof segment === "number") formatted += `[${segment}]`;
    else formatted += formatted === "" ? String(segment) : `.${String(segment)}`;
  }
  return formatted === "" ? null : formatted;
}

/**
 * Validates `body` against `schema`, or throws a 400 `InvalidRequestError` naming the first
 * offending field in `param`.
 */
export function parseWithSchema<Schema extends z.ZodType>(schema: Schema, body: unknown): z.output<Schema> {
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw new InvalidRequestError("The request body must be a JSON object.", null);
  }
  const result = schema.safeParse(body);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const param = formatParamPath(issue.path);
  const subject = param === null ? "request body" : `'${param}'`;
  throw new InvalidRequestError(`Invalid ${subject}: ${issue.message}`, param);
}
