/**
 * The request body of `POST /v1/responses` (the Responses API: the Open Responses specification's
 * `CreateResponseBody` and OpenAI's additions Codex and the SDKs send), in the spec's field order.
 * Unknown fields are accepted and dropped (zod's default), as OpenAI's clients expect; fields are
 * `nullish` where the SDKs may send `null` for "not set". Every field is bounded, and the
 * cross-field rules are checks of the schema, so a large body is refused in the body worker.
 */
import { z } from "zod";
import { REQUEST_LIMITS } from "../chat-completions/request.ts";
import { REQUESTED_SERVICE_TIERS } from "../service-tiers.ts";

/** Caps on what a request may hold (see `REQUEST_LIMITS` for why every input is bounded). */
export const RESPONSES_LIMITS = {
  /** Items in `input`. */
  items: REQUEST_LIMITS.messages,
  /** Content parts in one message or one tool output. */
  contentParts: REQUEST_LIMITS.contentParts,
  /** Characters of one text (`input`, `instructions`, a part's text, a call's output): the spec's 10 MiB. */
  text: 10_485_760,
  /** Characters of an `image_url` (a data URL holds the image): the spec's 20 MiB. */
  imageUrl: 20_971_520,
  /** Characters of an id (`model`, item ids, `call_id`, `previous_response_id`, `file_id`) and of a called tool's name. */
  id: REQUEST_LIMITS.name,
  /** Characters of a function call's `arguments` or a custom tool call's `input`. */
  toolCallArguments: REQUEST_LIMITS.toolCallArguments,
  /** Tools in one request (OpenAI documents 128). */
  tools: REQUEST_LIMITS.tools,
  /** Characters of a tool's (or a `json_schema` format's) `description`. */
  toolDescription: REQUEST_LIMITS.toolDescription,
  /** Bytes of a tool's `parameters`, or of a `json_schema` format's schema, as JSON text. */
  schemaBytes: REQUEST_LIMITS.schemaBytes,
  /** Characters of a custom tool's grammar `definition`. */
  grammarDefinition: 65_536,
  /** `max_output_tokens`. */
  outputTokens: REQUEST_LIMITS.completionTokens,
  /** `max_tool_calls`. */
  toolCalls: 1024,
  /** `metadata`: entries, and characters of each key and value (OpenAI's bounds). */
  metadataEntries: 16,
  metadataKey: 64,
  metadataValue: 512,
  /** Entries of `include`, and characters of each. */
  includeEntries: 32,
  includeValue: 128,
  /** Characters of `safety_identifier`, `prompt_cache_key` (the spec's 64) and `user`. */
  identifier: 64,
  user: 256,
  /** Parts of a reasoning item's `summary` or `content`. */
  reasoningParts: 256,
} as const;

/**
 * The `include` values OpenAI defines. Each is accepted; those that do not apply to Turnpike are
 * ignored (`IGNORED_INCLUDE_VALUES`); anything else is refused with a 400 naming `include`.
 */
export const KNOWN_INCLUDE_VALUES = [
  "message.output_text.logprobs",
  "reasoning.encrypted_content",
  "message.input_image.image_url",
  "file_search_call.results",
  "web_search_call.results",
  "web_search_call.action.sources",
  "computer_call_output.output.image_url",
  "code_interpreter_call.outputs",
] as const;

/**
 * Known `include` values accepted and ignored: Turnpike returns reasoning as plain `content`,
 * never encrypted (so there is nothing to include for `reasoning.encrypted_content`, which Codex
 * sends with `store: false`); stored input items keep their image URLs anyway; the rest belong to
 * built-in tools, which are refused. Only `message.output_text.logprobs` changes the answer.
 */
export const IGNORED_INCLUDE_VALUES: ReadonlySet<string> = new Set(KNOWN_INCLUDE_VALUES.filter((value) => value !== "message.output_text.logprobs"));

