/**
 * Cheap bounds on a prompt's token count, known before any template is rendered or any text
 * tokenized: the serving layer uses them to refuse (context, rate limits, quota) before the
 * expensive work, whose cost grows with what the client sent.
 *
 * `renderedBytes` counts every byte of the request that a chat template may render: message
 * text and names, tool-call names, ids and arguments, tool names, descriptions and parameter
 * schemas, the response format's schema, and the vendor fields passed to the upstream
 * (`chat_template_kwargs`, as JSON text). `verbatimBytes` counts only what templates render
 * as it was sent (message text, tool-call names and arguments, tool names and descriptions):
 * parameter schemas are often rendered in a shorter form (node-llama-cpp writes TypeScript-like
 * signatures), names and ids may not be rendered at all, and a response format's schema may only
 * shape the grammar. JSON texts (tool-call arguments, tool results) are counted as sent although
 * a template may write them again more compactly: only JSON padded with whitespace, escapes or
 * zeros renders much shorter.
 */
import type { GenerationRequest, TextCompletion } from "../protocol/generation.ts";

/** Template bytes a message may add besides its own text (role markers, separators). */
export const MESSAGE_OVERHEAD_BYTES = 32;
/** Template bytes a tool definition or a tool call may add (function-calling preambles, JSON framing). */
export const TOOL_OVERHEAD_BYTES = 256;
/** Template bytes any prompt may add once (a default system prompt, the generation prompt). */
export const PROMPT_OVERHEAD_BYTES = 1024;

/**
 * How many bytes of text a vocabulary's tokens span: `longest` for any token and, per ASCII
 * byte value, the longest token whose text holds that byte (0: none does). A text of n bytes has
 * at least n / `longest` tokens; counting each ASCII byte as 1 / its own longest token, and every
 * other byte as 1 / `longest`, gives a tighter bound that still holds: every token's bytes add
 * up to at most 1. (Vocabularies whose longest tokens are runs of spaces or dashes no longer
 * make every text look short.)
 */
export type TokenSpans = {
  longest: number;
  /** 128 entries: for each ASCII byte, the most bytes a token holding it spans (0: no token holds it). */
  asciiLongest?: ArrayLike<number>;
};

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

/**
 * The names of the request's custom tools (`ToolDefinition.custom`), or undefined when it has
 * none: their calls' raw input is rendered JSON-encoded (`{"input": "..."}`), which may be longer
 * than the text (`\u0001` for one control byte), and their grammars are shown in their descriptions.
 */
function customTools(request: GenerationRequest): Set<string> | undefined {
  let names: Set<string> | undefined;
  for (const tool of request.tools ?? []) if (tool.custom !== undefined) (names ??= new Set()).add(tool.name);
  return names;
}

/** Bytes of client text the request can make a template render. Linear in the request's size. */
export function renderedBytes(request: GenerationRequest): number {
  let bytes = 0;
  const custom = customTools(request);
  for (const message of request.messages) {
    bytes += utf8Bytes(message.content) + utf8Bytes(message.name ?? "") + utf8Bytes(message.toolCallId ?? "");
    for (const call of message.toolCalls ?? []) {
      bytes += utf8Bytes(call.id) + utf8Bytes(call.name) + (custom?.has(call.name) === true ? jsonBytes(call.arguments) : utf8Bytes(call.arguments));
    }
  }
  for (const tool of request.tools ?? []) {
    bytes += utf8Bytes(tool.name) + utf8Bytes(tool.description ?? "") + jsonBytes(tool.parameters);
    if (tool.custom?.format.type === "grammar") bytes += utf8Bytes(tool.custom.format.definition);
  }
  if (request.responseFormat?.type === "json_schema") bytes += jsonBytes(request.responseFormat.schema);
  return bytes + vendorBytes(request);
}

/**
 * JSON text bytes of the vendor fields (`chat_template_kwargs` above all: a template may render
 * any of its values), so that the hold, the TPM charge and the bill see them. Bounded by the
 * request schema, so writing them out is cheap.
 */
