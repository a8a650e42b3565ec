/**
 * The request body of `POST /v1/messages` (Anthropic's Messages API, as the Anthropic SDKs and
 * Claude Code send it), in the API reference's field order, and of `POST /v1/messages/count_tokens`.
 * Unknown fields are accepted and dropped (zod's default), as Anthropic's clients expect; fields
 * are `nullish` where a client may send `null` for "not set". `cache_control` is accepted on every
 * block, tool and system block (prefix caching is automatic: see the README). Every field is
 * bounded (the Responses API's caps), and the cross-field rules are checks of the schema, so a
 * large body is refused in the body worker.
 */
import { z } from "zod";
import { IMAGE_MIME_TYPES } from "../image-url.ts";
import { RESPONSES_LIMITS, stringOr } from "../responses/request.ts";

/** Caps on what a request may hold (the other dialects' caps, see `REQUEST_LIMITS` for why every input is bounded). */
export const MESSAGES_LIMITS = {
  /** Entries of `messages`. */
  messages: RESPONSES_LIMITS.items,
  /** Content blocks in one message, in one tool result, or in `system`. */
  contentBlocks: RESPONSES_LIMITS.contentParts,
  /** Characters of one text (a text block, `system`, a thinking block). */
  text: RESPONSES_LIMITS.text,
  /** Characters of a base64 image's `data` or an image's `url`. */
  image: RESPONSES_LIMITS.imageUrl,
  /** Characters of an id (`model`, a tool use's `id`, `tool_use_id`). */
  id: RESPONSES_LIMITS.id,
  /** Bytes of a tool use's `input` as JSON text. */
  toolInputBytes: RESPONSES_LIMITS.toolCallArguments,
  /** Tools in one request. */
  tools: RESPONSES_LIMITS.tools,
  /** Characters of a tool's `description`. */
  toolDescription: RESPONSES_LIMITS.toolDescription,
  /** Bytes of a tool's `input_schema` as JSON text. */
  schemaBytes: RESPONSES_LIMITS.schemaBytes,
  /** Entries of `stop_sequences`, and characters of each. */
  stopSequences: 16,
  stopLength: 1024,
  /** `max_tokens`. */
  maxTokens: RESPONSES_LIMITS.outputTokens,
  /** Characters of `metadata.user_id` (Anthropic's 256). */
  userId: 256,
} as const;

/** A string of at most `max` characters. */
const bounded = (max: number) => z.string().max(max);
const text = bounded(MESSAGES_LIMITS.text);
const id = bounded(MESSAGES_LIMITS.id);

/** JSON text bytes of a parsed value, or undefined when it nests too deeply to write back. */
function jsonBytes(value: unknown): number | undefined {
  try {
    return Buffer.byteLength(JSON.stringify(value));
  } catch {
    return undefined;
  }
}

/** A JSON object of at most `maxBytes` bytes as JSON text (a tool's `input_schema`, a tool use's `input`). */
const jsonObject = (maxBytes: number, what: string) =>
  z.record(z.string(), z.unknown(), { error: `Expected ${what} (a JSON object).` }).check((context) => {
    const bytes = jsonBytes(context.value);
    if (bytes === undefined || bytes > maxBytes) context.issues.push({ code: "custom", message: `must be ${what} of at most ${maxBytes} bytes as JSON text.`, input: context.value });
  });

/** `cache_control` (`{"type": "ephemeral", "ttl": "5m"}`): accepted wherever Anthropic takes it; prefix caching needs no breakpoints here. */
const cacheControl = z.object({ type: bounded(64), ttl: bounded(16).nullish() }).nullish();

// Content blocks.

const textBlock = z.object({
  type: z.literal("text"),
  text,
  cache_control: cacheControl,
  // Echoed back by clients from earlier answers; they carry nothing the prompt uses.
  citations: z.array(z.unknown()).max(MESSAGES_LIMITS.contentBlocks).nullish(),
});

const imageSource = z.discriminatedUnion(
  "type",
  [
    z.object({ type: z.literal("base64"), media_type: z.enum(IMAGE_MIME_TYPES as [string, ...string[]]), data: bounded(MESSAGES_LIMITS.image) }),
    z.object({ type: z.literal("url"), url: bounded(MESSAGES_LIMITS.image) }),
  ],
  { error: "Expected an image 'source' of type 'base64' (with 'media_type' and 'data') or 'url' (files are not available)." },
);

const imageBlock = z.object({ type: z.literal("image"), source: imageSource, cache_control: cacheControl });

const toolUseBlock = z.object({
  type: z.literal("tool_use"),
  id: id.min(1),
  name: id.min(1),
  input: jsonObject(MESSAGES_LIMITS.toolInputBytes, "the tool's input"),
  cache_control: cacheControl,
});