const KNOWN_INCLUDE_SET: ReadonlySet<string> = new Set(KNOWN_INCLUDE_VALUES);

/** A string of at most `max` characters. */
const bounded = (max: number) => z.string().max(max);
const text = bounded(RESPONSES_LIMITS.text);
const id = bounded(RESPONSES_LIMITS.id);

/**
 * A string or an array: the array's issues keep their own path (`input[3].content[1].text`),
 * which a `z.union` of the two would fold into one issue at the union's place.
 */
export function stringOr<Element extends z.ZodType>(string: z.ZodString, array: z.ZodArray<Element>, error: string) {
  return z.unknown().transform((value, context): string | Array<z.output<Element>> => {
    const schema = typeof value === "string" ? string : Array.isArray(value) ? array : undefined;
    if (schema === undefined) {
      context.issues.push({ code: "custom", message: error, input: value });
      return z.NEVER;
    }
    const result = schema.safeParse(value, { reportInput: true });
    if (result.success) return result.data as string | Array<z.output<Element>>;
    for (const issue of result.error.issues) context.issues.push(issue as z.core.$ZodRawIssue);
    return z.NEVER;
  });
}

/** Whether `value` is a JSON text (a function call's arguments must be one, as OpenAI requires). */
function isJsonText(value: string): boolean {
  try {
    JSON.parse(value);
    return true;
  } catch {
    return false;
  }
}

/** JSON text bytes of a parsed value, or undefined when it nests too deeply to write back. */
function jsonBytes(value: unknown): number | undefined {
  try {
    return Buffer.byteLength(JSON.stringify(value));
  } catch {
    return undefined;
  }
}

/** OpenAI's rule for function, custom tool and schema names. */
const toolName = z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, {
  error: "Expected a name of 1 to 64 letters, digits, underscores or dashes.",
});

const jsonSchema = z.record(z.string(), z.unknown(), { error: "Expected a JSON Schema object." }).check((context) => {
  const bytes = jsonBytes(context.value);
  if (bytes === undefined || bytes > RESPONSES_LIMITS.schemaBytes) {
    context.issues.push({ code: "custom", message: `must be a JSON schema of at most ${RESPONSES_LIMITS.schemaBytes} bytes as JSON text.`, input: context.value });
  }
});

// Content parts.

const inputTextPart = z.object({ type: z.literal("input_text"), text });
const inputImagePart = z
  .object({
    type: z.literal("input_image"),
    image_url: bounded(RESPONSES_LIMITS.imageUrl).nullish(),
    file_id: id.nullish(),
    detail: z.enum(["auto", "low", "high"]).nullish(),
  })
  .check((context) => {
    if ((context.value.image_url == null) === (context.value.file_id == null)) {
      context.issues.push({ code: "custom", message: "an 'input_image' part needs exactly one of 'image_url' and 'file_id'.", input: context.value });
    }
  });
/** A file part: accepted by the schema, refused when mapped (Turnpike reads no files). */
const inputFilePart = z.object({
  type: z.literal("input_file"),
  file_id: id.nullish(),
  file_url: bounded(RESPONSES_LIMITS.imageUrl).nullish(),
  file_data: bounded(RESPONSES_LIMITS.imageUrl).nullish(),
  filename: id.nullish(),
});
const outputTextPart = z.object({
  type: z.literal("output_text"),
  text,
  // Echoed back by clients from earlier answers; they carry nothing the prompt uses.
  annotations: z.array(z.unknown()).max(RESPONSES_LIMITS.contentParts).nullish(),
  logprobs: z.array(z.unknown()).nullish(),
});
const refusalPart = z.object({ type: z.literal("refusal"), refusal: text });

