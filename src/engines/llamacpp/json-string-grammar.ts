/**
 * A custom tool's input inside a JSON tool call. The chat template writes a call's arguments as
 * JSON, so a custom tool is a function whose one string parameter, `input`, carries the text
 * (`custom-tools.ts`). For the decoded text to match the tool's grammar, the grammar that
 * constrains the call must hold the string's JSON ENCODING to it: built here on the parsed tree
 * (`grammar-expression.ts`), never on GBNF text, so literals and classes are rewritten exactly.
 *
 * One encoding per character, so the grammar stays unambiguous and small: `"` → `\"`, `\` → `\\`,
 * newline → `\n`, tab → `\t`, other control characters (below U+0020) → `\u00xx` (lower-case hex);
 * everything else as itself. The reader (`CustomInputDecoder`) decodes any JSON escape.
 */
import type { CustomToolFormat } from "../engine.ts";
import { CUSTOM_INPUT_PARAMETER } from "../custom-tools.ts";
import { choiceOf, gbnfLiteral, grammarDefinitionRefused, MAX_CODE_POINT, normalizeRanges, writeGbnf, type CodeRange, type Expression, type Grammar } from "../grammar/grammar-expression.ts";
import { prefixRules } from "./grammar.ts";
import { larkRuleName, parseLarkGrammar } from "../grammar/lark-grammar.ts";
import { parseRegexGrammar } from "../grammar/regex-grammar.ts";

/** The characters JSON strings cannot hold as themselves: controls, `"` and `\`. */
const ESCAPED: CodeRange[] = [
  [0x00, 0x1f],
  [0x22, 0x22],
  [0x5c, 0x5c],
];

const HEX_DIGITS = "0123456789abcdef";

/** The JSON-string text of one character, by the encoding above. */
function escapeCharacter(code: number): string {
  if (code === 0x22) return '\\"';
  if (code === 0x5c) return "\\\\";
  if (code === 0x0a) return "\\n";
  if (code === 0x09) return "\\t";
  if (code < 0x20) return `\\u00${code.toString(16).padStart(2, "0")}`;
  return String.fromCodePoint(code);
}

/** The JSON-string text of `text` (without quotes), by the encoding above. */
export function escapeJsonText(text: string): string {
  let out = "";
  for (const character of text) out += escapeCharacter(character.codePointAt(0)!);
  return out;
}

/** `ranges` (normalized) without the code points of `removed` (normalized). */
function subtractRanges(ranges: readonly CodeRange[], removed: readonly CodeRange[]): CodeRange[] {
  const out: CodeRange[] = [];
  for (const [first, last] of ranges) {
    let start = first;
    for (const [removedFirst, removedLast] of removed) {
      if (removedLast < start || removedFirst > last) continue;
      if (removedFirst > start) out.push([start, removedFirst - 1]);
      start = removedLast + 1;
    }
    if (start <= last) out.push([start, last]);
  }
  return out;
}

/**
 * The encodings of a class's members: its members JSON keeps as themselves (one class), then
 * `\"`, `\\`, `\n`, `\t`, and `\u000` / `\u001` followed by a class of hex digits for the
 * other controls (two alternatives at most, however many controls the class holds).
 */
function escapeClass(ranges: readonly CodeRange[]): Expression {
  const alternatives: Expression[] = [];
  const plain = subtractRanges(ranges, ESCAPED);
  if (plain.length > 0) alternatives.push({ kind: "class", ranges: plain });
  const members = (code: number) => ranges.some(([first, last]) => code >= first && code <= last);
  for (const code of [0x22, 0x5c, 0x0a, 0x09]) if (members(code)) alternatives.push({ kind: "literal", text: escapeCharacter(code) });
  for (const high of [0, 1]) {
    const digits: CodeRange[] = [];
    for (let low = 0; low < 16; low++) {
      const code = high * 16 + low;
      if (code === 0x0a || code === 0x09 || !members(code)) continue;
      const digit = HEX_DIGITS.charCodeAt(low);
      digits.push([digit, digit]);
    }
    if (digits.length > 0) alternatives.push({ kind: "sequence", items: [{ kind: "literal", text: `\\u00${high}` }, { kind: "class", ranges: normalizeRanges(digits) }] });
  }
  return choiceOf(alternatives);
}

/** One expression with its literals and classes encoded. Recursion is bounded by the parsers' nesting limit. */
function escapeExpression(expression: Expression): Expression {
  switch (expression.kind) {
    case "literal":
      return { kind: "literal", text: escapeJsonText(expression.text) };
    case "class":
      return escapeClass(expression.ranges);
    case "reference":
      return expression;
    case "sequence":
      return { kind: "sequence", items: expression.items.map(escapeExpression) };
    case "choice":
      return { kind: "choice", alternatives: expression.alternatives.map(escapeExpression) };
    case "repeat":
      return { ...expression, item: escapeExpression(expression.item) };
  }
}

/** The grammar whose texts are the JSON-string encodings (without the quotes) of `grammar`'s texts. */
export function jsonStringGrammar(grammar: Grammar): Grammar {
  return { rules: new Map([...grammar.rules].map(([name, expression]) => [name, escapeExpression(expression)])), start: grammar.start };
}

/** A custom tool's format as a grammar tree, and the GBNF names of its rules. */
export type CustomInputGrammar = { grammar: Grammar; ruleName: (name: string) => string };

/**
 * Parses a custom tool's format: a Lark grammar, a regex, or (`text`) any text. Throws the 400
 * (`UnsupportedGrammarError` / `InvalidGrammarError`) naming `param`, e.g. `tools[0].format`.
 */
export function parseCustomFormat(format: CustomToolFormat, param: string): CustomInputGrammar {
  try {
    if (format.type === "text") {
      const anyText: Expression = { kind: "repeat", item: { kind: "class", ranges: [[0, MAX_CODE_POINT]] }, min: 0, max: undefined };
      return { grammar: { rules: new Map([["start", anyText]]), start: "start" }, ruleName: () => "start" };
    }
    if (format.syntax === "lark") return { grammar: parseLarkGrammar(format.definition), ruleName: larkRuleName };
    return { grammar: parseRegexGrammar(format.definition), ruleName: () => "start" };
  } catch (error) {
    throw grammarDefinitionRefused(error, param);
  }
}

/**
 * GBNF for a custom tool's call arguments, `{"input": "<the input, JSON-encoded>"}` (spaced as
 * node-llama-cpp writes arguments into the prompt), its root `${prefix}root`.
 */
export function customArgumentsRules(input: CustomInputGrammar, prefix: string): string {
  const encoded = prefixRules(writeGbnf(jsonStringGrammar(input.grammar), input.ruleName), `${prefix}in-`);
  return `${encoded}\n${prefix}root ::= ${gbnfLiteral(`{"${CUSTOM_INPUT_PARAMETER}": "`)} ${prefix}in-root ${gbnfLiteral('"}')}`;
}
