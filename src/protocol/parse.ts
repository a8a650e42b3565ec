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

/** Zod's default messages, rewritten the way OpenAI words them; custom messages pass through. */
export function describeIssue(issue: z.core.$ZodIssue): string {
  const sized = (value: number | bigint, origin: string) =>
    origin === "array" ? `${value} item${value === 1 ? "" : "s"}` : origin === "string" ? `${value} character${value === 1 ? "" : "s"}` : String(value);
  switch (issue.code) {
    case "invalid_type":
      if (/^Invalid input: expected/.test(issue.message) || issue.message === "Invalid input") {
        return issue.input === undefined ? "this field is required." : `expected ${issue.expected}, got ${describeValue(issue.input)}.`;
      }
      return issue.message;
    case "too_big":
      return `must be at most ${sized(issue.maximum, issue.origin)}${issue.origin === "number" ? `, got ${describeValue(issue.input)}` : ""}.`;
    case "too_small":
      return `must be at least ${sized(issue.minimum, issue.origin)}${issue.origin === "number" ? `, got ${describeValue(issue.input)}` : ""}.`;
    case "invalid_value":
      return `must be one of ${issue.values.map((value) => JSON.stringify(value)).join(", ")}.`;
    default:
      return issue.message === "Invalid input" ? "the value is not valid here." : issue.message;
  }
}

function describeValue(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  if (typeof value === "string") return value.length > 40 ? "a string" : JSON.stringify(value);
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

/**
 * An issue of a cross-field check (a schema's `.check`), worded whole: `parseWithSchema` answers
 * it as it is, without the "Invalid 'field':" of a single field's issue.
 */
export function crossFieldIssue(path: PropertyKey[], message: string, input: unknown): z.core.$ZodRawIssue {
  return { code: "custom", path, message, input, params: { whole: true } };
}

/**
 * Validates `body` against `schema`, or throws a 400 `InvalidRequestError` naming the first
 * offending field in `param`.
 */
export function parseWithSchema<Schema extends z.ZodType>(schema: Schema, body: unknown): z.output<Schema> {
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    const hint = body === undefined || typeof body === "string" ? ", sent with 'Content-Type: application/json'" : "";
    throw new InvalidRequestError(`The request body must be a JSON object${hint}.`, null);
  }
  const result = schema.safeParse(body, { reportInput: true });
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const param = formatParamPath(issue.path);
  // A cross-field check of the schema words its whole message itself (see `crossFieldIssue`).
  if (issue.code === "custom" && issue.params?.whole === true) throw new InvalidRequestError(issue.message, param);
  const subject = param === null ? "request body" : `'${param}'`;
  throw new InvalidRequestError(`Invalid ${subject}: ${describeIssue(issue)}`, param);
}