const MESSAGE_PART_TYPES = "'input_text', 'input_image', 'input_file', 'output_text' or 'refusal'";
const messagePart = z.discriminatedUnion("type", [inputTextPart, inputImagePart, inputFilePart, outputTextPart, refusalPart], {
  error: `Each content part needs a 'type' of ${MESSAGE_PART_TYPES}.`,
});
const toolOutputPart = z.discriminatedUnion("type", [inputTextPart, inputImagePart, inputFilePart], {
  error: "Each part of a tool call's output needs a 'type' of 'input_text', 'input_image' or 'input_file'.",
});

/** Which part types each role may send (OpenAI's input and output message content). */
const PARTS_OF_ROLE: Record<string, ReadonlySet<string>> = {
  user: new Set(["input_text", "input_image", "input_file"]),
  system: new Set(["input_text", "input_image", "input_file"]),
  developer: new Set(["input_text", "input_image", "input_file"]),
  assistant: new Set(["output_text", "refusal"]),
};

const contentParts = <Part extends z.ZodType>(part: Part) => z.array(part).max(RESPONSES_LIMITS.contentParts);

// Input items.

const itemStatus = z.enum(["in_progress", "completed", "incomplete"]);

const messageItem = z
  .object({
    type: z.literal("message"),
    id: id.nullish(),
    role: z.enum(["user", "system", "developer", "assistant"], { error: "Expected a 'role' of 'user', 'system', 'developer' or 'assistant'." }),
    content: stringOr(text, contentParts(messagePart), `Expected a string or an array of up to ${RESPONSES_LIMITS.contentParts} content parts.`),
    status: itemStatus.nullish(),
    phase: z.enum(["commentary", "final_answer"]).nullish(),
  })
  .check((context) => {
    const { role, content } = context.value;
    if (typeof content === "string") return;
    const allowed = PARTS_OF_ROLE[role]!;
    content.forEach((part, index) => {
      if (allowed.has(part.type)) return;
      context.issues.push({
        code: "custom",
        path: ["content", index, "type"],
        message: `'${role}' messages may not hold '${part.type}' parts (they may hold ${[...allowed].map((type) => `'${type}'`).join(", ")}).`,
        input: part.type,
      });
    });
  });

const functionCallItem = z.object({
  type: z.literal("function_call"),
  id: id.nullish(),
  call_id: id.min(1),
  name: id.min(1),
  arguments: bounded(RESPONSES_LIMITS.toolCallArguments).refine(isJsonText, { error: "the arguments of a function call must be a JSON text." }),
  status: itemStatus.nullish(),
});

const toolOutput = stringOr(text, contentParts(toolOutputPart), `Expected a string or an array of up to ${RESPONSES_LIMITS.contentParts} content parts.`);

const functionCallOutputItem = z.object({
  type: z.literal("function_call_output"),
  id: id.nullish(),
  call_id: id.min(1),
  output: toolOutput,
  status: itemStatus.nullish(),
});

const reasoningItem = z.object({
  type: z.literal("reasoning"),
  id: id.nullish(),
  summary: z.array(z.object({ type: z.literal("summary_text"), text })).max(RESPONSES_LIMITS.reasoningParts),
  content: z.array(z.object({ type: z.enum(["reasoning_text", "text"]), text })).max(RESPONSES_LIMITS.reasoningParts).nullish(),
  encrypted_content: text.nullish(),
  status: itemStatus.nullish(),
});

const customToolCallItem = z.object({
  type: z.literal("custom_tool_call"),
  id: id.nullish(),
  call_id: id.min(1),
  name: id.min(1),
  input: bounded(RESPONSES_LIMITS.toolCallArguments),
  status: itemStatus.nullish(),
});

const customToolCallOutputItem = z.object({
  type: z.literal("custom_tool_call_output"),
  id: id.nullish(),
  call_id: id.min(1),
  output: toolOutput,
});

const itemReference = z.object({ type: z.literal("item_reference"), id: id.min(1) });

const ITEM_TYPES = "'message', 'function_call', 'function_call_output', 'reasoning', 'custom_tool_call', 'custom_tool_call_output' or 'item_reference'";

