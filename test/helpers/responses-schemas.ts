/**
 * The Responses API's answer and stream, written from the Open Responses specification
 * (`openresponses/openresponses`, `public/openapi/openapi.json`) independently of the server's own
 * types: zod schemas of the `ResponseResource` and of every stream event (every required field,
 * with its type), and `checkEventGrammar`, the order rules a stream must follow. Tests check what
 * the server sends against these, so a server type that drifted from the spec cannot pass itself.
 */
import { isDeepStrictEqual } from "node:util";
import { z } from "zod";

const integer = z.number().int();
const nullable = <Schema extends z.ZodType>(schema: Schema) => schema.nullable();

const topLogprob = z.object({ token: z.string(), logprob: z.number(), bytes: z.array(integer) });
const logprob = topLogprob.extend({ top_logprobs: z.array(topLogprob) });

const urlCitation = z.object({ type: z.literal("url_citation"), url: z.string(), start_index: integer, end_index: integer, title: z.string() });

const inputText = z.object({ type: z.literal("input_text"), text: z.string() });
const outputText = z.object({ type: z.literal("output_text"), text: z.string(), annotations: z.array(urlCitation), logprobs: z.array(logprob).optional() });
const textContent = z.object({ type: z.literal("text"), text: z.string() });
const summaryText = z.object({ type: z.literal("summary_text"), text: z.string() });
const reasoningText = z.object({ type: z.literal("reasoning_text"), text: z.string() });
const refusal = z.object({ type: z.literal("refusal"), refusal: z.string() });
const inputImage = z.object({ type: z.literal("input_image"), image_url: nullable(z.string()), detail: z.enum(["low", "high", "auto"]) });
const inputFile = z.object({ type: z.literal("input_file"), filename: z.string().optional(), file_url: z.string().optional() });
const inputVideo = z.object({ type: z.literal("input_video"), video_url: z.string() });

/** A content part of an item or of a content/summary part event (the spec's union). */
const contentPart = z.discriminatedUnion("type", [inputText, outputText, textContent, summaryText, reasoningText, refusal, inputImage, inputFile]);

const itemStatus = z.enum(["in_progress", "completed", "incomplete"]);

const message = z.object({
  type: z.literal("message"),
  id: z.string(),
  status: itemStatus,
  role: z.enum(["user", "assistant", "system", "developer"]),
  content: z.array(z.discriminatedUnion("type", [inputText, outputText, textContent, summaryText, reasoningText, refusal, inputImage, inputFile, inputVideo])),
});
const functionCall = z.object({ type: z.literal("function_call"), id: z.string(), call_id: z.string(), name: z.string(), arguments: z.string(), status: itemStatus });
const functionCallOutput = z.object({
  type: z.literal("function_call_output"),
  id: z.string(),
  call_id: z.string(),
  output: z.union([z.string(), z.array(z.discriminatedUnion("type", [inputText, inputImage, inputFile]))]),
  status: itemStatus,
});
const reasoning = z.object({ type: z.literal("reasoning"), id: z.string(), summary: z.array(contentPart), content: z.array(contentPart).optional(), encrypted_content: z.string().optional() });
const compaction = z.object({ type: z.literal("compaction"), id: z.string(), encrypted_content: z.string() });
/**
 * OpenAI's custom tool call (not in the Open Responses document, which lets providers add items);
 * with `id` and `status`, which the spec requires of every item.
 */
const customToolCall = z.object({ type: z.literal("custom_tool_call"), id: z.string(), call_id: z.string(), name: z.string(), input: z.string(), status: itemStatus });

/** The spec's `ItemField`, and OpenAI's custom tool call. */
export const outputItemSchema = z.discriminatedUnion("type", [message, functionCall, functionCallOutput, reasoning, compaction, customToolCall]);

const functionTool = z.object({
  type: z.literal("function"),
  name: z.string(),
  description: nullable(z.string()),
  parameters: nullable(z.record(z.string(), z.unknown())),
  strict: nullable(z.boolean()),
});
/** OpenAI's custom tool, as it lists it. */
const customTool = z.object({
  type: z.literal("custom"),
  name: z.string(),
  description: nullable(z.string()).optional(),
  format: z.discriminatedUnion("type", [z.object({ type: z.literal("text") }), z.object({ type: z.literal("grammar"), syntax: z.enum(["lark", "regex"]), definition: z.string() })]).optional(),
});