const TOOL_RESULT_BLOCK_TYPES = "'text' or 'image'";
const toolResultContentBlock = z.discriminatedUnion("type", [textBlock, imageBlock], {
  error: `Each block of a tool result's content needs a 'type' of ${TOOL_RESULT_BLOCK_TYPES}.`,
});

const toolResultBlock = z.object({
  type: z.literal("tool_result"),
  tool_use_id: id.min(1),
  content: stringOr(text, z.array(toolResultContentBlock).max(MESSAGES_LIMITS.contentBlocks), `Expected a string or an array of up to ${MESSAGES_LIMITS.contentBlocks} content blocks.`).optional(),
  is_error: z.boolean().nullish(),
  cache_control: cacheControl,
});

/** A thinking block an earlier answer held, passed back (its text is not part of the prompt). */
const thinkingBlock = z.object({ type: z.literal("thinking"), thinking: text, signature: text.nullish() });
const redactedThinkingBlock = z.object({ type: z.literal("redacted_thinking"), data: text });

/** The type of a block as sent, for the refusal of the blocks Turnpike does not read (short values only). */
function typeOf(input: unknown): string | undefined {
  if (input === null || typeof input !== "object") return undefined;
  const type = (input as Record<string, unknown>).type;
  return typeof type === "string" && type.length <= 64 ? type : undefined;
}

const CONTENT_BLOCK_TYPES = "'text', 'image', 'tool_use', 'tool_result', 'thinking' and 'redacted_thinking'";
const contentBlock = z.discriminatedUnion("type", [textBlock, imageBlock, toolUseBlock, toolResultBlock, thinkingBlock, redactedThinkingBlock], {
  error: (issue) => {
    const type = typeOf(issue.input);
    const what = type === undefined ? "Each content block needs a 'type'" : `Content blocks of type '${type}' are not supported`;
    return `${what}: Turnpike reads ${CONTENT_BLOCK_TYPES} blocks (documents, search results and server tools' blocks are not available).`;
  },
});

/** Which block types each role may send (Anthropic's: images and tool results from the user, tool uses and thinking from the assistant). */
const BLOCKS_OF_ROLE: Record<string, ReadonlySet<string>> = {
  user: new Set(["text", "image", "tool_result"]),
  assistant: new Set(["text", "tool_use", "thinking", "redacted_thinking"]),
  // Claude Code (2.1.x) sends instructions in the conversation as `system` messages for models it does not know.
  system: new Set(["text"]),
};

const message = z
  .object({
    role: z.enum(["user", "assistant", "system"], { error: "Expected a 'role' of 'user' or 'assistant' (or 'system', for instructions in the conversation; the system prompt goes in 'system')." }),
    content: stringOr(text, z.array(contentBlock).max(MESSAGES_LIMITS.contentBlocks), `Expected a string or an array of up to ${MESSAGES_LIMITS.contentBlocks} content blocks.`),
  })
  .check((context) => {
    const { role, content } = context.value;
    if (typeof content === "string") return;
    const allowed = BLOCKS_OF_ROLE[role]!;
    content.forEach((block, index) => {
      if (allowed.has(block.type)) return;
      context.issues.push({
        code: "custom",
        path: ["content", index, "type"],
        message: `'${role}' messages may not hold '${block.type}' blocks (they may hold ${[...allowed].map((type) => `'${type}'`).join(", ")}).`,
        input: block.type,
      });
    });
  });

const systemTextBlock = z.object({ type: z.literal("text", { error: "Expected a 'type' of 'text': the system prompt holds text blocks only." }), text, cache_control: cacheControl, citations: z.array(z.unknown()).max(MESSAGES_LIMITS.contentBlocks).nullish() });

// Tools.

/** Anthropic's rule for tool names. */
const toolName = z.string().regex(/^[a-zA-Z0-9_-]{1,128}$/, { error: "Expected a name of 1 to 128 letters, digits, underscores or dashes." });

const tool = z
  .object({
    /** Absent or `custom`: a client tool. Anthropic's server tools (`web_search_…`, `bash_…`) are refused. */
    type: bounded(64).nullish(),
    name: toolName,
    description: bounded(MESSAGES_LIMITS.toolDescription).nullish(),
    input_schema: jsonObject(MESSAGES_LIMITS.schemaBytes, "a JSON schema"),
    strict: z.boolean().nullish(),
    cache_control: cacheControl,
  })
  .check((context) => {
    const type = context.value.type;
    if (type == null || type === "custom") return;
    context.issues.push({
      code: "custom",
      path: ["type"],
      message: `Tools of type '${type}' are not supported: Turnpike serves client tools (a 'name', a 'description' and an 'input_schema'); Anthropic's server tools are not available.`,
      input: type,
    });
  });

