/**
 * The request body of `POST /v1/chat/completions`, in the OpenAI spec's field order.
 * Unknown fields are accepted and dropped (zod's default), as OpenAI's clients expect.
 * Fields are `nullish` where the official SDKs may send `null` for "not set".
 */
import { z } from "zod";
import { crossFieldIssue } from "../parse.ts";
import { REQUESTED_SERVICE_TIERS } from "../service-tiers.ts";

/**
 * Caps on what a request may hold, checked before anything else looks at it: every input that
 * reaches the chat template, the tokenizer or the grammar is bounded, so no request can make the
 * server work long on the event loop before it is refused (the README lists them).
 */
export const REQUEST_LIMITS = {
  /** Messages in one request. */
  messages: 2048,
  /** Content parts in one message. */
  contentParts: 256,
  /** Characters of a message's `name`, a tool call's `id`, a `tool_call_id`, a called function's name, `model`. */
  name: 256,
  /** Tool calls in one assistant message. */
  toolCalls: 128,
  /** Characters of one tool call's `arguments` (a JSON text). */
  toolCallArguments: 262_144,
  /** Tools in one request (OpenAI documents 128). */
  tools: 128,
  /** Characters of one tool's `description` (and of a `json_schema`'s). */
  toolDescription: 16_384,
  /** Bytes of one tool's `parameters`, or of a `response_format`'s schema, as JSON text. */
  schemaBytes: 65_536,
  /** Entries of `stop`, and characters of each. */
  stopSequences: 4,
  stopLength: 1024,
  /** Entries of `logit_bias`. */
  logitBias: 300,
  /** `max_tokens` / `max_completion_tokens`, and `n` × the smaller of them. */
  completionTokens: 1_048_576,
  /** Entries of `chat_template_kwargs`. */
  vendorEntries: 64,
  /** Levels of objects and arrays in `chat_template_kwargs`, the record itself the first. */
  vendorDepth: 8,
  /** Bytes of `chat_template_kwargs` as JSON text. */
  vendorBytes: 65_536,
  /** Characters of one string (or key) inside `chat_template_kwargs`. */
  vendorString: 16_384,
} as const;

/** A string of at most `max` characters. */
const bounded = (max: number) => z.string().max(max);

/**
 * An object whose keys are counted before any value is read: a body of a million entries is
 * refused after counting them (`Object.keys`, the quickest count V8 offers), not after
 * validating each one.
 */
function countedRecord<Value extends z.ZodType>(value: Value, max: number, what: string) {
  return z
    .custom<Record<string, unknown>>((input) => input !== null && typeof input === "object" && !Array.isArray(input), { error: "Expected an object." })
    .check((context) => {
      if (Object.keys(context.value).length > max) context.issues.push({ code: "custom", message: `must have at most ${max} ${what}.`, input: context.value });
    })
    .pipe(z.record(z.string(), value));
}

/** JSON text bytes of a parsed value, or undefined when it nests too deeply to write back. */
function jsonBytes(value: unknown): number | undefined {
  try {
    return Buffer.byteLength(JSON.stringify(value));
  } catch {
    return undefined;
  }
}

/**
 * Template variables a `chat_template_kwargs` key may not set: the request's own fields (the
 * messages, tools, model, sampling...) and what the upstream itself hands the template (the chat
 * template, the generation prompt, special tokens). Passing one through would replace what the
 * request says, and what the prompt bound and the bill counted, with something else.
 */
export const SHADOWED_TEMPLATE_VARIABLES: ReadonlySet<string> = new Set([
  "chat_template",
  "add_generation_prompt",
  "continue_final_message",
  "documents",
  "bos_token",
  "eos_token",
  "pad_token",
  "unk_token",
  "tokenize",
  "raise_exception",
  "strftime_now",
]);

type VendorIssue = { path: PropertyKey[]; message: string };

/**
 * Walks a vendor value without recursion (no depth can overflow the stack) and finds the first
 * bound it breaks: too deep, a string or key too long, or more JSON text than allowed (counted as
 * `JSON.stringify` would write it, without writing it). Stops at the first issue.
 */