/**
 * One input item. The SDKs send messages without `type` (`{role, content}`, OpenAI's "easy input
 * message"), and the spec lets an item reference omit it (`{id}`): both are given their type here.
 */
export const inputItemSchema = z.preprocess(
  (value) => {
    if (value === null || typeof value !== "object" || Array.isArray(value)) return value;
    const item = value as Record<string, unknown>;
    if (item.type != null) return value;
    if (item.role !== undefined) return { ...item, type: "message" };
    if (item.id !== undefined) return { ...item, type: "item_reference" };
    return value;
  },
  z.discriminatedUnion(
    "type",
    [messageItem, functionCallItem, functionCallOutputItem, reasoningItem, customToolCallItem, customToolCallOutputItem, itemReference],
    { error: (issue) => (issue.input !== null && typeof issue.input === "object" ? `Each input item needs a 'type' of ${ITEM_TYPES}.` : "Expected an input item object.") },
  ),
);

// Tools.

const functionTool = z.object({
  type: z.literal("function"),
  name: toolName,
  description: bounded(RESPONSES_LIMITS.toolDescription).nullish(),
  parameters: jsonSchema.nullish(),
  strict: z.boolean().nullish(),
});

const customToolFormat = z.discriminatedUnion(
  "type",
  [
    z.object({ type: z.literal("text") }),
    z.object({
      type: z.literal("grammar"),
      syntax: z.enum(["lark", "regex"]),
      definition: bounded(RESPONSES_LIMITS.grammarDefinition).min(1),
    }),
  ],
  { error: "Expected a 'type' of 'text' or 'grammar'." },
);

const customTool = z.object({
  type: z.literal("custom"),
  name: toolName,
  description: bounded(RESPONSES_LIMITS.toolDescription).nullish(),
  format: customToolFormat.nullish(),
});

/** The type of a tool as sent, for the refusal of built-in tools (short values only, never a whole body). */
function toolTypeOf(input: unknown): string | undefined {
  if (input === null || typeof input !== "object") return undefined;
  const type = (input as Record<string, unknown>).type;
  return typeof type === "string" && type.length <= 64 ? type : undefined;
}

const tool = z.discriminatedUnion("type", [functionTool, customTool], {
  error: (issue) => {
    const type = toolTypeOf(issue.input);
    const what = type === undefined ? "Each tool needs a 'type'" : `Tools of type '${type}' are not supported`;
    return `${what}: Turnpike serves tools of type 'function' and 'custom' (built-in tools such as 'web_search' or 'file_search' are not available).`;
  },
});

const namedTool = z.object({ type: z.enum(["function", "custom"]), name: id });

const toolChoice = z.union(
  [
    z.enum(["none", "auto", "required"]),
    z.object({ type: z.literal("function"), name: id }),
    z.object({ type: z.literal("custom"), name: id }),
    z.object({
      type: z.literal("allowed_tools"),
      mode: z.enum(["none", "auto", "required"]).nullish(),
      tools: z.array(namedTool).min(1).max(RESPONSES_LIMITS.tools),
    }),
  ],
  {
    error:
      "Expected 'none', 'auto', 'required', {\"type\": \"function\", \"name\": ...}, {\"type\": \"custom\", \"name\": ...} or " +
      "{\"type\": \"allowed_tools\", \"mode\": ..., \"tools\": [...]}.",
  },
);

// Text, reasoning, metadata.

const textFormat = z.discriminatedUnion(
  "type",
  [
    z.object({ type: z.literal("text") }),
    z.object({ type: z.literal("json_object") }),
    z.object({
      type: z.literal("json_schema"),
      name: toolName,
      description: bounded(RESPONSES_LIMITS.toolDescription).nullish(),
      schema: jsonSchema,
      strict: z.boolean().nullish(),
    }),
  ],
  { error: "Expected a 'type' of 'text', 'json_object' or 'json_schema'." },
);