export function vendorBytes(request: GenerationRequest): number {
  let bytes = 0;
  for (const value of Object.values(request.vendor ?? {})) bytes += jsonBytes(value);
  return bytes;
}

/** The texts every template renders as they were sent (a custom tool's call input is not: it is JSON-encoded). */
function verbatimTexts(request: GenerationRequest): string[] {
  const texts: string[] = [];
  const custom = customTools(request);
  for (const message of request.messages) {
    texts.push(message.content);
    for (const call of message.toolCalls ?? []) texts.push(call.name, custom?.has(call.name) === true ? "" : call.arguments);
  }
  for (const tool of request.tools ?? []) texts.push(tool.name, tool.description ?? "");
  return texts;
}

/** Bytes of client text every template renders as it was sent. Linear in the request's size. */
export function verbatimBytes(request: GenerationRequest): number {
  return bytesOf(verbatimTexts(request));
}

function bytesOf(texts: readonly string[]): number {
  let bytes = 0;
  for (const text of texts) bytes += utf8Bytes(text);
  return bytes;
}

/** Weight of each ASCII byte (1 / the longest token holding it), and of any other byte. */
function byteWeights(spans: TokenSpans): { ascii: Float64Array; other: number } {
  const longest = Math.max(1, spans.longest);
  const ascii = new Float64Array(128);
  for (let byte = 0; byte < 128; byte++) {
    const span = spans.asciiLongest?.[byte] ?? 0;
    // A byte no token holds may still be covered by some token (an unknown-character token): any.
    ascii[byte] = 1 / (span > 0 ? Math.min(span, longest) : longest);
  }
  return { ascii, other: 1 / longest };
}

/**
 * The fewest tokens `texts` can take: the sum of their bytes' weights (see `TokenSpans`). The
 * count stops once it reaches `stopAt` (a smaller sum is still a lower bound).
 */
export function tokenFloor(texts: readonly string[], spans: TokenSpans, stopAt: number): number {
  const weights = byteWeights(spans);
  let sum = 0;
  for (const text of texts) {
    if (sum >= stopAt) break;
    for (let index = 0; index < text.length; index++) {
      // Checked every 64 Ki characters: megabytes are not read past the point that settles it.
      if ((index & 0xffff) === 0xffff && sum >= stopAt) break;
      const code = text.charCodeAt(index);
      if (code < 0x80) sum += weights.ascii[code]!;
      else if (code < 0x800) sum += 2 * weights.other;
      else if (code >= 0xd800 && code <= 0xdfff) sum += 2 * weights.other; // half of a 4-byte pair
      else sum += 3 * weights.other;
    }
  }
  // A float sum of millions of fractions may land a little above an integer it equals: round down by more than its error.
  return Math.max(0, Math.ceil(sum * (1 - 1e-9) - 1e-6));
}

/** Template overhead the request may add, in bytes. */
export function overheadBytes(request: GenerationRequest): number {
  const calls = request.messages.reduce((sum, message) => sum + (message.toolCalls?.length ?? 0), 0);
  return PROMPT_OVERHEAD_BYTES + request.messages.length * MESSAGE_OVERHEAD_BYTES + ((request.tools?.length ?? 0) + calls) * TOOL_OVERHEAD_BYTES;
}

/**
 * The bounds for a tokenizer whose tokens span `spans` (or whose longest token spans that many
 * bytes of text). `atLeast` counts only client text rendered as sent (the template may add
 * nothing); `atMost` counts every byte a template may render, plus the overheads. When only
 * "at least `enough` tokens?" matters, `atLeast` stops growing once it gets there.
 */