export function checkVendorValue(value: unknown, limits: { depth: number; bytes: number; string: number }): VendorIssue | undefined {
  const stack: Array<{ value: unknown; path: PropertyKey[]; depth: number }> = [{ value, path: [], depth: 0 }];
  let bytes = 0;
  const tooLarge = (path: PropertyKey[]): VendorIssue => ({ path, message: `must be at most ${limits.bytes} bytes as JSON text.` });
  while (stack.length > 0) {
    const item = stack.pop()!;
    const current = item.value;
    if (typeof current === "string") {
      if (current.length > limits.string) return { path: item.path, message: `must be a string of at most ${limits.string} characters.` };
      bytes += Buffer.byteLength(JSON.stringify(current));
    } else if (current === null || typeof current === "boolean" || typeof current === "number") {
      bytes += String(current).length;
    } else if (typeof current === "object") {
      const depth = item.depth + 1;
      if (depth > limits.depth) return { path: item.path, message: `must nest at most ${limits.depth} levels of objects and arrays.` };
      // The framing and keys are counted, and the cap checked, before any child is queued: a
      // million-item array costs one comparison.
      if (Array.isArray(current)) {
        bytes += 2 + Math.max(0, current.length - 1);
        if (bytes > limits.bytes) return tooLarge([]);
        for (let index = current.length - 1; index >= 0; index--) stack.push({ value: current[index], path: [...item.path, index], depth });
      } else {
        const keys = Object.keys(current);
        bytes += 2 + Math.max(0, keys.length - 1);
        for (const key of keys) {
          if (key.length > limits.string) return { path: item.path, message: `must have keys of at most ${limits.string} characters.` };
          bytes += Buffer.byteLength(JSON.stringify(key)) + 1;
          if (bytes > limits.bytes) return tooLarge([]);
        }
        for (let index = keys.length - 1; index >= 0; index--) stack.push({ value: (current as Record<string, unknown>)[keys[index]!], path: [...item.path, keys[index]!], depth });
      }
    } else {
      return { path: item.path, message: "must hold only JSON values." };
    }
    if (bytes > limits.bytes) return tooLarge([]);
  }
  return undefined;
}

/**
 * `chat_template_kwargs`: extra variables for the upstream's chat template, bounded (entries,
 * depth, bytes, string lengths) and refused when a key would shadow the request's own fields or
 * what the upstream gives the template (`SHADOWED_TEMPLATE_VARIABLES`).
 */
const chatTemplateKwargs = countedRecord(z.unknown(), REQUEST_LIMITS.vendorEntries, "entries").check((context) => {
  for (const key of Object.keys(context.value)) {
    const requestField = Object.hasOwn(chatCompletionRequestShape, key);
    if (requestField || SHADOWED_TEMPLATE_VARIABLES.has(key)) {
      const instead = requestField ? `it would shadow the request's own '${key}': send it as that field.` : `the upstream sets '${key}' itself.`;
      context.issues.push({ code: "custom", path: [key], message: `the key '${key}' may not be set through chat_template_kwargs: ${instead}`, input: key });
      return;
    }
  }
  const issue = checkVendorValue(context.value, { depth: REQUEST_LIMITS.vendorDepth, bytes: REQUEST_LIMITS.vendorBytes, string: REQUEST_LIMITS.vendorString });
  if (issue !== undefined) context.issues.push({ code: "custom", path: issue.path, message: issue.message, input: undefined });
});

const textPart = z.object({ type: z.literal("text"), text: z.string() });
const name = bounded(REQUEST_LIMITS.name);
const imagePart = z.object({
  type: z.literal("image_url"),
  image_url: z.object({ url: z.string(), detail: z.enum(["auto", "low", "high"]).nullish() }),
});
const audioPart = z.object({
  type: z.literal("input_audio"),
  input_audio: z.object({ data: z.string(), format: z.string() }),
});
const filePart = z.object({ type: z.literal("file"), file: z.record(z.string(), z.unknown()) });
const refusalPart = z.object({ type: z.literal("refusal"), refusal: z.string() });

const userContentPart = z.discriminatedUnion("type", [textPart, imagePart, audioPart, filePart], {
  error: "Each content part needs a 'type' of 'text', 'image_url', 'input_audio' or 'file'.",
});
/** Content parts, their count checked before any part is read. */
function parts<Part extends z.ZodType>(part: Part) {
  return z.array(part).max(REQUEST_LIMITS.contentParts);
}

const textContent = z.union([z.string(), parts(textPart)], {
  error: `Expected a string or an array of up to ${REQUEST_LIMITS.contentParts} text content parts.`,
});