const toolChoiceValue = z.enum(["none", "auto", "required"]);
const namedTool = z.object({ type: z.enum(["function", "custom"]), name: z.string().optional() });
const toolChoice = z.union([toolChoiceValue, namedTool, z.object({ type: z.literal("allowed_tools"), tools: z.array(namedTool), mode: toolChoiceValue })]);

const textField = z.object({
  format: z.discriminatedUnion("type", [
    z.object({ type: z.literal("text") }),
    z.object({ type: z.literal("json_object") }),
    z.object({
      type: z.literal("json_schema"),
      name: z.string(),
      description: nullable(z.string()),
      // The document types `schema` as null here (a generator's artefact: the request's is an
      // object); OpenAI echoes the schema. Either is accepted.
      schema: nullable(z.record(z.string(), z.unknown())),
      strict: z.boolean(),
    }),
  ]),
  verbosity: z.enum(["low", "medium", "high"]).optional(),
});

const usage = z.object({
  input_tokens: integer,
  output_tokens: integer,
  total_tokens: integer,
  input_tokens_details: z.object({ cached_tokens: integer }),
  output_tokens_details: z.object({ reasoning_tokens: integer }),
});

/** The spec's `ResponseResource`: every required field, with its type. */
export const responseResourceSchema = z
  .object({
    id: z.string(),
    object: z.literal("response"),
    created_at: integer,
    completed_at: nullable(integer),
    status: z.enum(["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]),
    incomplete_details: nullable(z.object({ reason: z.string() })),
    model: z.string(),
    previous_response_id: nullable(z.string()),
    instructions: nullable(z.string()),
    output: z.array(outputItemSchema),
    error: nullable(z.object({ code: z.string(), message: z.string() })),
    tools: z.array(z.discriminatedUnion("type", [functionTool, customTool])),
    tool_choice: toolChoice,
    truncation: z.enum(["auto", "disabled"]),
    parallel_tool_calls: z.boolean(),
    text: textField,
    top_p: z.number(),
    presence_penalty: z.number(),
    frequency_penalty: z.number(),
    top_logprobs: integer,
    temperature: z.number(),
    // `minimal` is described by the document's enum descriptions, though not listed in its values.
    reasoning: nullable(z.object({ effort: nullable(z.enum(["none", "minimal", "low", "medium", "high", "xhigh"])), summary: nullable(z.enum(["concise", "detailed", "auto"])) })),
    usage: nullable(usage),
    max_output_tokens: nullable(integer),
    max_tool_calls: nullable(integer),
    store: z.boolean(),
    background: z.boolean(),
    service_tier: z.string(),
    metadata: z.record(z.string(), z.string()),
    safety_identifier: nullable(z.string()),
    prompt_cache_key: nullable(z.string()),
  })
  .check((context) => {
    // What the spec's prose requires beyond the field types.
    const resource = context.value;
    const push = (path: PropertyKey[], message: string) => context.issues.push({ code: "custom", path, message, input: resource });
    if (resource.status === "incomplete" && resource.incomplete_details === null) push(["incomplete_details"], "an incomplete response says why");
    if (resource.status !== "incomplete" && resource.incomplete_details !== null) push(["incomplete_details"], "only an incomplete response has incomplete_details");
    if (resource.status === "failed" && resource.error === null) push(["error"], "a failed response carries its error");
    if (resource.status !== "failed" && resource.error !== null) push(["error"], "only a failed response carries an error");
    if (resource.usage !== null && resource.usage.total_tokens !== resource.usage.input_tokens + resource.usage.output_tokens) push(["usage", "total_tokens"], "total_tokens = input_tokens + output_tokens");
  });

const sequenced = { sequence_number: integer.min(0) };
const lifecycle = <Type extends string>(type: Type) => z.object({ type: z.literal(type), ...sequenced, response: responseResourceSchema });
const inContentPart = { ...sequenced, item_id: z.string(), output_index: integer, content_index: integer };
const inSummaryPart = { ...sequenced, item_id: z.string(), output_index: integer, summary_index: integer };
const inItem = { ...sequenced, item_id: z.string(), output_index: integer };

/** Every stream event of the spec (and OpenAI's reasoning text and custom tool events), by type. */
export const eventSchemas = {
  "response.created": lifecycle("response.created"),
  "response.queued": lifecycle("response.queued"),
  "response.in_progress": lifecycle("response.in_progress"),
  "response.completed": lifecycle("response.completed"),
  "response.failed": lifecycle("response.failed"),
  "response.incomplete": lifecycle("response.incomplete"),
  "response.output_item.added": z.object({ type: z.literal("response.output_item.added"), ...sequenced, output_index: integer, item: nullable(outputItemSchema) }),
  "response.output_item.done": z.object({ type: z.literal("response.output_item.done"), ...sequenced, output_index: integer, item: nullable(outputItemSchema) }),
  "response.reasoning_summary_part.added": z.object({ type: z.literal("response.reasoning_summary_part.added"), ...inSummaryPart, part: contentPart }),
  "response.reasoning_summary_part.done": z.object({ type: z.literal("response.reasoning_summary_part.done"), ...inSummaryPart, part: contentPart }),
  "response.content_part.added": z.object({ type: z.literal("response.content_part.added"), ...inContentPart, part: contentPart }),
  "response.content_part.done": z.object({ type: z.literal("response.content_part.done"), ...inContentPart, part: contentPart }),
  "response.output_text.delta": z.object({ type: z.literal("response.output_text.delta"), ...inContentPart, delta: z.string(), logprobs: z.array(logprob).optional(), obfuscation: z.string().optional() }),
  "response.output_text.done": z.object({ type: z.literal("response.output_text.done"), ...inContentPart, text: z.string(), logprobs: z.array(logprob).optional() }),
  "response.refusal.delta": z.object({ type: z.literal("response.refusal.delta"), ...inContentPart, delta: z.string() }),
  "response.refusal.done": z.object({ type: z.literal("response.refusal.done"), ...inContentPart, refusal: z.string() }),
  "response.reasoning.delta": z.object({ type: z.literal("response.reasoning.delta"), ...inContentPart, delta: z.string(), obfuscation: z.string().optional() }),
  "response.reasoning.done": z.object({ type: z.literal("response.reasoning.done"), ...inContentPart, text: z.string() }),
  /** OpenAI's name of `response.reasoning.delta`/`.done`. */
  "response.reasoning_text.delta": z.object({ type: z.literal("response.reasoning_text.delta"), ...inContentPart, delta: z.string(), obfuscation: z.string().optional() }),
  "response.reasoning_text.done": z.object({ type: z.literal("response.reasoning_text.done"), ...inContentPart, text: z.string() }),
  "response.reasoning_summary_text.delta": z.object({ type: z.literal("response.reasoning_summary_text.delta"), ...inSummaryPart, delta: z.string(), obfuscation: z.string().optional() }),
  "response.reasoning_summary_text.done": z.object({ type: z.literal("response.reasoning_summary_text.done"), ...inSummaryPart, text: z.string() }),
  "response.output_text.annotation.added": z.object({ type: z.literal("response.output_text.annotation.added"), ...inContentPart, annotation_index: integer, annotation: nullable(urlCitation) }),
  "response.function_call_arguments.delta": z.object({ type: z.literal("response.function_call_arguments.delta"), ...inItem, delta: z.string(), obfuscation: z.string().optional() }),
  "response.function_call_arguments.done": z.object({ type: z.literal("response.function_call_arguments.done"), ...inItem, arguments: z.string() }),
  /** OpenAI's custom tool call events. */
  "response.custom_tool_call_input.delta": z.object({ type: z.literal("response.custom_tool_call_input.delta"), ...inItem, delta: z.string(), obfuscation: z.string().optional() }),
  "response.custom_tool_call_input.done": z.object({ type: z.literal("response.custom_tool_call_input.done"), ...inItem, input: z.string() }),
  error: z.object({
    type: z.literal("error"),
    ...sequenced,
    error: z.object({ type: z.string(), code: nullable(z.string()), message: z.string(), param: nullable(z.string()), headers: z.record(z.string(), z.string()).optional() }),
  }),
} as const;

export type EventType = keyof typeof eventSchemas;

/** Any stream event. */
export const responseStreamEventSchema = z.discriminatedUnion("type", Object.values(eventSchemas) as unknown as [typeof eventSchemas.error, ...Array<(typeof eventSchemas)[EventType]>]);

const TERMINAL: Record<string, string> = { "response.completed": "completed", "response.incomplete": "incomplete", "response.failed": "failed" };

/** The text event types of each streamable part type: its delta, its done and the done's text field. */
const PART_TEXT_EVENTS: Record<string, { delta: string[]; done: string[]; field: string }> = {
  output_text: { delta: ["response.output_text.delta"], done: ["response.output_text.done"], field: "text" },
  refusal: { delta: ["response.refusal.delta"], done: ["response.refusal.done"], field: "refusal" },
  reasoning_text: { delta: ["response.reasoning.delta", "response.reasoning_text.delta"], done: ["response.reasoning.done", "response.reasoning_text.done"], field: "text" },
};

/** The text a finished part holds. */
function partText(part: Record<string, unknown>): string | undefined {
  const value = part.type === "refusal" ? part.refusal : part.text;
  return typeof value === "string" ? value : undefined;
}

type OpenPart = { type: string; text: string; textDone: boolean; closed: boolean; done?: unknown };
type OpenItem = {
  id: string;
  type: string;
  outputIndex: number;
  closed: boolean;
  parts: OpenPart[];
  summaries: OpenPart[];
  /** Function call arguments or custom tool input, from deltas. */
  callText: string;
  callTextDone: boolean;
};

export type GrammarOptions = {
  /** The resource `GET /v1/responses/{id}` returned: the terminal event's response must equal it. */
  finalResource?: unknown;
  /** Require the spec's literal `[DONE]` after the terminal event (pass the SSE data as the string "[DONE]"). */
  requireDone?: boolean;
};

/**
 * Checks a stream's events (parsed JSON objects, in order; a trailing "[DONE]" string allowed)
 * against the spec's schemas and order rules, and returns every problem found (none: a valid
 * stream). The rules: each event valid for its type; `sequence_number` 0, 1, 2…; `response.created`
 * first, then (`response.queued`, for a background response, and) `response.in_progress` before any
 * output; items added at the next `output_index`, announced `in_progress` and closed by their
 * `.done` with the same id; content and summary parts added at the next index of an open item and
 * closed by their `.done`; deltas only inside their open part (or open call item), whose `.done`
 * text is the deltas joined and precedes the part's `.done`; nothing about an item after its
 * `.done`; an `error` event only right before `response.failed`; exactly one terminal event, last,
 * whose response's status matches it, whose output is the items as their `.done` events gave
 * them, with no item left open unless it failed, and (given) equal to `finalResource`.
 */
export function checkEventGrammar(events: readonly unknown[], options: GrammarOptions = {}): string[] {
  const problems: string[] = [];
  const problem = (index: number, message: string) => problems.push(`event ${index}: ${message}`);
  let list = [...events];
  if (list.at(-1) === "[DONE]") list = list.slice(0, -1);
  else if (options.requireDone === true) problems.push("the stream does not end with [DONE]");
  if (list.length === 0) return [...problems, "the stream holds no events"];

  const items: OpenItem[] = [];
  const byId = new Map<string, OpenItem>();
  const doneItems: unknown[] = [];
  let stage: "start" | "created" | "queued" | "in_progress" | "ended" = "start";
  let responseId: string | undefined;
  let terminal: { type: string; response: Record<string, unknown> } | undefined;
  let errorAt: number | undefined;

  list.forEach((raw, index) => {
    if (raw === "[DONE]") return problem(index, "[DONE] before the end of the stream");
    if (raw === null || typeof raw !== "object") return problem(index, "not a JSON object");
    const event = raw as Record<string, unknown>;
    const type = String(event.type);
    if (event.sequence_number !== index) problem(index, `sequence_number ${String(event.sequence_number)}, expected ${index}`);
    if (stage === "ended") problem(index, `'${type}' after the terminal event`);
    if (errorAt !== undefined && errorAt === index - 1 && type !== "response.failed") problem(index, `'${type}' after an error event; only response.failed may follow it`);
    const schema = (eventSchemas as Record<string, z.ZodType>)[type];
    if (schema === undefined) {
      // The spec lets implementors add events, prefixed with their slug.
      if (!type.includes(":")) problem(index, `unknown event type '${type}'`);
      return;
    }
    const parsed = schema.safeParse(event);
    if (!parsed.success) {
      const first = parsed.error.issues[0]!;
      problem(index, `'${type}' does not match the spec: ${first.path.join(".")}: ${first.message}`);
      return;
    }
    if (index === 0 && type !== "response.created") problem(index, `the first event is '${type}', not response.created`);

    if ("response" in event && type.startsWith("response.") && event.response !== null && typeof event.response === "object") {
      const response = event.response as Record<string, unknown>;
      if (responseId === undefined) responseId = String(response.id);
      else if (response.id !== responseId) problem(index, `response id ${String(response.id)} differs from ${responseId}`);
    }

    const item = (key: string): OpenItem | undefined => {
      const found = byId.get(String(event.item_id));
      if (found === undefined) {
        problem(index, `'${type}' names the item '${String(event.item_id)}', which was never added`);
        return undefined;
      }
      if (found.outputIndex !== event.output_index) problem(index, `'${type}' gives output_index ${String(event.output_index)} for an item at ${found.outputIndex}`);
      if (found.closed) problem(index, `'${type}' for the item '${found.id}' after its output_item.done (${key})`);
      return found;
    };
    const beforeOutput = () => {
      if (stage !== "in_progress") problem(index, `'${type}' before response.in_progress`);
    };

    switch (type) {
      case "response.created": {
        if (index !== 0) problem(index, "response.created is not the first event");
        const status = (event.response as { status: string }).status;
        if (status !== "queued" && status !== "in_progress") problem(index, `response.created with status '${status}'`);
        stage = "created";
        return;
      }
      case "response.queued":
        if (stage !== "created") problem(index, "response.queued not right after response.created");
        stage = "queued";
        return;
      case "response.in_progress":
        if (stage !== "created" && stage !== "queued") problem(index, "response.in_progress not after response.created (or response.queued)");
        if ((event.response as { status: string }).status !== "in_progress") problem(index, "response.in_progress whose response is not in_progress");
        stage = "in_progress";
        return;
      case "response.completed":
      case "response.incomplete":
      case "response.failed": {
        const response = event.response as Record<string, unknown>;
        if (response.status !== TERMINAL[type]) problem(index, `'${type}' whose response has status '${String(response.status)}'`);
        if (type !== "response.failed") beforeOutput();
        terminal = { type, response };
        stage = "ended";
        return;
      }
      case "error":
        errorAt = index;
        return;
      case "response.output_item.added": {
        beforeOutput();
        const added = event.item as { id: string; type: string; status?: string };
        if (event.output_index !== items.length) problem(index, `output_item.added at output_index ${String(event.output_index)}, expected ${items.length}`);
        if (added.status !== undefined && added.status !== "in_progress") problem(index, `output_item.added with status '${added.status}'`);
        if (byId.has(added.id)) problem(index, `the item id '${added.id}' is added twice`);
        const open: OpenItem = { id: added.id, type: added.type, outputIndex: Number(event.output_index), closed: false, parts: [], summaries: [], callText: "", callTextDone: false };
        items.push(open);
        byId.set(added.id, open);
        return;
      }
      case "response.output_item.done": {
        const done = event.item as Record<string, unknown> & { id: string; type: string; status?: string };
        const open = items[Number(event.output_index)];
        if (open === undefined) return problem(index, `output_item.done at output_index ${String(event.output_index)}, which was never added`);
        if (open.closed) return problem(index, `output_item.done twice for output_index ${open.outputIndex}`);
        if (open.id !== done.id || open.type !== done.type) problem(index, `output_item.done for '${done.id}' (${done.type}) at the place of '${open.id}' (${open.type})`);
        if (done.status === "in_progress") problem(index, "output_item.done with status 'in_progress'");
        const unclosed = [...open.parts, ...open.summaries].filter((part) => !part.closed).length;
        if (unclosed > 0) problem(index, `output_item.done for '${open.id}' with ${unclosed} part(s) still open`);
        const content = done.content;
        if (open.parts.length > 0 && Array.isArray(content)) {
          if (!isDeepStrictEqual(content, open.parts.map((part) => part.done))) problem(index, `the item's content differs from its content_part.done parts`);
        } else if (open.parts.length > 0) problem(index, "the item has content parts but its done item has no content");
        if (open.type === "function_call" && (done.arguments !== open.callText || !open.callTextDone)) problem(index, "the function call's arguments differ from its deltas (or were never done)");
        if (open.type === "custom_tool_call" && (done.input !== open.callText || !open.callTextDone)) problem(index, "the custom tool call's input differs from its deltas (or was never done)");
        open.closed = true;
        doneItems.push(done);
        return;
      }
      case "response.content_part.added":
      case "response.reasoning_summary_part.added": {
        const open = item(type);
        if (open === undefined) return;
        const summary = type === "response.reasoning_summary_part.added";
        const parts = summary ? open.summaries : open.parts;
        const at = Number(summary ? event.summary_index : event.content_index);
        if (at !== parts.length) problem(index, `'${type}' at index ${at}, expected ${parts.length}`);
        const part = event.part as Record<string, unknown>;
        if (partText(part) !== "") problem(index, `'${type}' whose part already holds text`);
        parts.push({ type: String(part.type), text: "", textDone: false, closed: false });
        return;
      }
      case "response.content_part.done":
      case "response.reasoning_summary_part.done": {
        const open = item(type);
        if (open === undefined) return;
        const summary = type === "response.reasoning_summary_part.done";
        const part = (summary ? open.summaries : open.parts)[Number(summary ? event.summary_index : event.content_index)];
        if (part === undefined || part.closed) return problem(index, `'${type}' for a part that is not open`);
        const done = event.part as Record<string, unknown>;
        if (done.type !== part.type) problem(index, `'${type}' with a '${String(done.type)}' part for a '${part.type}' part`);
        if (!part.textDone) problem(index, `'${type}' before the part's text was done`);
        if (partText(done) !== part.text) problem(index, `'${type}' whose text differs from its deltas`);
        part.closed = true;
        part.done = done;
        return;
      }
      case "response.function_call_arguments.delta":
      case "response.function_call_arguments.done":
      case "response.custom_tool_call_input.delta":
      case "response.custom_tool_call_input.done": {
        const open = item(type);
        if (open === undefined) return;
        const kind = type.startsWith("response.function_call") ? "function_call" : "custom_tool_call";
        if (open.type !== kind) return problem(index, `'${type}' for a '${open.type}' item`);
        if (open.callTextDone) return problem(index, `'${type}' after the call's text was done`);
        if (type.endsWith(".delta")) open.callText += String(event.delta);
        else {
          const final = kind === "function_call" ? event.arguments : event.input;
          if (final !== open.callText) problem(index, `'${type}' whose text differs from its deltas`);
          open.callTextDone = true;
        }
        return;
      }
      case "response.reasoning_summary_text.delta":
      case "response.reasoning_summary_text.done":
      default: {
        // Text deltas and dones of a content or summary part.
        const open = item(type);
        if (open === undefined) return;
        const summary = type.startsWith("response.reasoning_summary_text.");
        const part = (summary ? open.summaries : open.parts)[Number(summary ? event.summary_index : event.content_index)];
        if (part === undefined || part.closed) return problem(index, `'${type}' outside an open part`);
        const rules = summary ? { delta: ["response.reasoning_summary_text.delta"], done: ["response.reasoning_summary_text.done"], field: "text" } : PART_TEXT_EVENTS[part.type];
        if (type === "response.output_text.annotation.added") {
          if (part.type !== "output_text") problem(index, `'${type}' inside a '${part.type}' part`);
          return;
        }
        if (rules === undefined) return problem(index, `'${type}' inside a '${part.type}' part, which does not stream`);
        if (![...rules.delta, ...rules.done].includes(type)) return problem(index, `'${type}' inside a '${part.type}' part`);
        if (part.textDone) return problem(index, `'${type}' after the part's text was done`);
        if (rules.delta.includes(type)) part.text += String(event.delta);
        else {
          if (event[rules.field] !== part.text) problem(index, `'${type}' whose text differs from its deltas`);
          part.textDone = true;
        }
        return;
      }
    }
  });

  if (terminal === undefined) problems.push("the stream has no terminal event (response.completed, response.incomplete or response.failed)");
  else {
    if (errorAt !== undefined && terminal.type !== "response.failed") problems.push("an error event that response.failed does not follow");
    const open = items.filter((item) => !item.closed);
    if (terminal.type !== "response.failed" && open.length > 0) problems.push(`'${terminal.type}' with items still open: ${open.map((item) => item.id).join(", ")}`);
    if (!isDeepStrictEqual(terminal.response.output, doneItems)) problems.push(`the terminal response's output differs from the items of the output_item.done events`);
    if (options.finalResource !== undefined && !isDeepStrictEqual(terminal.response, options.finalResource)) problems.push("the terminal response differs from the final resource");
  }
  return problems;
}
