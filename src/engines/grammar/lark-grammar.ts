/**
 * Custom tools' formats of `syntax: "lark"`: translates the Lark subset such grammars use into
 * llama.cpp's GBNF, the input being one text the `start` rule matches.
 *
 * Supported: rules (`name: ...`, with Lark's `?`/`!`/`_` prefixes and `.N` priorities, which
 * shape parse trees only) and terminals (`NAME: ...`); string literals with Python escapes (and
 * the `i` flag); `"a".."z"` ranges; regex terminals `/.../` (without flags; see
 * `regex-syntax.ts`); alternation `|`, grouping `( )`, `[ ]` optional, `* + ?`, `~ n` and
 * `~ n..m`; aliases `-> name` (ignored: they name tree nodes); `%import common.X` (`-> Y`, and
 * `%import common (X, Y)`) for common.lark's terminals; comments `//` and `#`.
 *
 * The grammar is read as characters, the way it constrains generation: terminals are not
 * tokenized by a lexer first, and nothing is skipped between them. That is why `%ignore` is
 * refused rather than dropped: the client declared that text may appear between any two
 * tokens, and a character-level grammar cannot say "between tokens" without a lexer. Left
 * recursion (fine for Lark's parsers) is refused: llama.cpp cannot run it.
 *
 * Nothing here recurses deeper than `GRAMMAR_LIMITS.depth` nested groups.
 */
import {
  checkDepth,
  checkLeftRecursion,
  choiceOf,
  GRAMMAR_LIMITS,
  GrammarBudget,
  GrammarDefinitionError,
  grammarDefinitionRefused,
  normalizeRanges,
  sequenceOf,
  writeGbnf,
  type Expression,
  type Grammar,
} from "./grammar-expression.ts";
import { parseRegex } from "./regex-syntax.ts";

type TokenType =
  | "name"
  | "string"
  | "regex"
  | "number"
  | "directive"
  | "newline"
  | ":"
  | "|"
  | "("
  | ")"
  | "["
  | "]"
  | "*"
  | "+"
  | "?"
  | "!"
  | "~"
  | ","
  | "."
  | ".."
  | "->"
  | "{"
  | "}"
  | "end";

type Token = { type: TokenType; text: string; line: number };

