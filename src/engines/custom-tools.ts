/**
 * Custom (freeform) tools on engines whose models only know functions with JSON arguments (see
 * `ToolDefinition.custom`): such a tool is shown to the model as a function with one string
 * parameter, `input`, and its calls are read back as that string's text. Both engines use this:
 * the embedded one (whose grammar also holds the string to the tool's format) and the upstream one.
 *
 * In the parts an engine yields, a custom tool's call is a `tool-call-start` with the tool's name,
 * then `tool-call-delta` parts whose `argumentsDelta` is the DECODED input text (not JSON), in
 * order; their concatenation is the call's input.
 */
import { randomBytes } from "node:crypto";
import type { EngineFinishReason, JsonSchema, ToolCall, ToolDefinition } from "./engine.ts";

/** The one parameter a custom tool's function takes. */
export const CUSTOM_INPUT_PARAMETER = "input";

/**
 * Capability names (in `EngineCapabilities.supportedParameters`, after the chat parameters) for
 * custom tools: `custom_tools` when the engine takes them at all (text format), and
 * `custom_tool_grammar` when it can also enforce a grammar format (in some tool choices; see each engine).
 */
export const CUSTOM_TOOL_CAPABILITIES = ["custom_tools", "custom_tool_grammar"] as const;

/** An OpenAI-style call id: `call_` and 24 letters and digits. */
export function newToolCallId(): string {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  return `call_${[...randomBytes(24)].map((byte) => alphabet[byte % alphabet.length]).join("")}`;
}

/** The names of a request's custom tools. */
export function customToolNames(tools: readonly ToolDefinition[] | undefined): Set<string> {
  return new Set((tools ?? []).filter((tool) => tool.custom !== undefined).map((tool) => tool.name));
}

/**
 * The description a custom tool's function is shown with: the tool's own, and for a grammar
 * format a note that the input follows it, with the grammar (the model writes better inputs
 * when it sees the format it is held to).
 */
export function customToolDescription(tool: ToolDefinition): string {
  const own = tool.description ?? "";
  const format = tool.custom?.format;
  if (format === undefined || format.type === "text") return own;
  const syntax = format.syntax === "lark" ? "Lark grammar" : "regular expression";
  const note = `The '${CUSTOM_INPUT_PARAMETER}' must be text matching this ${syntax}:\n${format.definition}`;
  return own === "" ? note : `${own}\n\n${note}`;
}

/** The parameters schema of a custom tool's function: one required string, `input`. */
export function customToolParameters(): JsonSchema {
  return {
    type: "object",
    properties: { [CUSTOM_INPUT_PARAMETER]: { type: "string", description: "The tool's input, as free text." } },
    required: [CUSTOM_INPUT_PARAMETER],
    additionalProperties: false,
  };
}

/** The JSON arguments of a call to a custom tool's function whose input is `text`. */
export function customCallArguments(text: string): string {
  return JSON.stringify({ [CUSTOM_INPUT_PARAMETER]: text });
}

/**
 * A call as a model sees it in the conversation: a custom tool's raw input becomes its
 * function's `{"input": ...}` arguments; other calls are as they are.
 */
export function wireToolCall(call: ToolCall, customNames: ReadonlySet<string>): ToolCall {
  return customNames.has(call.name) ? { ...call, arguments: customCallArguments(call.arguments) } : call;
}

const SIMPLE_ESCAPES: Record<string, string> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };

/**
 * Reads the JSON arguments of a custom tool's call as they stream (`{"input": "..."}`, any
 * spacing, other keys skipped) and gives out the `input` string's decoded text as it arrives.
 * An escape cut between two pieces is held back until it is whole, and so is a lone high
 * surrogate (its pair may follow), so every piece given out is whole characters.
 */
export class CustomInputDecoder {
  /** Everything read, for `end` when the arguments held no `input` string. */
  #raw = "";
  #depth = 0;
  #inString = false;
  #escaped = false;
  /** At depth 1: whether the next string is a key (after `{` or `,`), and the last key read. */
  #expectKey = false;
  #key: string | undefined;
  #keyText = "";
  /** Reading the input string; then, once it closed, done. */
  #target: "before" | "inside" | "done" = "before";
  /** Text of the input string not yet decoded (an escape cut short). */
  #pending = "";
  /** Decoded text held back (a high surrogate whose pair may follow). */
  #held = "";

