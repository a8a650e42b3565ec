/**
 * Reads a grammar-constrained reply as it streams and turns it into stream parts: text deltas
 * for content, or `tool-call-start` / `tool-call-delta` parts for a tool-call section written
 * in the template's call syntax (see `grammar.ts`). The grammar guarantees the structure, so the
 * parser only has to find the boundaries; it never needs to backtrack.
 */
import { randomBytes } from "node:crypto";
import type { ReplyPart } from "./reply-part.ts";
import { callsStart, type CallSyntax } from "./grammar.ts";

type State =
  | { kind: "undecided" }
  | { kind: "text" }
  | { kind: "literal"; expected: string; then: State }
  | { kind: "name" }
  | { kind: "arguments"; depth: number; inString: boolean; escaped: boolean }
  | { kind: "between" }
  | { kind: "done" };

/** An OpenAI-style call id: `call_` and 24 letters and digits. */
export function newToolCallId(): string {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  return `call_${[...randomBytes(24)].map((byte) => alphabet[byte % alphabet.length]).join("")}`;
}

export class ToolCallParser {
  readonly #syntax: CallSyntax;
  readonly #names: string[];
  #state: State;
  #buffer = "";
  #calls = 0;

  /**
   * @param mustCall the reply is tool calls only (`required` or a named tool); otherwise it is
   *   a tool-call section exactly when it begins with the section's first character.
   */
  constructor(syntax: CallSyntax, names: string[], mustCall: boolean) {
    this.#syntax = syntax;
    this.#names = names;
    this.#state = mustCall ? this.#sectionStart() : { kind: "undecided" };
  }

  /** How many tool calls were started. */
  get calls(): number {
    return this.#calls;
  }

  #sectionStart(): State {
    return { kind: "literal", expected: callsStart(this.#syntax), then: { kind: "name" } };
  }

  /** Takes the next text of the reply and returns the parts it completes. */
  push(text: string): ReplyPart[] {
    this.#buffer += text;
    const parts: ReplyPart[] = [];
    while (this.#step(parts));
    return parts;
  }

  /** Ends the reply: text still held back is content (a cut-off call just ends). */
  flush(): ReplyPart[] {
    const parts: ReplyPart[] = [];
    if ((this.#state.kind === "undecided" || this.#state.kind === "text") && this.#buffer.length > 0) {
      parts.push({ type: "text-delta", text: this.#buffer });
    }
    this.#buffer = "";
    this.#state = { kind: "done" };
    return parts;
  }

  /** Advances by what the buffer allows; false when it needs more text. */
  #step(parts: ReplyPart[]): boolean {
    const state = this.#state;
    const buffer = this.#buffer;
    if (buffer.length === 0) return false;
    switch (state.kind) {
      case "undecided":
        this.#state = buffer[0] === callsStart(this.#syntax)[0] ? this.#sectionStart() : { kind: "text" };
        return true;
      case "text":
        parts.push({ type: "text-delta", text: buffer });
        this.#buffer = "";
        return false;
      case "literal":
        if (buffer.length < state.expected.length) return false;
        this.#buffer = buffer.slice(state.expected.length);
        this.#state = state.then;
        return true;
      case "name": {
        const name = this.#names.find((candidate) => buffer.startsWith(candidate + this.#syntax.paramsPrefix(candidate)));
        if (name === undefined) return false;
        this.#buffer = buffer.slice(name.length + this.#syntax.paramsPrefix(name).length);
        parts.push({ type: "tool-call-start", index: this.#calls, id: newToolCallId(), name });
        this.#calls++;
        this.#state = { kind: "arguments", depth: 0, inString: false, escaped: false };
        return true;
      }
      case "arguments": {
        let end = 0;
        let complete = false;
        for (; end < buffer.length && !complete; end++) {
          const character = buffer[end]!;
          if (state.inString) {
            if (state.escaped) state.escaped = false;
            else if (character === "\\") state.escaped = true;
            else if (character === '"') state.inString = false;
          } else if (character === '"') state.inString = true;
          else if (character === "{" || character === "[") state.depth++;
          else if (character === "}" || character === "]") {
            state.depth--;
            complete = state.depth === 0;
          }
        }
        parts.push({ type: "tool-call-delta", index: this.#calls - 1, argumentsDelta: buffer.slice(0, end) });
        this.#buffer = buffer.slice(end);
        if (!complete) return false;
        this.#state = { kind: "literal", expected: this.#syntax.suffix, then: { kind: "between" } };
        return true;
      }
      case "between": {
        const next = this.#syntax.betweenCalls + this.#syntax.prefix;
        if (buffer.startsWith(next)) {
          this.#buffer = buffer.slice(next.length);
          this.#state = { kind: "name" };
          return true;
        }
        if (next.startsWith(buffer)) return false;
        this.#state = { kind: "done" };
        return true;
      }
      case "done":
        this.#buffer = "";
        return false;
    }
  }
}
