/**
 * Anthropic's Messages API answer and stream, written from Anthropic's API reference (Messages,
 * Streaming Messages, Errors) and the `@anthropic-ai/sdk` types, independently of the server's own
 * schemas: strict zod schemas of the `message`, of every stream event and of the error body, and
 * `checkMessageStream`, the order rules a stream must follow. Tests check what the server sends
 * against these, so a server type that drifted from the spec cannot pass itself.
 */
import { z } from "zod";
import type { SseEvent } from "./sse-events.ts";

const integer = z.number().int().min(0);

const textBlock = z.strictObject({ type: z.literal("text"), text: z.string() });
const thinkingBlock = z.strictObject({ type: z.literal("thinking"), thinking: z.string(), signature: z.string() });
const toolUseBlock = z.strictObject({
  type: z.literal("tool_use"),
  id: z.string().regex(/^toolu_[A-Za-z0-9_-]+$/),
  name: z.string(),
  input: z.record(z.string(), z.unknown()),
});
const contentBlock = z.discriminatedUnion("type", [textBlock, thinkingBlock, toolUseBlock]);

export const usageSchema = z.strictObject({
  input_tokens: integer,
  cache_creation_input_tokens: integer,
  cache_read_input_tokens: integer,
  output_tokens: integer,
  /** The tier that served the request (`Usage.service_tier` in the SDK: `standard`, `priority` or `batch`; null or absent where not said). */
  service_tier: z.enum(["standard", "priority", "batch"]).nullable().optional(),
});

const stopReason = z.enum(["end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"]);

export const messageSchema = z
  .strictObject({
    id: z.string().regex(/^msg_[A-Za-z0-9_-]+$/),
    type: z.literal("message"),
    role: z.literal("assistant"),
    content: z.array(contentBlock),
    model: z.string(),
    stop_reason: stopReason,
    stop_sequence: z.string().nullable(),
  usage: usageSchema,
  })
  .check((context) => {
    const { stop_reason: reason, stop_sequence: sequence } = context.value;
    if ((reason === "stop_sequence") !== (sequence !== null)) context.issues.push({ code: "custom", message: "stop_sequence is set exactly when stop_reason is stop_sequence", input: context.value });
  });

const startedMessage = z.strictObject({
  id: z.string().regex(/^msg_/),
  type: z.literal("message"),
  role: z.literal("assistant"),
  content: z.array(contentBlock).length(0),
  model: z.string(),
  stop_reason: z.null(),
  stop_sequence: z.null(),
  usage: usageSchema,
});

const index = integer;
export const streamEventSchemas = {
  message_start: z.strictObject({ type: z.literal("message_start"), message: startedMessage }),
  content_block_start: z.strictObject({
    type: z.literal("content_block_start"),
    index,
    content_block: z.discriminatedUnion("type", [
      z.strictObject({ type: z.literal("text"), text: z.literal("") }),
      z.strictObject({ type: z.literal("thinking"), thinking: z.literal(""), signature: z.string() }),
      toolUseBlock.extend({ input: z.strictObject({}) }),
    ]),
  }),
  content_block_delta: z.strictObject({
    type: z.literal("content_block_delta"),
    index,
    delta: z.discriminatedUnion("type", [
      z.strictObject({ type: z.literal("text_delta"), text: z.string().min(1) }),
      z.strictObject({ type: z.literal("input_json_delta"), partial_json: z.string() }),
      z.strictObject({ type: z.literal("thinking_delta"), thinking: z.string().min(1) }),
    ]),
  }),
  content_block_stop: z.strictObject({ type: z.literal("content_block_stop"), index }),
  message_delta: z.strictObject({
    type: z.literal("message_delta"),
    delta: z.strictObject({ stop_reason: stopReason, stop_sequence: z.string().nullable() }),
    usage: usageSchema,
  }),
  message_stop: z.strictObject({ type: z.literal("message_stop") }),
  ping: z.strictObject({ type: z.literal("ping") }),
  error: z.strictObject({
    type: z.literal("error"),
    error: z.strictObject({
      type: z.enum(["invalid_request_error", "authentication_error", "permission_error", "not_found_error", "request_too_large", "rate_limit_error", "api_error", "timeout_error", "overloaded_error"]),
      message: z.string().min(1),
    }),
  }),
} as const;

export const errorBodySchema = z.strictObject({
  type: z.literal("error"),
  error: streamEventSchemas.error.shape.error,
  request_id: z.string().nullable(),
});

type Block = z.infer<typeof contentBlock>;

