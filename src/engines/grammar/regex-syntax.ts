/**
 * Parses the regular-expression subset custom tools' grammars use (Lark's `/.../` terminals,
 * and formats of `syntax: "regex"`) into a grammar expression (`grammar-expression.ts`).
 *
 * Supported: literals; escapes `\n \t \r \f \v \0 \xHH \uHHHH \U00HHHHHH` and escaped
 * punctuation; `\d \w \s \S`; classes `[...]` and `[^...]` with ranges; `.` (any character but a
 * newline); groups `(...)`, `(?:...)`, `(?P<name>...)`, `(?<name>...)`; alternation `|`;
 * quantifiers `* + ? {m} {m,} {m,n} {,n}` (lazy `?` suffixes accepted: the language is the same);
 * `^` as the very first and `$` as the very last character (the whole text matches anyway).
 *
 * Refused, naming the construct: anchors elsewhere, `\b`, lookaround, backreferences, inline
 * flags, possessive quantifiers, `\D` and `\W` (and `\d`, `\w` in a negated class), whose
 * meaning depends on the dialect's Unicode tables. `\d`, `\w` and `\s` are the ASCII sets, a
 * subset of what Python's and Rust's Unicode-aware ones match, so every output still matches
 * the client's regex; `\S` is "not whitespace" in both dialects' Unicode sense.
 */
import {
  checkDepth,
  choiceOf,
  complementRanges,
  GrammarDefinitionError,
  normalizeRanges,
  sequenceOf,
  type CodeRange,
  type Expression,
  type GrammarBudget,
} from "./grammar-expression.ts";

const DIGIT: CodeRange[] = [[0x30, 0x39]];
const WORD: CodeRange[] = normalizeRanges([[0x30, 0x39], [0x41, 0x5a], [0x61, 0x7a], [0x5f, 0x5f]]);
const ASCII_SPACE: CodeRange[] = normalizeRanges([[0x09, 0x0d], [0x20, 0x20]]);
/** Whitespace to Python's `\s` or Rust's (the union): `\S` is its complement. */
const UNICODE_SPACE: CodeRange[] = normalizeRanges([
  [0x09, 0x0d], [0x1c, 0x20], [0x85, 0x85], [0xa0, 0xa0], [0x1680, 0x1680], [0x2000, 0x200a],
  [0x2028, 0x2029], [0x202f, 0x202f], [0x205f, 0x205f], [0x3000, 0x3000],
]);
const NOT_SPACE = complementRanges(UNICODE_SPACE);
/** `.`: anything but a newline, so a `/.+/` terminal cannot run on past its line. */
export const ANY_BUT_NEWLINE: CodeRange[] = complementRanges([[0x0a, 0x0a]]);

const SIMPLE_ESCAPES: Record<string, number> = { n: 0x0a, t: 0x09, r: 0x0d, f: 0x0c, v: 0x0b, a: 0x07, "0": 0x00 };

/** Parses one regex; `budget` is shared with the grammar holding it. */
export function parseRegex(pattern: string, budget: GrammarBudget, depth = 0): Expression {
  return new RegexParser(pattern, budget, depth).parse();
}

class RegexParser {
  readonly #pattern: string;
  readonly #budget: GrammarBudget;
  readonly #baseDepth: number;
  #index = 0;

  constructor(pattern: string, budget: GrammarBudget, baseDepth: number) {
    this.#pattern = pattern;
    this.#budget = budget;
    this.#baseDepth = baseDepth;
  }