const reasoningEffort = z.enum(["none", "minimal", "low", "medium", "high", "xhigh"]);
const reasoningSummary = z.enum(["auto", "concise", "detailed"]);

/** `metadata`: up to 16 string pairs, counted before any is read (a million entries costs one count). */
const metadata = z
  .custom<Record<string, unknown>>((input) => input !== null && typeof input === "object" && !Array.isArray(input), { error: "Expected an object of string values." })
  .check((context) => {
    if (Object.keys(context.value).length > RESPONSES_LIMITS.metadataEntries) {
      context.issues.push({ code: "custom", message: `must have at most ${RESPONSES_LIMITS.metadataEntries} entries.`, input: context.value });
      return;
    }
    for (const key of Object.keys(context.value)) {
      if (key.length > RESPONSES_LIMITS.metadataKey) {
        context.issues.push({ code: "custom", path: [key.slice(0, 80)], message: `keys must be at most ${RESPONSES_LIMITS.metadataKey} characters.`, input: key });
        return;
      }
    }
  })
  .pipe(z.record(z.string(), bounded(RESPONSES_LIMITS.metadataValue)));

const probability = (min: number, max: number) => z.number().min(min).max(max).nullish();

const responsesRequestShape = {
  model: z.string().min(1).max(RESPONSES_LIMITS.id),
  input: stringOr(text, z.array(inputItemSchema).max(RESPONSES_LIMITS.items), `Expected a string or an array of up to ${RESPONSES_LIMITS.items} input items.`).nullish(),
  previous_response_id: id.min(1).nullish(),
  include: z.array(bounded(RESPONSES_LIMITS.includeValue)).max(RESPONSES_LIMITS.includeEntries).nullish(),
  tools: z.array(tool).max(RESPONSES_LIMITS.tools).nullish(),
  tool_choice: toolChoice.nullish(),
  metadata: metadata.nullish(),
  text: z.object({ format: textFormat.nullish(), verbosity: z.enum(["low", "medium", "high"]).nullish() }).nullish(),
  temperature: probability(0, 2),
  top_p: probability(0, 1),
  presence_penalty: probability(-2, 2),
  frequency_penalty: probability(-2, 2),
  parallel_tool_calls: z.boolean().nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_obfuscation: z.boolean().nullish() }).nullish(),
  background: z.boolean().nullish(),
  /** The spec's minimum is 16. */
  max_output_tokens: z.number().int().min(16).max(RESPONSES_LIMITS.outputTokens).nullish(),
  max_tool_calls: z.number().int().min(1).max(RESPONSES_LIMITS.toolCalls).nullish(),
  /** `generate_summary` is OpenAI's deprecated name of `summary`. */
  reasoning: z.object({ effort: reasoningEffort.nullish(), summary: reasoningSummary.nullish(), generate_summary: reasoningSummary.nullish() }).nullish(),
  safety_identifier: bounded(RESPONSES_LIMITS.identifier).nullish(),
  /** Used as the upstream affinity key (requests sharing it go to the member that cached their prefix). */
  prompt_cache_key: bounded(RESPONSES_LIMITS.identifier).nullish(),
  truncation: z.enum(["auto", "disabled"]).nullish(),
  instructions: text.nullish(),
  /** Defaults to true. */
  store: z.boolean().nullish(),
  /** The band it queues in when the engines are saturated, billed at the plan's multiplier: `auto` (the default tier), `default`, `flex` or `priority`. */
  service_tier: z.enum(REQUESTED_SERVICE_TIERS).nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  // OpenAI's fields beyond the spec.
  /** Deprecated by OpenAI in favour of `safety_identifier` and `prompt_cache_key`; echoed. */
  user: bounded(RESPONSES_LIMITS.user).nullish(),
  // Recognised only to refuse them clearly (see `rejectUnsupported` in to-generation.ts).
  conversation: z.unknown().optional(),
  prompt: z.unknown().optional(),
};