/** The lexer's patterns, tried in order at each position (sticky). */
const TOKEN_PATTERNS: [TokenType | "space" | "comment", RegExp][] = [
  ["space", /[ \t\r\f]+|\\\r?\n/y],
  ["comment", /(\/\/|#)[^\n]*/y],
  ["newline", /\n/y],
  ["string", /"(\\[^\n]|[^"\\\n])*"i?/y],
  ["regex", /\/(\\[^\n]|[^/\\\n])+\/[a-z]*/y],
  ["directive", /%[a-z]+/y],
  ["name", /[A-Za-z_][A-Za-z_0-9]*/y],
  ["number", /-?\d+/y],
  ["->", /->/y],
  ["..", /\.\./y],
];
const PUNCTUATION = new Set<string>([":", "|", "(", ")", "[", "]", "*", "+", "?", "!", "~", ",", ".", "{", "}"]);

function tokenize(definition: string): Token[] {
  const tokens: Token[] = [];
  let index = 0;
  let line = 1;
  outer: while (index < definition.length) {
    for (const [type, pattern] of TOKEN_PATTERNS) {
      pattern.lastIndex = index;
      const match = pattern.exec(definition);
      if (match === null) continue;
      const text = match[0];
      if (type !== "space" && type !== "comment") tokens.push({ type, text, line });
      if (type === "newline" || text.endsWith("\n")) line++;
      index += text.length;
      continue outer;
    }
    const character = definition[index]!;
    if (!PUNCTUATION.has(character)) {
      const shown = /[\x21-\x7e]/.test(character) ? `'${character}'` : `U+${character.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`;
      throw new GrammarDefinitionError(`Line ${line} of the grammar: unexpected character ${shown}.`);
    }
    tokens.push({ type: character as TokenType, text: character, line });
    index++;
  }
  tokens.push({ type: "newline", text: "\n", line }, { type: "end", text: "", line });
  return tokens;
}

/** Whether a Lark name is a terminal's (upper case after leading underscores). */
function isTerminalName(name: string): boolean {
  return /^_*[A-Z]/.test(name);
}

/** The code points of a Lark (Python) string literal's body, escapes decoded. */
function decodeString(body: string, line: number): string {
  let text = "";
  let index = 0;
  while (index < body.length) {
    const character = body[index]!;
    if (character !== "\\") {
      text += character;
      index++;
      continue;
    }
    const letter = body[index + 1]!;
    const simple: Record<string, string> = { n: "\n", t: "\t", r: "\r", f: "\f", v: "\v", a: "\x07", b: "\b", "\\": "\\", '"': '"', "'": "'" };
    if (simple[letter] !== undefined) {
      text += simple[letter];
      index += 2;
      continue;
    }
    const hexLength = letter === "x" ? 2 : letter === "u" ? 4 : letter === "U" ? 8 : 0;
    if (hexLength > 0) {
      const digits = body.slice(index + 2, index + 2 + hexLength);
      const code = Number.parseInt(digits, 16);
      if (!/^[0-9a-fA-F]+$/.test(digits) || digits.length < hexLength || code > 0x10ffff) {
        throw new GrammarDefinitionError(`Line ${line} of the grammar: '\\${letter}' in a string needs ${hexLength} hex digits.`);
      }
      text += String.fromCodePoint(code);
      index += 2 + hexLength;
      continue;
    }
    const octal = /^[0-7]{1,3}/.exec(body.slice(index + 1, index + 4));
    if (octal !== null) {
      text += String.fromCodePoint(Number.parseInt(octal[0], 8));
      index += 1 + octal[0].length;
      continue;
    }
    if (letter === "N") throw new GrammarDefinitionError(`Line ${line} of the grammar: the string escape '\\N{...}' is not supported.`, true);
    // Python keeps an unknown escape as written.
    text += `\\${letter}`;
    index += 2;
  }
  return text;
}

/** A literal, letters of an `i` literal written as classes of both cases. */
function literalExpression(text: string, caseInsensitive: boolean): Expression {
  if (!caseInsensitive) return { kind: "literal", text };
  const items: Expression[] = [];
  for (const character of text) {
    const lower = character.toLowerCase();
    const upper = character.toUpperCase();
    if (lower === upper || [...lower].length !== 1 || [...upper].length !== 1) items.push({ kind: "literal", text: character });
    else items.push({ kind: "class", ranges: normalizeRanges([lower, upper].map((each) => [each.codePointAt(0)!, each.codePointAt(0)!] as const)) });
  }
  return sequenceOf(items);
}

/** Lark's `common.lark` terminals, as far as they are context-free (no lookbehind, no lazy comment bodies). */
const COMMON_LARK = String.raw`
DIGIT: "0".."9"
HEXDIGIT: "a".."f" | "A".."F" | DIGIT
INT: DIGIT+
SIGNED_INT: ["+"|"-"] INT
DECIMAL: INT "." INT? | "." INT
_EXP: ("e"|"E") SIGNED_INT
FLOAT: INT _EXP | DECIMAL _EXP?
SIGNED_FLOAT: ["+"|"-"] FLOAT
NUMBER: FLOAT | INT
SIGNED_NUMBER: ["+"|"-"] NUMBER
ESCAPED_STRING: "\"" (/[^"\\\n]/ | /\\[^\n]/)* "\""
LCASE_LETTER: "a".."z"
UCASE_LETTER: "A".."Z"
LETTER: UCASE_LETTER | LCASE_LETTER
WORD: LETTER+
CNAME: ("_"|LETTER) ("_"|LETTER|DIGIT)*
WS_INLINE: (" "|/\t/)+
WS: /[ \t\f\r\n]/+
CR: /\r/
LF: /\n/
NEWLINE: (CR? LF)+
SH_COMMENT: /#[^\n]*/
CPP_COMMENT: /\/\/[^\n]*/
SQL_COMMENT: /--[^\n]*/
`;

/** The prefix of imported rules' names: not a Lark name, so it never meets a client's. */
const COMMON_PREFIX = "common.";

let commonRules: Map<string, Expression> | undefined;

/** common.lark's rules, parsed once. */
function commonLibrary(): Map<string, Expression> {
  commonRules ??= new LarkParser(tokenize(COMMON_LARK), new GrammarBudget(), (name) => COMMON_PREFIX + name).parse().rules;
  return commonRules;
}

class LarkParser {
  readonly #tokens: Token[];
  readonly #budget: GrammarBudget;
  /** The name a referenced Lark name is stored under. */
  readonly #stored: (name: string) => string;
  #index = 0;
  readonly rules = new Map<string, Expression>();

  constructor(tokens: Token[], budget: GrammarBudget, stored: (name: string) => string) {
    this.#tokens = tokens;
    this.#budget = budget;
    this.#stored = stored;
  }

  #peek(offset = 0): Token {
    return this.#tokens[Math.min(this.#index + offset, this.#tokens.length - 1)]!;
  }

  #next(): Token {
    const token = this.#peek();
    if (token.type !== "end") this.#index++;
    return token;
  }

  #fail(message: string, token = this.#peek(), unsupported = false): never {
    throw new GrammarDefinitionError(`Line ${token.line} of the grammar: ${message}`, unsupported);
  }

  #expect(type: TokenType, what: string): Token {
    const token = this.#peek();
    if (token.type !== type) this.#fail(`expected ${what}, found ${token.type === "newline" ? "the end of the line" : token.type === "end" ? "the end" : `'${token.text}'`}.`);
    return this.#next();
  }

  parse(): this {
    for (;;) {
      const token = this.#peek();
      if (token.type === "end") return this;
      if (token.type === "newline") {
        this.#next();
        continue;
      }
      if (token.type === "directive") this.#directive();
      else this.#definition();
      this.#expect("newline", "the end of the line");
    }
  }

  #define(name: string, expression: Expression, token: Token): void {
    if (this.rules.has(name)) this.#fail(`'${name}' is defined twice.`, token);
    if (this.rules.size >= GRAMMAR_LIMITS.rules) this.#fail(`more than ${GRAMMAR_LIMITS.rules} rules and terminals.`, token);
    this.rules.set(name, expression);
  }

  #definition(): void {
    if (this.#peek().type === "?" || this.#peek().type === "!") this.#next();
    const nameToken = this.#expect("name", "a rule or terminal name");
    if (this.#peek().type === "{") this.#fail(`the rule template '${nameToken.text}{...}' is not supported.`, nameToken, true);
    if (this.#peek().type === ".") {
      // A priority: it picks between parses, the language stays the same.
      this.#next();
      this.#expect("number", "a priority number");
    }
    this.#expect(":", "':' after the name");
    const expression = this.#expansions(0, isTerminalName(nameToken.text) ? nameToken.text : undefined);
    this.#define(this.#stored(nameToken.text), expression, nameToken);
  }

  #directive(): void {
    const token = this.#next();
    switch (token.text) {
      case "%import":
        return this.#import(token);
      case "%ignore":
        return this.#fail(
          "'%ignore' is not supported: text a parser skips between tokens cannot be honoured while generating; write it into the rules (e.g. 'WS?' where spaces may go).",
          token,
          true,
        );
      default:
        return this.#fail(`the directive '${token.text}' is not supported.`, token, true);
    }
  }

  #import(token: Token): void {
    const path = [this.#expect("name", "a module name after '%import'").text];
    while (this.#peek().type === ".") {
      this.#next();
      path.push(this.#expect("name", "a name after '.'").text);
    }
    if (path[0] !== "common") this.#fail(`'%import ${path.join(".")}': only Lark's 'common' module can be imported.`, token, true);
    const names: { name: string; as: string }[] = [];
    if (path.length === 2) {
      let as = path[1]!;
      if (this.#peek().type === "->") {
        this.#next();
        as = this.#expect("name", "a name after '->'").text;
      }
      names.push({ name: path[1]!, as });
    } else if (path.length === 1 && this.#peek().type === "(") {
      this.#next();
      do {
        const name = this.#expect("name", "a terminal name").text;
        names.push({ name, as: name });
      } while (this.#peek().type === "," && this.#next());
      this.#expect(")", "')'");
    } else {
      this.#fail("expected '%import common.NAME' or '%import common (NAME, ...)'.", token);
    }
    for (const { name, as } of names) {
      if (!commonLibrary().has(COMMON_PREFIX + name) || name.startsWith("_")) {
        this.#fail(`'common.${name}' is not one of the common terminals supported (${[...commonLibrary().keys()].map((each) => each.slice(COMMON_PREFIX.length)).filter((each) => !each.startsWith("_")).join(", ")}).`, token, true);
      }
      this.#define(this.#stored(as), { kind: "reference", name: COMMON_PREFIX + name }, token);
    }
  }

  /** Skips newlines that continue a definition (before a '|', or anywhere inside brackets). */
  #skipContinuation(depth: number): void {
    let offset = 0;
    while (this.#peek(offset).type === "newline") offset++;
    if (offset > 0 && (depth > 0 || this.#peek(offset).type === "|")) this.#index += offset;
  }

  /** `alias ('|' alias)*`; `terminal` names the terminal being defined (terminals cannot use rules). */
  #expansions(depth: number, terminal: string | undefined): Expression {
    checkDepth(depth);
    const alternatives: Expression[] = [];
    for (;;) {
      alternatives.push(this.#alias(depth, terminal));
      this.#skipContinuation(depth);
      if (this.#peek().type !== "|") break;
      this.#next();
    }
    if (alternatives.length > 1) this.#budget.alternatives(alternatives.length);
    this.#budget.node();
    return choiceOf(alternatives);
  }

  #alias(depth: number, terminal: string | undefined): Expression {
    const items: Expression[] = [];
    for (;;) {
      if (depth > 0) this.#skipContinuation(depth);
      const item = this.#expression(depth, terminal);
      if (item === undefined) break;
      items.push(item);
    }
    if (this.#peek().type === "->") {
      // An alias names the tree node: the language is the same.
      this.#next();
      this.#expect("name", "a name after '->'");
    }
    this.#budget.node();
    return sequenceOf(items);
  }

  /** An atom with its operator, or undefined at the end of an alternative. */
  #expression(depth: number, terminal: string | undefined): Expression | undefined {
    const atom = this.#atom(depth, terminal);
    if (atom === undefined) return undefined;
    const operator = this.#peek();
    let bounds: { min: number; max: number | undefined } | undefined;
    if (operator.type === "*") bounds = { min: 0, max: undefined };
    else if (operator.type === "+") bounds = { min: 1, max: undefined };
    else if (operator.type === "?") bounds = { min: 0, max: 1 };
    else if (operator.type === "~") {
      this.#next();
      const min = Number(this.#expect("number", "a count after '~'").text);
      let max = min;
      if (this.#peek().type === "..") {
        this.#next();
        max = Number(this.#expect("number", "a count after '..'").text);
      }
      if (min < 0 || max < min) this.#fail(`'~ ${min}..${max}' is not a valid count.`, operator);
      this.#budget.repetition(max);
      checkDepth(depth + 1);
      this.#budget.node();
      return { kind: "repeat", item: atom, min, max };
    }
    if (bounds === undefined) return atom;
    this.#next();
    checkDepth(depth + 1);
    this.#budget.node();
    return { kind: "repeat", item: atom, ...bounds };
  }

  #atom(depth: number, terminal: string | undefined): Expression | undefined {
    const token = this.#peek();
    switch (token.type) {
      case "(":
      case "[": {
        this.#next();
        const inner = this.#expansions(depth + 1, terminal);
        this.#skipContinuation(depth + 1);
        this.#expect(token.type === "(" ? ")" : "]", token.type === "(" ? "')'" : "']'");
        this.#budget.node();
        return token.type === "(" ? inner : { kind: "repeat", item: inner, min: 0, max: 1 };
      }
      case "string": {
        this.#next();
        this.#budget.node();
        const caseInsensitive = token.text.endsWith("i");
        const text = decodeString(token.text.slice(1, caseInsensitive ? -2 : -1), token.line);
        if (this.#peek().type !== "..") return literalExpression(text, caseInsensitive);
        this.#next();
        const end = this.#expect("string", "a string after '..'");
        const last = decodeString(end.text.slice(1, end.text.endsWith("i") ? -2 : -1), end.line);
        if ([...text].length !== 1 || [...last].length !== 1 || caseInsensitive || end.text.endsWith("i")) {
          this.#fail(`a range '"a".."z"' needs one character on each side.`, token);
        }
        const [first, final] = [text.codePointAt(0)!, last.codePointAt(0)!];
        if (final < first) this.#fail("a range whose end comes before its start.", token);
        return { kind: "class", ranges: [[first, final]] };
      }
      case "regex": {
        this.#next();
        const close = token.text.lastIndexOf("/");
        const flags = token.text.slice(close + 1);
        if (flags !== "") this.#fail(`the regex flag${flags.length > 1 ? "s" : ""} '${flags}' ${flags.length > 1 ? "are" : "is"} not supported.`, token, true);
        try {
          return parseRegex(token.text.slice(1, close), this.#budget, depth);
        } catch (error) {
          if (error instanceof GrammarDefinitionError) this.#fail(error.message, token, error.unsupported);
          throw error;
        }
      }
      case "name": {
        if (this.#peek(1).type === ":" || (this.#peek(1).type === "." && this.#peek(2).type === "number")) return undefined;
        this.#next();
        if (this.#peek().type === "{") this.#fail(`the rule template '${token.text}{...}' is not supported.`, token, true);
        if (terminal !== undefined && !isTerminalName(token.text)) this.#fail(`terminal '${terminal}' uses rule '${token.text}'; terminals can only use terminals.`, token);
        this.#budget.node();
        return { kind: "reference", name: this.#stored(token.text) };
      }
      default:
        return undefined;
    }
  }
}

/** Visits every reference of an expression (recursion bounded by the parser's depth limit). */
function forEachReference(expression: Expression, visit: (name: string) => void): void {
  switch (expression.kind) {
    case "reference":
      return visit(expression.name);
    case "sequence":
      return expression.items.forEach((item) => forEachReference(item, visit));
    case "choice":
      return expression.alternatives.forEach((alternative) => forEachReference(alternative, visit));
    case "repeat":
      return forEachReference(expression.item, visit);
  }
}

/**
 * Parses a Lark grammar into the rules its `start` rule reaches (common.lark's imported under
 * `common.NAME`). Throws `GrammarDefinitionError` for anything malformed, unsupported or too large.
 */
export function parseLarkGrammar(definition: string): Grammar {
  if (definition.length > GRAMMAR_LIMITS.definitionLength) {
    throw new GrammarDefinitionError(`The grammar is longer than ${GRAMMAR_LIMITS.definitionLength} characters.`);
  }
  const parser = new LarkParser(tokenize(definition), new GrammarBudget(), (name) => name).parse();
  const defined = (name: string): Expression | undefined => parser.rules.get(name) ?? (name.startsWith(COMMON_PREFIX) ? commonLibrary().get(name) : undefined);
  if (!parser.rules.has("start")) throw new GrammarDefinitionError("The grammar has no 'start' rule: that is the rule the whole input must match.");
  // Keep the rules 'start' reaches, in a breadth-first walk (no recursion over rules).
  const rules = new Map<string, Expression>();
  const queue = ["start"];
  const queued = new Set(queue);
  for (let index = 0; index < queue.length; index++) {
    const name = queue[index]!;
    const expression = defined(name)!;
    rules.set(name, expression);
    forEachReference(expression, (reference) => {
      if (defined(reference) === undefined) throw new GrammarDefinitionError(`'${reference}' is used in '${name}' but never defined.`);
      if (!queued.has(reference)) {
        queued.add(reference);
        queue.push(reference);
      }
    });
  }
  if (rules.size > GRAMMAR_LIMITS.rules) throw new GrammarDefinitionError(`The grammar has more than ${GRAMMAR_LIMITS.rules} rules and terminals.`);
  const grammar = { rules, start: "start" };
  checkLeftRecursion(grammar, (name) => name);
  return grammar;
}

/**
 * The GBNF name of a Lark rule: `l-` for the client's names, `c-` for common.lark's, `_` as `-`
 * (Lark names have no `-`, so no two names meet).
 */
export function larkRuleName(name: string): string {
  if (name.startsWith(COMMON_PREFIX)) return `c-${name.slice(COMMON_PREFIX.length).replaceAll("_", "-")}`;
  return `l-${name.replaceAll("_", "-")}`;
}

/**
 * The GBNF (root rule `root`) whose texts are exactly those the Lark grammar's `start` matches,
 * read as characters. Throws an `UnsupportedGrammarError` or `InvalidGrammarError` (400s)
 * naming `param`, e.g. `tools[0].format`.
 */
export function larkToGbnf(definition: string, param: string): string {
  try {
    return writeGbnf(parseLarkGrammar(definition), larkRuleName);
  } catch (error) {
    throw grammarDefinitionRefused(error, param);
  }
}