/** Whether `text` is a JSON text (tool-call arguments must be one, as OpenAI requires). */
function isJsonText(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

const toolCall = z.object({
  id: name,
  type: z.literal("function"),
  function: z.object({
    name,
    // Checked here, with the rest of the schema, so a large body's arguments are parsed in the body worker.
    arguments: bounded(REQUEST_LIMITS.toolCallArguments).refine(isJsonText, { error: "the arguments of a tool call must be a JSON text." }),
  }),
});

const systemMessage = z.object({ role: z.literal("system"), content: textContent, name: name.nullish() });
const developerMessage = z.object({ role: z.literal("developer"), content: textContent, name: name.nullish() });
const userMessage = z.object({
  role: z.literal("user"),
  content: z.union([z.string(), parts(userContentPart)], {
    error: `Expected a string or an array of up to ${REQUEST_LIMITS.contentParts} content parts.`,
  }),
  name: name.nullish(),
});
const assistantMessage = z.object({
  role: z.literal("assistant"),
  content: z.union([z.string(), parts(z.discriminatedUnion("type", [textPart, refusalPart]))]).nullish(),
  refusal: z.string().nullish(),
  name: name.nullish(),
  tool_calls: z.array(toolCall).max(REQUEST_LIMITS.toolCalls).nullish(),
});
const toolMessage = z.object({
  role: z.literal("tool"),
  content: textContent,
  tool_call_id: name,
});

export const chatMessageSchema = z.discriminatedUnion(
  "role",
  [systemMessage, developerMessage, userMessage, assistantMessage, toolMessage],
  { error: "Each message needs a 'role' of 'system', 'developer', 'user', 'assistant' or 'tool'." },
);

/** OpenAI's rule for function and schema names. */
const functionName = z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, {
  error: "Expected a name of 1 to 64 letters, digits, underscores or dashes.",
});
const jsonSchema = z.record(z.string(), z.unknown(), { error: "Expected a JSON Schema object." }).check((context) => {
  const bytes = jsonBytes(context.value);
  if (bytes === undefined || bytes > REQUEST_LIMITS.schemaBytes) {
    context.issues.push({ code: "custom", message: `must be a JSON schema of at most ${REQUEST_LIMITS.schemaBytes} bytes as JSON text.`, input: context.value });
  }
});

const responseFormat = z.discriminatedUnion(
  "type",
  [
    z.object({ type: z.literal("text") }),
    z.object({ type: z.literal("json_object") }),
    z.object({
      type: z.literal("json_schema"),
      json_schema: z.object({
        name: functionName,
        description: bounded(REQUEST_LIMITS.toolDescription).nullish(),
        schema: jsonSchema.nullish(),
        strict: z.boolean().nullish(),
      }),
    }),
  ],
  { error: "Expected a 'type' of 'text', 'json_object' or 'json_schema'." },
);

const functionTool = z.object({
  type: z.literal("function", { error: "Only tools of type 'function' are supported." }),
  function: z.object({
    name: functionName,
    description: bounded(REQUEST_LIMITS.toolDescription).nullish(),
    parameters: jsonSchema.nullish(),
    strict: z.boolean().nullish(),
  }),
});

const toolChoice = z.union(
  [
    z.enum(["none", "auto", "required"]),
    z.object({ type: z.literal("function"), function: z.object({ name }) }),
  ],
  { error: "Expected 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}." },
);

const probability = (min: number, max: number) => z.number().min(min).max(max).nullish();

const completionTokens = z.number().int().min(1).max(REQUEST_LIMITS.completionTokens);

const chatCompletionRequestShape = {
  messages: z.array(chatMessageSchema).min(1).max(REQUEST_LIMITS.messages),
  model: z.string().min(1).max(REQUEST_LIMITS.name),
  frequency_penalty: probability(-2, 2),
  /** Token id (a decimal string) → bias added to its logit, -100..100 (-100 bans the token); keys and range are checked by the serving layer, the vocabulary by the engine. */
  logit_bias: countedRecord(z.number(), REQUEST_LIMITS.logitBias, "entries").nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  max_completion_tokens: completionTokens.nullish(),
  /** Deprecated by OpenAI in favour of `max_completion_tokens`; both are honoured, the smaller wins. */
  max_tokens: completionTokens.nullish(),
  /** Choices to generate, each billed. */
  n: z.number().int().min(1).max(8).nullish(),
  presence_penalty: probability(-2, 2),
  response_format: responseFormat.nullish(),
  seed: z.number().int().nullish(),
  /** The band it queues in when the engines are saturated, billed at the plan's multiplier: `auto` (the default tier), `default`, `flex` or `priority`. */
  service_tier: z.enum(REQUESTED_SERVICE_TIERS).nullish(),
  stop: z
    .union([bounded(REQUEST_LIMITS.stopLength), z.array(bounded(REQUEST_LIMITS.stopLength)).max(REQUEST_LIMITS.stopSequences)], {
      error: `Expected a string or an array of up to ${REQUEST_LIMITS.stopSequences} strings, each of at most ${REQUEST_LIMITS.stopLength} characters.`,
    })
    .nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().nullish() }).nullish(),
  temperature: probability(0, 2),
  top_p: probability(0, 1),
  tools: z.array(functionTool).max(REQUEST_LIMITS.tools).nullish(),
  tool_choice: toolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  user: z.string().nullish(),
  // Deprecated function-calling fields, recognised only to refuse them clearly.
  functions: z.array(z.unknown()).nullish(),
  function_call: z.unknown().optional(),
  audio: z.unknown().optional(),
  modalities: z.array(z.string()).nullish(),
  // Vendor sampling fields: passed as sent to upstream engines whose model entry allows them (a 400 elsewhere).
  /** OpenAI's effort for reasoning models (vLLM and SGLang pass it to the chat template). */
  reasoning_effort: z.enum(["none", "minimal", "low", "medium", "high"]).nullish(),
  /** Sample from the k likeliest tokens (-1 or 0: all). */
  top_k: z.number().int().min(-1).max(1_000_000).nullish(),
  /** Drop tokens less likely than this fraction of the likeliest. */
  min_p: z.number().min(0).max(1).nullish(),
  /** Penalty on repeated tokens (1: none). */
  repetition_penalty: z.number().gt(0).max(10).nullish(),
  /** Extra variables for the upstream's chat template (e.g. `{"enable_thinking": false}`). */
  chat_template_kwargs: chatTemplateKwargs.nullish(),
};