/** What a stream says once its events are replayed: the message `message_start` began, with its blocks and end. */
export type ReplayedStream = {
  message: Record<string, unknown> & { content: Block[]; usage: z.infer<typeof usageSchema> };
  /** The names of the events, in order (pings included). */
  names: string[];
};

/**
 * Checks a stream event by event: each has its `event:` line, equal to its `type`, and passes its
 * schema; `message_start` first (pings aside), then per block `content_block_start`, deltas of the
 * block's kind, `content_block_stop`, with indices 0, 1, … never interleaved; then `message_delta`
 * and `message_stop`, last; or, after a failure, one `error` event, last. Returns the problems
 * (empty when the stream is right) and the message the events replay to.
 */
export function checkMessageStream(events: readonly SseEvent[]): { problems: string[]; replayed: ReplayedStream | undefined } {
  const problems: string[] = [];
  const names: string[] = [];
  let message: ReplayedStream["message"] | undefined;
  let open: { index: number; kind: string; json: string } | undefined;
  let nextIndex = 0;
  let ended = false;
  for (const [position, event] of events.entries()) {
    const where = `event ${position}`;
    if (ended) {
      problems.push(`${where}: after the stream's end`);
      break;
    }
    let payload: { type?: unknown } & Record<string, any>;
    try {
      payload = JSON.parse(event.data);
    } catch {
      problems.push(`${where}: data is not JSON`);
      continue;
    }
    const type = String(payload.type);
    names.push(type);
    if (event.name === undefined) problems.push(`${where}: no event: line (${type})`);
    else if (event.name !== type) problems.push(`${where}: event: ${event.name} but type ${type}`);
    const schema = streamEventSchemas[type as keyof typeof streamEventSchemas];
    if (schema === undefined) {
      problems.push(`${where}: unknown type ${type}`);
      continue;
    }
    const parsed = schema.safeParse(payload);
    if (!parsed.success) problems.push(`${where} (${type}): ${JSON.stringify(parsed.error.issues.slice(0, 2))}`);
    if (type === "ping") continue;
    if (type === "error") {
      ended = true;
      continue;
    }
    if (type === "message_start") {
      if (message !== undefined) problems.push(`${where}: a second message_start`);
      message = structuredClone(payload.message);
      continue;
    }
    if (message === undefined) {
      problems.push(`${where}: ${type} before message_start`);
      continue;
    }
    switch (type) {
      case "content_block_start":
        if (open !== undefined) problems.push(`${where}: block ${payload.index} opened while block ${open.index} is open`);
        if (payload.index !== nextIndex) problems.push(`${where}: block index ${payload.index}, expected ${nextIndex}`);
        open = { index: payload.index, kind: payload.content_block.type, json: "" };
        message.content.push(structuredClone(payload.content_block));
        nextIndex++;
        break;
      case "content_block_delta": {
        if (open === undefined || open.index !== payload.index) {
          problems.push(`${where}: a delta for block ${payload.index}, which is not open`);
          break;
        }
        const expected = { text: "text_delta", thinking: "thinking_delta", tool_use: "input_json_delta" }[open.kind];
        if (payload.delta.type !== expected) problems.push(`${where}: ${payload.delta.type} in a ${open.kind} block`);
        const block = message.content[payload.index]! as any;
        if (payload.delta.type === "text_delta") block.text += payload.delta.text;
        if (payload.delta.type === "thinking_delta") block.thinking += payload.delta.thinking;
        if (payload.delta.type === "input_json_delta") open.json += payload.delta.partial_json;
        break;
      }
      case "content_block_stop":
        if (open === undefined || open.index !== payload.index) problems.push(`${where}: block ${payload.index} stopped but not open`);
        else if (open.kind === "tool_use") {
          const block = message.content[open.index]! as any;
          try {
            block.input = open.json === "" ? {} : JSON.parse(open.json);
          } catch {
            block.input = {};
          }
        }
        open = undefined;
        break;
      case "message_delta":
        if (open !== undefined) problems.push(`${where}: message_delta while block ${open.index} is open`);
        message.stop_reason = payload.delta.stop_reason;
        message.stop_sequence = payload.delta.stop_sequence;
        // The SDK updates the counts message_delta carries and keeps the rest of message_start's usage (its service_tier).
        message.usage = { ...message.usage, ...payload.usage };
        break;
      case "message_stop":
        if (names.at(-2) !== "message_delta" && !names.slice(0, -1).includes("message_delta")) problems.push(`${where}: message_stop without message_delta`);
        ended = true;
        break;
    }
  }
  if (!ended) problems.push("the stream ended without message_stop or an error event");
  return { problems, replayed: message === undefined ? undefined : { message, names } };
}