  parse(): Expression {
    if (this.#pattern.startsWith("^")) this.#index = 1;
    const expression = this.#alternation(0);
    if (this.#index < this.#pattern.length) this.#fail(`an unmatched ')'`, false);
    return expression;
  }

  #fail(what: string, unsupported = true): never {
    const where = `at character ${this.#index + 1} of the regex /${this.#pattern.length > 60 ? `${this.#pattern.slice(0, 60)}...` : this.#pattern}/`;
    throw new GrammarDefinitionError(unsupported ? `The regex uses ${what}, which is not supported (${where}).` : `The regex is malformed: ${what} (${where}).`, unsupported);
  }

  #peek(): string | undefined {
    return this.#pattern[this.#index];
  }

  #alternation(depth: number): Expression {
    checkDepth(this.#baseDepth + depth);
    const alternatives = [this.#sequence(depth)];
    while (this.#peek() === "|") {
      this.#index++;
      alternatives.push(this.#sequence(depth));
    }
    if (alternatives.length > 1) this.#budget.alternatives(alternatives.length);
    this.#budget.node();
    return choiceOf(alternatives);
  }

  #sequence(depth: number): Expression {
    const items: Expression[] = [];
    while (this.#index < this.#pattern.length && this.#peek() !== "|" && this.#peek() !== ")") {
      const atom = this.#quantified(this.#atom(depth), depth);
      if (atom === undefined) continue;
      // Adjacent literals merge into one (after their own quantifiers were applied).
      const previous = items.at(-1);
      if (atom.kind === "literal" && previous?.kind === "literal") items[items.length - 1] = { kind: "literal", text: previous.text + atom.text };
      else items.push(atom);
    }
    this.#budget.node();
    return sequenceOf(items);
  }

  /** One atom, or undefined for an anchor that matches nothing. */
  #atom(depth: number): Expression | undefined {
    const character = this.#pattern.codePointAt(this.#index)!;
    const text = String.fromCodePoint(character);
    this.#budget.node();
    switch (text) {
      case "(":
        return this.#group(depth);
      case "[":
        this.#index++;
        return { kind: "class", ranges: this.#classBody() };
      case ".":
        this.#index++;
        return { kind: "class", ranges: ANY_BUT_NEWLINE };
      case "\\":
        return this.#escape();
      case "$":
        if (this.#index === this.#pattern.length - 1) {
          this.#index++;
          return undefined;
        }
        return this.#fail("'$' before the end of the pattern");
      case "^":
        return this.#fail("'^' after the start of the pattern");
      case "*":
      case "+":
      case "?":
        return this.#fail(`'${text}' with nothing to repeat`, false);
      case "{":
        if (this.#repetitionBounds() !== undefined) this.#fail("a '{...}' quantifier with nothing to repeat", false);
    }
    this.#index += text.length;
    return { kind: "literal", text };
  }

  #group(depth: number): Expression {
    this.#index++;
    if (this.#peek() === "?") {
      const rest = this.#pattern.slice(this.#index);
      const named = /^\?P?<[A-Za-z_][A-Za-z0-9_]*>/.exec(rest);
      if (rest.startsWith("?:")) this.#index += 2;
      else if (named !== null) this.#index += named[0].length;
      else if (/^\?(=|!|<=|<!)/.test(rest)) this.#fail("a lookaround assertion");
      else if (rest.startsWith("?P=")) this.#fail("a backreference");
      else this.#fail("an inline flag or special group '(?...)'");
    }
    const inner = this.#alternation(depth + 1);
    if (this.#peek() !== ")") this.#fail("a '(' without its ')'", false);
    this.#index++;
    return inner;
  }

  /** `{m}`, `{m,}`, `{m,n}` or `{,n}` at the current index, without consuming it; undefined when it is a literal '{'. */
  #repetitionBounds(): { min: number; max: number | undefined; length: number } | undefined {
    const match = /^\{(\d*)(,(\d*))?\}/.exec(this.#pattern.slice(this.#index, this.#index + 24));
    if (match === null || (match[1] === "" && (match[2] === undefined || match[3] === ""))) return undefined;
    const min = match[1] === "" ? 0 : Number(match[1]);
    const max = match[2] === undefined ? min : match[3] === "" ? undefined : Number(match[3]);
    return { min, max, length: match[0].length };
  }

  #quantified(atom: Expression | undefined, depth: number): Expression | undefined {
    let expression = atom;
    let quantifiers = 0;
    for (;;) {
      const next = this.#peek();
      let bounds: { min: number; max: number | undefined } | undefined;
      if (next === "*") bounds = { min: 0, max: undefined };
      else if (next === "+") bounds = { min: 1, max: undefined };
      else if (next === "?") bounds = { min: 0, max: 1 };
      if (bounds !== undefined) {
        this.#index++;
      } else if (next === "{") {
        const braces = this.#repetitionBounds();
        if (braces === undefined) return expression;
        if (braces.max !== undefined && braces.max < braces.min) this.#fail("a '{m,n}' quantifier with m > n", false);
        this.#budget.repetition(Math.max(braces.min, braces.max ?? 0));
        this.#index += braces.length;
        bounds = braces;
      } else {
        return expression;
      }
      if (expression === undefined) this.#fail("a quantifier after an anchor", false);
      if (quantifiers > 0) this.#fail("a quantifier after a quantifier", false);
      quantifiers++;
      if (this.#peek() === "?") this.#index++; // lazy: the same language
      else if (this.#peek() === "+") this.#fail("a possessive quantifier");
      checkDepth(this.#baseDepth + depth + 1);
      this.#budget.node();
      expression = { kind: "repeat", item: expression, min: bounds.min, max: bounds.max };
    }
  }

  /** An escape outside a class: a literal, a class, or an error. */
  #escape(): Expression {
    const ranges = this.#escapeRanges(false);
    if (ranges.length === 1 && ranges[0]![0] === ranges[0]![1]) return { kind: "literal", text: String.fromCodePoint(ranges[0]![0]) };
    return { kind: "class", ranges };
  }

  /** The code points an escape at the current index stands for; `negatedClass` inside `[^...]`. */
  #escapeRanges(negatedClass: boolean): CodeRange[] {
    const letter = this.#pattern[this.#index + 1];
    if (letter === undefined) this.#fail("a trailing '\\'", false);
    this.#index += 2;
    const simple = SIMPLE_ESCAPES[letter];
    if (simple !== undefined) return [[simple, simple]];
    const hexLength = letter === "x" ? 2 : letter === "u" ? 4 : letter === "U" ? 8 : 0;
    if (hexLength > 0) {
      const digits = this.#pattern.slice(this.#index, this.#index + hexLength);
      if (!/^[0-9a-fA-F]+$/.test(digits) || digits.length < hexLength) this.#fail(`'\\${letter}' without ${hexLength} hex digits`, false);
      const code = Number.parseInt(digits, 16);
      if (code > 0x10ffff) this.#fail(`'\\${letter}${digits}', past the last code point`, false);
      this.#index += hexLength;
      return [[code, code]];
    }
    switch (letter) {
      case "d":
      case "w":
        if (negatedClass) this.#fail(`'\\${letter}' inside a negated class (its Unicode meaning differs between regex dialects; write the characters out, e.g. [^0-9])`);
        return letter === "d" ? DIGIT : WORD;
      case "s":
        return ASCII_SPACE;
      case "S":
        return NOT_SPACE;
      case "D":
      case "W":
        return this.#fail(`'\\${letter}' (its Unicode meaning differs between regex dialects; write the characters out, e.g. [^0-9])`);
      case "b":
      case "B":
      case "A":
      case "Z":
      case "z":
        return this.#fail(`the assertion '\\${letter}'`);
    }
    if (/[1-9]/.test(letter)) this.#fail("a backreference");
    if (/[A-Za-z0-9]/.test(letter)) this.#fail(`the escape '\\${letter}'`);
    const code = this.#pattern.codePointAt(this.#index - 1)!;
    if (code > 0xffff) this.#index++;
    return [[code, code]];
  }

  /** The members of a class, after its '[', up to and past its ']'. */
  #classBody(): CodeRange[] {
    const negated = this.#peek() === "^";
    if (negated) this.#index++;
    const ranges: CodeRange[] = [];
    let first = true;
    for (;;) {
      const next = this.#peek();
      if (next === undefined) this.#fail("a '[' without its ']'", false);
      if (next === "]" && !first) break;
      first = false;
      const start = this.#classMember(negated);
      if (start.length === 1 && start[0]![0] === start[0]![1] && this.#peek() === "-" && this.#pattern[this.#index + 1] !== "]" && this.#pattern[this.#index + 1] !== undefined) {
        this.#index++;
        const end = this.#classMember(negated);
        if (end.length !== 1 || end[0]![0] !== end[0]![1]) this.#fail("a class range ending in a class", false);
        if (end[0]![0] < start[0]![0]) this.#fail("a class range whose end comes before its start", false);
        ranges.push([start[0]![0], end[0]![0]]);
      } else {
        ranges.push(...start);
      }
    }
    this.#index++;
    const members = normalizeRanges(ranges);
    const result = negated ? complementRanges(members) : members;
    if (result.length === 0) this.#fail("a class that matches nothing", false);
    return result;
  }

  #classMember(negated: boolean): CodeRange[] {
    if (this.#peek() === "\\") {
      // Inside a class, '\b' is a backspace in Python.
      if (this.#pattern[this.#index + 1] === "b") {
        this.#index += 2;
        return [[0x08, 0x08]];
      }
      return this.#escapeRanges(negated);
    }
    if (this.#pattern.startsWith("[:", this.#index)) this.#fail("a POSIX class '[:...:]'");
    const code = this.#pattern.codePointAt(this.#index)!;
    this.#index += code > 0xffff ? 2 : 1;
    return [[code, code]];
  }
}