export function promptBound(request: GenerationRequest, spans: number | TokenSpans, enough: number = Number.POSITIVE_INFINITY): PromptBound {
  if (request.completion !== undefined) return sumOf(completionPromptBounds(request.completion, spans, enough), vendorBytes(request));
  const { longest, asciiLongest } = typeof spans === "number" ? { longest: spans, asciiLongest: undefined } : spans;
  const bytes = renderedBytes(request);
  const texts = verbatimTexts(request);
  const verbatim = bytesOf(texts);
  const coarse = Math.ceil(verbatim / Math.max(1, longest));
  const fine = asciiLongest === undefined || coarse >= enough ? 0 : tokenFloor(texts, { longest, asciiLongest }, enough);
  const atLeast = Math.max(coarse, fine);
  return { bytes, verbatimBytes: verbatim, atLeast, atMost: bytes + overheadBytes(request) };
}

/**
 * Tokens a text completion's prompt may hold besides its own text: a BOS and an EOS, or a
 * fill-in-the-middle layout's BOS, prefix, suffix and middle tokens.
 */
export const COMPLETION_OVERHEAD_TOKENS = 4;

/** Tokens (at most one per byte) llama-server's separator before an extra file may add: `\n\n--- snippet ---\n\n`, or FIM_SEP and a line break. */
const EXTRA_FILE_OVERHEAD_BYTES = 20;
/** Tokens the repository-level pattern adds once: FIM_REP `myproject\n`, FIM_SEP `filename\n`. */
const EXTRA_OVERHEAD_BYTES = 24;

/**
 * The bounds of each prompt of a text completion (each runs in its own sequence, so the context
 * bounds each alone; the request's bound is their sum). A token prompt counts its ids exactly; a
 * text prompt its text, as chat counts message text. A fill-in-the-middle prompt may be cut to fit
 * (llama-server's `/infill` keeps the prefix's end and the suffix's start), so its text gives no
 * lower bound beyond the layout's tokens; its upper bound counts the prefix and the suffix whole.
 */
export function completionPromptBounds(completion: TextCompletion, spans: number | TokenSpans, enough: number = Number.POSITIVE_INFINITY): PromptBound[] {
  const { longest, asciiLongest } = typeof spans === "number" ? { longest: spans, asciiLongest: undefined } : spans;
  const fim = completion.suffix !== undefined;
  // The suffix, `/infill`'s middle start and its extra files (each file's name and text, its separator's tokens counted as bytes too).
  const extraBytes = (completion.extra ?? []).reduce((sum, chunk) => sum + utf8Bytes(chunk.filename) + utf8Bytes(chunk.text) + EXTRA_FILE_OVERHEAD_BYTES, EXTRA_OVERHEAD_BYTES);
  const suffixBytes = fim ? utf8Bytes(completion.suffix!) + utf8Bytes(completion.middle ?? "") + extraBytes : 0;
  return completion.prompts.map((prompt): PromptBound => {
    if ("tokens" in prompt) {
      const count = prompt.tokens.length;
      return { atLeast: fim ? 3 : count, atMost: count + COMPLETION_OVERHEAD_TOKENS + suffixBytes, bytes: suffixBytes, verbatimBytes: 0 };
    }
    const bytes = utf8Bytes(prompt.text) + suffixBytes;
    if (fim) return { atLeast: 3, atMost: bytes + COMPLETION_OVERHEAD_TOKENS, bytes, verbatimBytes: 0 };
    const coarse = Math.ceil(bytes / Math.max(1, longest));
    const fine = asciiLongest === undefined || coarse >= enough ? 0 : tokenFloor([prompt.text], { longest, asciiLongest }, enough);
    return { atLeast: Math.max(coarse, fine), atMost: bytes + COMPLETION_OVERHEAD_TOKENS, bytes, verbatimBytes: bytes };
  });
}

/** The bound of several prompts together (vendor fields counted once, in `atMost` and `bytes`). */
function sumOf(bounds: readonly PromptBound[], extraBytes: number): PromptBound {
  const total: PromptBound = { atLeast: 0, atMost: extraBytes, bytes: extraBytes, verbatimBytes: 0 };
  for (const bound of bounds) {
    total.atLeast += bound.atLeast;
    total.atMost += bound.atMost;
    total.bytes += bound.bytes;
    total.verbatimBytes += bound.verbatimBytes;
  }
  return total;
}