const parallel = { disable_parallel_tool_use: z.boolean().nullish() };
const toolChoice = z.discriminatedUnion(
  "type",
  [
    z.object({ type: z.literal("auto"), ...parallel }),
    z.object({ type: z.literal("any"), ...parallel }),
    z.object({ type: z.literal("tool"), name: id, ...parallel }),
    z.object({ type: z.literal("none") }),
  ],
  { error: "Expected a 'tool_choice' of {\"type\": \"auto\"}, {\"type\": \"any\"}, {\"type\": \"tool\", \"name\": ...} or {\"type\": \"none\"}." },
);

const thinkingDisplay = z.enum(["summarized", "omitted"]).nullish();
const thinking = z.discriminatedUnion(
  "type",
  [
    z.object({ type: z.literal("enabled"), budget_tokens: z.number().int().min(1).max(MESSAGES_LIMITS.maxTokens), display: thinkingDisplay }),
    z.object({ type: z.literal("disabled") }),
    z.object({ type: z.literal("adaptive"), display: thinkingDisplay }),
    z.object({ type: z.literal("between_tools") }),
  ],
  { error: "Expected a 'thinking' of {\"type\": \"enabled\", \"budget_tokens\": ...}, {\"type\": \"adaptive\"} or {\"type\": \"disabled\"}." },
);

const probability = z.number().min(0).max(1).nullish();

const messagesRequestShape = {
  model: z.string().min(1).max(MESSAGES_LIMITS.id),
  messages: z.array(message).min(1).max(MESSAGES_LIMITS.messages),
  /** Required; lowered to what the model's context leaves after the prompt (see the README). */
  max_tokens: z.number().int().min(1).max(MESSAGES_LIMITS.maxTokens),
  metadata: z.object({ user_id: bounded(MESSAGES_LIMITS.userId).nullish() }).nullish(),
  /** `auto` or `standard_only`: both are served in the default tier (Anthropic's priority tier is a commitment, not a request field). */
  service_tier: z.enum(["auto", "standard_only"]).nullish(),
  stop_sequences: z.array(bounded(MESSAGES_LIMITS.stopLength)).max(MESSAGES_LIMITS.stopSequences).nullish(),
  stream: z.boolean().nullish(),
  system: stringOr(text, z.array(systemTextBlock).max(MESSAGES_LIMITS.contentBlocks), `Expected a string or an array of up to ${MESSAGES_LIMITS.contentBlocks} text blocks.`).optional(),
  temperature: probability,
  thinking: thinking.nullish(),
  tool_choice: toolChoice.nullish(),
  tools: z.array(tool).max(MESSAGES_LIMITS.tools).nullish(),
  /** Passed as the `top_k` vendor field, to models whose entry allows it. */
  top_k: z.number().int().min(0).max(1_000_000).nullish(),
  top_p: probability,
};

type CheckedFields = { tools?: Array<{ name: string }> | null; tool_choice?: z.output<typeof toolChoice> | null };

/**
 * The cross-field checks both bodies share: tool names unique, a `tool` choice names one of
 * `tools`, `any` and `tool` need tools.
 */
function checkTools(context: { value: CheckedFields; issues: z.core.$ZodRawIssue[] }): void {
  const request = context.value;
  const issue = (path: PropertyKey[], issueMessage: string, input: unknown): void => {
    context.issues.push({ code: "custom", path, message: issueMessage, input });
  };
  const names = new Set<string>();
  for (const [index, each] of (request.tools ?? []).entries()) {
    if (names.has(each.name)) return issue(["tools", index, "name"], `the tool name '${each.name}' is given twice; tool names must be unique.`, each.name);
    names.add(each.name);
  }
  const choice = request.tool_choice;
  if (choice == null) return;
  if ((choice.type === "any" || choice.type === "tool") && names.size === 0) return issue(["tool_choice"], `'${choice.type}' needs 'tools': there is no tool to call.`, choice);
  if (choice.type === "tool" && !names.has(choice.name)) return issue(["tool_choice", "name"], `names the tool '${choice.name}', which is not among 'tools'.`, choice.name);
}

/** The schema of `POST /v1/messages`. */
export const messagesRequestSchema = z.object(messagesRequestShape).check(checkTools);

/** The schema of `POST /v1/messages/count_tokens`: the same request, without `max_tokens` (or with it, ignored) and never streamed. */
export const countTokensRequestSchema = z
  .object({ ...messagesRequestShape, max_tokens: messagesRequestShape.max_tokens.nullish() })
  .omit({ stream: true, metadata: true, stop_sequences: true, temperature: true, top_k: true, top_p: true })
  .check(checkTools);

export type MessagesRequest = z.output<typeof messagesRequestSchema>;
export type CountTokensRequest = z.output<typeof countTokensRequestSchema>;
export type MessageParam = z.output<typeof message>;
export type ContentBlockParam = z.output<typeof contentBlock>;
export type ToolResultContentBlock = z.output<typeof toolResultContentBlock>;
export type ImageSource = z.output<typeof imageSource>;