/** The tool choice's named tools, each with its path, for the check that they are among `tools`. */
function namedChoices(choice: ResponsesToolChoice): Array<{ type: "function" | "custom"; name: string; path: PropertyKey[] }> {
  if (typeof choice === "string") return [];
  if (choice.type === "allowed_tools") return choice.tools.map((named, index) => ({ ...named, path: ["tool_choice", "tools", index, "name"] }));
  return [{ type: choice.type, name: choice.name, path: ["tool_choice", "name"] }];
}

/**
 * The schema of the body. Its checks, after the fields are valid: tool names unique; a tool
 * choice that names a tool names one of `tools`, of its kind; `required` needs tools;
 * `stream_options` needs `stream`; `background` needs the response stored (as OpenAI refuses
 * `background` with `store: false`); `include` holds only known values; there is some input.
 */
export const responsesRequestSchema = z.object(responsesRequestShape).check((context) => {
  const request = context.value;
  const issue = (path: PropertyKey[], message: string, input: unknown): void => {
    context.issues.push({ code: "custom", path, message, input });
  };
  const tools = request.tools ?? [];
  const kinds = new Map<string, "function" | "custom">();
  for (const [index, each] of tools.entries()) {
    if (kinds.has(each.name)) return issue(["tools", index, "name"], `the tool name '${each.name}' is given twice; tool names must be unique.`, each.name);
    kinds.set(each.name, each.type);
  }
  const choice = request.tool_choice;
  if (choice != null) {
    if (choice === "required" && tools.length === 0) return issue(["tool_choice"], "'required' needs 'tools': there is no tool to call.", choice);
    for (const named of namedChoices(choice)) {
      const kind = kinds.get(named.name);
      if (kind === undefined) return issue(named.path, `names the ${named.type} tool '${named.name}', which is not among 'tools'.`, named.name);
      if (kind !== named.type) return issue(named.path, `names '${named.name}' as a ${named.type} tool, but it is a ${kind} tool in 'tools'.`, named.name);
    }
  }
  if (request.stream_options != null && request.stream !== true) return issue(["stream_options"], "'stream_options' is only allowed when 'stream' is true.", request.stream_options);
  if (request.background === true && request.store === false) {
    return issue(["background"], "a background response must be stored: 'background: true' cannot be used with 'store: false'.", request.background);
  }
  const unknown = (request.include ?? []).filter((value) => !KNOWN_INCLUDE_SET.has(value));
  if (unknown.length > 0) {
    const listed = unknown.slice(0, 4).map((value) => JSON.stringify(value.slice(0, 64))).join(", ");
    return issue(["include"], `unknown value${unknown.length === 1 ? "" : "s"} ${listed}${unknown.length > 4 ? " and more" : ""}; supported values are ${KNOWN_INCLUDE_VALUES.map((value) => `'${value}'`).join(", ")}.`, unknown);
  }
  if (request.input == null && request.previous_response_id == null) return issue(["input"], "this field is required (or 'previous_response_id').", request.input);
});

export type ResponsesRequest = z.output<typeof responsesRequestSchema>;
export type ResponsesInputItem = z.output<typeof inputItemSchema>;
export type ResponsesMessageItem = z.output<typeof messageItem>;
export type ResponsesMessagePart = z.output<typeof messagePart>;
export type ResponsesToolOutputPart = z.output<typeof toolOutputPart>;
export type ResponsesTool = z.output<typeof tool>;
export type ResponsesToolChoice = z.output<typeof toolChoice>;
export type ResponsesTextFormat = z.output<typeof textFormat>;
export type ResponsesCustomToolFormat = z.output<typeof customToolFormat>;
export type ReasoningEffort = z.output<typeof reasoningEffort>;
export type ReasoningSummary = z.output<typeof reasoningSummary>;