/**
 * The rules between fields, in the schema so that they also run in the body worker (a large body
 * refused there never reaches the event loop): one place each, for every caller of the schema.
 */
export const chatCompletionRequestSchema = z.object(chatCompletionRequestShape).check((context) => {
  const request = context.value;
  const fail = (path: PropertyKey[], message: string, input: unknown): void => {
    context.issues.push(crossFieldIssue(path, message, input));
  };
  // Every choice may use all of its completion tokens: their product is what a request can ask for.
  const limits = [request.max_tokens, request.max_completion_tokens].filter((value): value is number => value != null);
  if (limits.length > 0 && request.n != null) {
    const each = Math.min(...limits);
    if (request.n * each > REQUEST_LIMITS.completionTokens) {
      const param = request.max_completion_tokens === each ? "max_completion_tokens" : "max_tokens";
      context.issues.push({
        code: "custom",
        path: [param],
        message: `'n' × '${param}' must be at most ${REQUEST_LIMITS.completionTokens} tokens, got ${request.n} × ${each}.`,
        input: each,
      });
      return;
    }
  }
  if (request.stream_options != null && request.stream !== true) return fail(["stream_options"], "'stream_options' is only allowed when 'stream' is true.", request.stream_options);
  if (request.top_logprobs != null && request.logprobs !== true) return fail(["top_logprobs"], "'logprobs' must be set to true when 'top_logprobs' is used.", request.top_logprobs);
  const names = new Set<string>();
  for (const [index, tool] of (request.tools ?? []).entries()) {
    if (names.has(tool.function.name)) return fail(["tools", index, "function", "name"], `The function name '${tool.function.name}' is given twice; tool names must be unique.`, tool.function.name);
    names.add(tool.function.name);
  }
  const choice = request.tool_choice;
  if (choice != null && choice !== "none" && choice !== "auto" && names.size === 0) return fail(["tool_choice"], "'tool_choice' requires 'tools': there is no tool to call.", choice);
  if (choice != null && typeof choice === "object" && !names.has(choice.function.name)) {
    return fail(["tool_choice"], `'tool_choice' names the function '${choice.function.name}', which is not among 'tools'.`, choice);
  }
  // Every `tool` message answers a call of an earlier assistant message, as OpenAI requires.
  const callIds = new Set<string>();
  for (const [index, message] of request.messages.entries()) {
    if (message.role === "assistant") for (const call of message.tool_calls ?? []) callIds.add(call.id);
    if (message.role === "tool" && !callIds.has(message.tool_call_id)) {
      return fail(
        ["messages", index, "tool_call_id"],
        `The 'tool' message answers the tool call '${message.tool_call_id}', but no earlier assistant message made a call with that id. ` +
          "A 'tool' message must follow an assistant message whose 'tool_calls' include its 'tool_call_id'.",
        message.tool_call_id,
      );
    }
  }
});

export type ChatCompletionRequest = z.infer<typeof chatCompletionRequestSchema>;
export type ChatMessage = z.infer<typeof chatMessageSchema>;
export type UserContentPart = z.infer<typeof userContentPart>;
export type ResponseFormatParam = z.infer<typeof responseFormat>;
