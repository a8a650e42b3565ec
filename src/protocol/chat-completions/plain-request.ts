/**
 * The common chat request, validated without zod: text messages of the four plain roles and the
 * everyday sampling fields. zod's walk of the whole schema (some forty nullable fields, unions of
 * message and content shapes) was the largest part of parsing a small request in the gateway
 * bench's profile. Anything else, or anything this path doubts (an unknown field, a value out of
 * range, a rule between fields broken), goes to `chatCompletionRequestSchema`, which words the
 * refusal: this path never refuses. What it accepts, zod accepts with the same output (field for
 * field, in the schema's order); `plain-request.test.ts` checks that on generated bodies.
 */
import { REQUEST_LIMITS, type ChatCompletionRequest } from "./request.ts";

type Plain = Record<string, unknown>;

const isPlainObject = (value: unknown): value is Plain => typeof value === "object" && value !== null && !Array.isArray(value);

const MESSAGE_ROLES: ReadonlySet<unknown> = new Set(["system", "developer", "user", "assistant"]);

/** A number field's rule: a finite number in [min, max], an integer where `integer`. */
type NumberRule = { min: number; max: number; integer: boolean };

/** The fields this path reads, in the schema's order (the output's order, as zod writes it), with their rules. */
const FIELDS: ReadonlyArray<readonly [name: string, rule: NumberRule | "messages" | "model" | "boolean" | "string" | "stop" | "stream_options"]> = [
  ["messages", "messages"],
  ["model", "model"],
  ["frequency_penalty", { min: -2, max: 2, integer: false }],
  ["max_completion_tokens", { min: 1, max: REQUEST_LIMITS.completionTokens, integer: true }],
  ["max_tokens", { min: 1, max: REQUEST_LIMITS.completionTokens, integer: true }],
  ["n", { min: 1, max: 8, integer: true }],
  ["presence_penalty", { min: -2, max: 2, integer: false }],
  ["seed", { min: Number.MIN_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER, integer: true }],
  ["stop", "stop"],
  ["stream", "boolean"],
  ["stream_options", "stream_options"],
  ["temperature", { min: 0, max: 2, integer: false }],
  ["top_p", { min: 0, max: 1, integer: false }],
  ["user", "string"],
];
const KNOWN: ReadonlySet<string> = new Set(FIELDS.map(([name]) => name));

/** A message `{role, content, name?}` of a plain role with text content, copied as zod copies it; undefined otherwise. */
function plainMessage(value: unknown): Plain | undefined {
  if (!isPlainObject(value)) return undefined;
  let keys = 0;
  for (const key in value) {
    if (key !== "role" && key !== "content" && key !== "name") return undefined;
    keys++;
  }
  const { role, content, name } = value;
  if (!MESSAGE_ROLES.has(role) || typeof content !== "string") return undefined;
  if (keys === 2) return { role, content };
  if (name === null || (typeof name === "string" && name.length <= REQUEST_LIMITS.name)) return { role, content, name };
  return undefined;
}

/** The field's value as zod would output it, or `INVALID`. `null` passes (every field here is nullish). */
const INVALID = Symbol("invalid");
function fieldValue(rule: (typeof FIELDS)[number][1], value: unknown): unknown {
  if (value === null) return rule === "messages" || rule === "model" ? INVALID : null;
  switch (rule) {
    case "messages": {
      if (!Array.isArray(value) || value.length < 1 || value.length > REQUEST_LIMITS.messages) return INVALID;
      const messages: Plain[] = new Array(value.length);
      for (let index = 0; index < value.length; index++) {
        const message = plainMessage(value[index]);
        if (message === undefined) return INVALID;
        messages[index] = message;
      }
      return messages;
    }
    case "model":
      return typeof value === "string" && value.length >= 1 && value.length <= REQUEST_LIMITS.name ? value : INVALID;
    case "boolean":
      return typeof value === "boolean" ? value : INVALID;
    case "string":
      return typeof value === "string" ? value : INVALID;
    case "stop": {
      if (typeof value === "string") return value.length <= REQUEST_LIMITS.stopLength ? value : INVALID;
      if (!Array.isArray(value) || value.length > REQUEST_LIMITS.stopSequences) return INVALID;
      for (const entry of value) if (typeof entry !== "string" || entry.length > REQUEST_LIMITS.stopLength) return INVALID;
      return [...(value as string[])];
    }
    case "stream_options": {
      if (!isPlainObject(value)) return INVALID;
      for (const key in value) if (key !== "include_usage") return INVALID;
      if (!("include_usage" in value)) return {};
      const include = value.include_usage;
      return include === null || typeof include === "boolean" ? { include_usage: include } : INVALID;
    }
    default:
      if (typeof value !== "number" || !Number.isFinite(value) || value < rule.min || value > rule.max) return INVALID;
      return rule.integer && !Number.isInteger(value) ? INVALID : value;
  }
}

/**
 * `body` as `chatCompletionRequestSchema` would output it, when it is a plain request this path
 * can vouch for; undefined for anything else (the schema then validates it, and refuses what it must).
 */
export function plainChatRequest(body: unknown): ChatCompletionRequest | undefined {
  if (!isPlainObject(body)) return undefined;
  for (const key in body) if (!KNOWN.has(key)) return undefined;
  const request: Plain = {};
  for (const [name, rule] of FIELDS) {
    if (!(name in body)) {
      if (rule === "messages" || rule === "model") return undefined;
      continue;
    }
    const value = fieldValue(rule, body[name]);
    if (value === INVALID) return undefined;
    request[name] = value;
  }
  // The schema's rules between these fields: `stream_options` only with a stream, and n × the
  // smaller completion limit within the cap. Broken ones are the schema's to word.
  if (request.stream_options != null && request.stream !== true) return undefined;
  const limits = [request.max_tokens, request.max_completion_tokens].filter((value): value is number => typeof value === "number");
  if (limits.length > 0 && typeof request.n === "number" && request.n * Math.min(...limits) > REQUEST_LIMITS.completionTokens) return undefined;
  return request as ChatCompletionRequest;
}