  /** Takes the next piece of the arguments; returns the input text it completes (maybe ""). */
  push(piece: string): string {
    this.#raw += piece;
    let out = "";
    for (let index = 0; index < piece.length; index++) {
      const character = piece[index]!;
      if (this.#target === "inside") {
        // The input string's own text: decoded in runs (up to its closing quote).
        const close = findStringEnd(this.#pending, piece, index);
        out += this.#decode(piece.slice(index, close === -1 ? piece.length : close), close !== -1);
        if (close === -1) break;
        index = close;
        this.#target = "done";
        continue;
      }
      if (this.#inString) {
        if (this.#escaped) this.#escaped = false;
        else if (character === "\\") this.#escaped = true;
        else if (character === '"') {
          this.#inString = false;
          if (this.#depth === 1 && this.#expectKey) {
            this.#key = parseJsonString(`${this.#keyText}"`);
            this.#expectKey = false;
          }
        }
        if (this.#inString && this.#depth === 1 && this.#expectKey) this.#keyText += character;
        continue;
      }
      if (character === '"') {
        if (this.#depth === 1 && !this.#expectKey && this.#key === CUSTOM_INPUT_PARAMETER && this.#target === "before") {
          this.#target = "inside";
          continue;
        }
        this.#inString = true;
        if (this.#depth === 1 && this.#expectKey) this.#keyText = '"';
      } else if (character === "{" || character === "[") {
        this.#depth++;
        if (this.#depth === 1) this.#expectKey = character === "{";
      } else if (character === "}" || character === "]") {
        this.#depth--;
      } else if (character === "," && this.#depth === 1) {
        this.#expectKey = true;
        this.#key = undefined;
      }
    }
    return this.#give(out);
  }

  /**
   * The arguments ended. Cut off inside the input: an escape or surrogate pair left incomplete is
   * dropped (it is no whole character), the rest was given out already. When they held no `input`
   * string (an upstream model that wrote something else), the whole arguments are the input: a
   * JSON string decoded, anything else as written.
   */
  end(): string {
    if (this.#target !== "before") return "";
    const text = this.#raw.trim();
    if (text === "") return "";
    return parseJsonString(text) ?? this.#raw;
  }

  /** Decodes `text` (the input string's, after `#pending`); `closed`: the string ends after it. */
  #decode(text: string, closed: boolean): string {
    const source = this.#pending + text;
    this.#pending = "";
    let out = "";
    let index = 0;
    while (index < source.length) {
      const character = source[index]!;
      if (character !== "\\") {
        out += character;
        index++;
        continue;
      }
      const letter = source[index + 1];
      if (letter === undefined) break;
      if (letter === "u") {
        const digits = source.slice(index + 2, index + 6);
        if (digits.length < 4) break;
        // Malformed hex (only an unconstrained upstream writes it): kept as written.
        out += /^[0-9a-fA-F]{4}$/.test(digits) ? String.fromCharCode(Number.parseInt(digits, 16)) : `\\u${digits}`;
        index += 6;
        continue;
      }
      out += SIMPLE_ESCAPES[letter] ?? letter;
      index += 2;
    }
    // An escape cut short: held for the next piece, or (the string closed on it) kept as written.
    if (index < source.length) {
      if (closed) out += source.slice(index);
      else this.#pending = source.slice(index);
    }
    return out;
  }

  /** Gives out decoded text, holding back a trailing high surrogate while the string goes on. */
  #give(text: string): string {
    let out = this.#held + text;
    this.#held = "";
    const last = out.charCodeAt(out.length - 1);
    if (this.#target === "inside" && last >= 0xd800 && last <= 0xdbff) {
      this.#held = out.slice(-1);
      out = out.slice(0, -1);
    }
    return out;
  }
}

/**
 * Where the input string closes in `piece` from `start` (the index of its closing quote), or -1.
 * `pending` is the string's text before `piece` not yet decoded: an open escape there escapes
 * the piece's first character.
 */
function findStringEnd(pending: string, piece: string, start: number): number {
  // Count the backslashes that end `pending`: odd means the next character is escaped.
  let escaped = false;
  for (let index = pending.length - 1; index >= 0 && pending[index] === "\\"; index--) escaped = !escaped;
  for (let index = start; index < piece.length; index++) {
    const character = piece[index]!;
    if (escaped) escaped = false;
    else if (character === "\\") escaped = true;
    else if (character === '"') return index;
  }
  return -1;
}

/** A JSON string's value, or undefined when `text` is not one. */
function parseJsonString(text: string): string | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === "string" ? value : undefined;
  } catch {
    return undefined;
  }
}

/** The parts `CustomCallDecoder` reads: tool-call parts and finishes, with a choice where the engine has one. */
type CallPart = { type: "tool-call-start"; index: number; id: string; name: string; choice?: number } | CallDelta | { type: "finish"; choice: number; reason: EngineFinishReason };

/** A call's delta, with its choice where the engine has one. */
type CallDelta = { type: "tool-call-delta"; index: number; argumentsDelta: string; choice?: number };

/**
 * Rewrites a stream's custom-tool calls: their `tool-call-delta` parts carry the decoded input
 * text instead of the `{"input": ...}` JSON the model wrote. Other parts pass as they are. Text
 * still held back for a call is given out before its choice's `finish` (or by `flush`).
 */
export class CustomCallDecoder {
  readonly #customNames: ReadonlySet<string>;
  /** Decoders of the custom calls, by `choice:index`. */
  readonly #decoders = new Map<string, CustomInputDecoder>();

  constructor(customNames: ReadonlySet<string>) {
    this.#customNames = customNames;
  }

  /** The parts that replace `part`. */
  transform<Part extends { type: string }>(part: Part): Part[] {
    const call = part as unknown as CallPart;
    if (call.type === "tool-call-start") {
      if (this.#customNames.has(call.name)) this.#decoders.set(`${call.choice ?? 0}:${call.index}`, new CustomInputDecoder());
      return [part];
    }
    if (call.type === "tool-call-delta") {
      const decoder = this.#decoders.get(`${call.choice ?? 0}:${call.index}`);
      if (decoder === undefined) return [part];
      const text = decoder.push(call.argumentsDelta);
      return text === "" ? [] : [{ ...part, argumentsDelta: text }];
    }
    if (call.type === "finish") return [...(this.flush(call.choice) as unknown as Part[]), part];
    return [part];
  }

  /** The held-back text of every call (of one choice, when given) as deltas; those calls end. */
  flush(choice?: number): CallDelta[] {
    const parts: CallDelta[] = [];
    for (const [key, decoder] of this.#decoders) {
      const [callChoice, index] = key.split(":").map(Number) as [number, number];
      if (choice !== undefined && callChoice !== choice) continue;
      this.#decoders.delete(key);
      const text = decoder.end();
      if (text !== "") parts.push({ type: "tool-call-delta", index, argumentsDelta: text, ...(choice !== undefined ? { choice } : {}) });
    }
    return parts;
  }
}
