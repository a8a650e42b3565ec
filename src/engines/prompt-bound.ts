/**
 * Cheap bounds on a prompt's token count, known before any template is rendered or any text
 * tokenized: the serving layer uses them to refuse (context, rate limits, quota) before the
 * expensive work, whose cost grows with what the client sent.
 *
 * `renderedBytes` counts every byte of the request that a chat template may render: message
 * text and names, tool-call names, ids and arguments, tool names, descriptions and parameter
 * schemas, and the response format's schema. `verbatimBytes` counts only what templates render
 * as it was sent (message text, tool-call names and arguments, tool names and descriptions):
 * parameter schemas are often rendered in a shorter form (node-llama-cpp writes TypeScript-like
 * signatures), names and ids may not be rendered at all, and a response format's schema may only
 * shape the grammar. JSON texts (tool-call arguments, tool results) are counted as sent although
 * a template may write them again more compactly: only JSON padded with whitespace, escapes or
 * zeros renders much shorter.
 */
import type { GenerationRequest } from "./engine.ts";

/** Template bytes a message may add besides its own text (role markers, separators). */
export const MESSAGE_OVERHEAD_BYTES = 32;
/** Template bytes a tool definition or a tool call may add (function-calling preambles, JSON framing). */
export const TOOL_OVERHEAD_BYTES = 256;
/** Template bytes any prompt may add once (a default system prompt, the generation prompt). */
export const PROMPT_OVERHEAD_BYTES = 1024;

/** Bounds on the prompt's tokens: every tokenization lies between them. */
export type PromptBound = {
  /** Fewer tokens are impossible: no token spans more bytes than the vocabulary's longest (counts `verbatimBytes`). */
  atLeast: number;
  /** More tokens are impossible: no token is shorter than a byte, plus the template's overhead. */
  atMost: number;
  /** Bytes of client text the template may render (without overheads). */
  bytes: number;
  /** Bytes of client text every template renders as sent (what `atLeast` counts). */
  verbatimBytes: number;
};

/** UTF-8 bytes of a string, counted without encoding it (cheap on megabytes). */
function utf8Bytes(text: string): number {
  return Buffer.byteLength(text, "utf8");
}

/** JSON text length of a value the client sent (schemas are small after the request caps). */
function jsonBytes(value: unknown): number {
  return value === undefined ? 0 : utf8Bytes(JSON.stringify(value));
}

/** Bytes of client text the request can make a template render. Linear in the request's size. */
export function renderedBytes(request: GenerationRequest): number {
  let bytes = 0;
  for (const message of request.messages) {
    bytes += utf8Bytes(message.content) + utf8Bytes(message.name ?? "") + utf8Bytes(message.toolCallId ?? "");
    for (const call of message.toolCalls ?? []) bytes += utf8Bytes(call.id) + utf8Bytes(call.name) + utf8Bytes(call.arguments);
  }
  for (const tool of request.tools ?? []) bytes += utf8Bytes(tool.name) + utf8Bytes(tool.description ?? "") + jsonBytes(tool.parameters);
  if (request.responseFormat?.type === "json_schema") bytes += jsonBytes(request.responseFormat.schema);
  return bytes;
}

/** Bytes of client text every template renders as it was sent. Linear in the request's size. */
export function verbatimBytes(request: GenerationRequest): number {
  let bytes = 0;
  for (const message of request.messages) {
    bytes += utf8Bytes(message.content);
    for (const call of message.toolCalls ?? []) bytes += utf8Bytes(call.name) + utf8Bytes(call.arguments);
  }
  for (const tool of request.tools ?? []) bytes += utf8Bytes(tool.name) + utf8Bytes(tool.description ?? "");
  return bytes;
}

/** Template overhead the request may add, in bytes. */
export function overheadBytes(request: GenerationRequest): number {
  const calls = request.messages.reduce((sum, message) => sum + (message.toolCalls?.length ?? 0), 0);
  return PROMPT_OVERHEAD_BYTES + request.messages.length * MESSAGE_OVERHEAD_BYTES + ((request.tools?.length ?? 0) + calls) * TOOL_OVERHEAD_BYTES;
}

/**
 * The bounds for a tokenizer whose longest token spans `longestTokenBytes` bytes of text.
 * `atLeast` counts only client text rendered as sent (the template may add nothing); `atMost`
 * counts every byte a template may render, plus the overheads.
 */
export function promptBound(request: GenerationRequest, longestTokenBytes: number): PromptBound {
  const bytes = renderedBytes(request);
  const verbatim = verbatimBytes(request);
  return { bytes, verbatimBytes: verbatim, atLeast: Math.ceil(verbatim / Math.max(1, longestTokenBytes)), atMost: bytes + overheadBytes(request) };
}
