/**
 * The grammar tree that custom tools' formats (`lark-grammar.ts`, `regex-grammar.ts`) are parsed
 * into, its bounds, and the GBNF llama.cpp enforces it with. One tree feeds both the GBNF writer
 * and the recognizer (`grammar-recognizer.ts`), so what generation allows is what validation accepts.
 *
 * Character classes are sets of Unicode code points (llama.cpp's grammar works on code points).
 */
import { InvalidRequestError, UnsupportedParameterError } from "../../protocol/errors.ts";

/** A GBNF string literal. */
export function gbnfLiteral(text: string): string {
  let escaped = "";
  for (const character of text) {
    const code = character.codePointAt(0)!;
    if (character === "\\" || character === '"') escaped += `\\${character}`;
    else if (character === "\n") escaped += "\\n";
    else if (character === "\r") escaped += "\\r";
    else if (character === "\t") escaped += "\\t";
    else if (code < 0x20 || code === 0x7f) escaped += `\\x${code.toString(16).padStart(2, "0")}`;
    else escaped += character;
  }
  return `"${escaped}"`;
}

/** An inclusive range of code points. */
export type CodeRange = readonly [first: number, last: number];

/** One node of a grammar. */
export type Expression =
  | { kind: "literal"; text: string }
  /** Exactly one code point from `ranges` (sorted, disjoint, never empty). */
  | { kind: "class"; ranges: CodeRange[] }
  /** A rule, by its name in the grammar's `rules`. */
  | { kind: "reference"; name: string }
  /** The items in order; no items is the empty string. */
  | { kind: "sequence"; items: Expression[] }
  | { kind: "choice"; alternatives: Expression[] }
  /** `item` between `min` and `max` times; `max` undefined is unbounded. */
  | { kind: "repeat"; item: Expression; min: number; max: number | undefined };

/** A parsed grammar: named rules and the one the whole text must match. */
export type Grammar = {
  rules: Map<string, Expression>;
  start: string;
};

/**
 * Bounds on a client's grammar, so translating it, compiling it (on the event loop) and sampling
 * with it stay cheap. A definition that passes one is refused with a 400, never truncated.
 */
export const GRAMMAR_LIMITS = {
  /** Length of the definition, in UTF-16 code units (OpenAI's own limit is in this range). */
  definitionLength: 65_536,
  /** Rules and terminals, imported ones included. */
  rules: 2_000,
  /** Alternatives of all choices together (`|` in rules and regexes; a character class is one element, whatever its members). */
  alternatives: 2_000,
  /** Nodes of the whole tree. */
  nodes: 50_000,
  /** Nesting of groups, optionals and repetitions: the parsers recurse this deep and no deeper. */
  depth: 64,
  /**
   * Largest count of one bounded repetition (`{m,n}`, `~ m..n`): llama.cpp writes a rule per
   * repetition and refuses counts past 2000 (`MAX_REPETITION_THRESHOLD`).
   */
  repetition: 1_000,
  /** Sum of the counts of all bounded repetitions: each becomes that many rules in llama.cpp. */
  repetitionTotal: 10_000,
} as const;

/** The largest Unicode code point. */
export const MAX_CODE_POINT = 0x10ffff;

/**
 * Why a grammar cannot be used: `unsupported` for a construct this translator does not enforce
 * (valid in Lark or a regex, but not here), otherwise a definition that is malformed or too large.
 * Callers turn it into a 400 naming the request field (`grammarDefinitionRefused`).
 */
export class GrammarDefinitionError extends Error {
  override name = "GrammarDefinitionError";
  readonly unsupported: boolean;

  constructor(message: string, unsupported = false) {
    super(message);
    this.unsupported = unsupported;
  }
}

/** 400: a custom tool's grammar uses a construct (valid in its syntax) that this server cannot enforce. */
export class UnsupportedGrammarError extends UnsupportedParameterError {}

/** 400: a custom tool's grammar is malformed or past `GRAMMAR_LIMITS`. */
export class InvalidGrammarError extends InvalidRequestError {}

/** The 400 for a grammar refused while parsing, naming `param` (e.g. `tools[0].format`); other errors pass through. */
export function grammarDefinitionRefused(error: unknown, param: string): unknown {
  if (!(error instanceof GrammarDefinitionError)) return error;
  const message = `${error.message.replace(/\.$/, "")} (at '${param}').`;
  return error.unsupported ? new UnsupportedGrammarError(message, param) : new InvalidGrammarError(message, param);
}

/** Sorts and merges ranges into disjoint ascending ones. */
export function normalizeRanges(ranges: readonly CodeRange[]): CodeRange[] {
  const sorted = [...ranges].sort((a, b) => a[0] - b[0]);
  const merged: [number, number][] = [];
  for (const [first, last] of sorted) {
    const previous = merged.at(-1);
    if (previous !== undefined && first <= previous[1] + 1) previous[1] = Math.max(previous[1], last);
    else merged.push([first, last]);
  }
  return merged;
}

/** The code points not in `ranges` (which must be normalized). */
export function complementRanges(ranges: readonly CodeRange[]): CodeRange[] {
  const complement: CodeRange[] = [];
  let next = 0;
  for (const [first, last] of ranges) {
    if (first > next) complement.push([next, first - 1]);
    next = last + 1;
  }
  if (next <= MAX_CODE_POINT) complement.push([next, MAX_CODE_POINT]);
  return complement;
}

/** Whether `code` is in `ranges` (normalized). */
export function inRanges(ranges: readonly CodeRange[], code: number): boolean {
  let low = 0;
  let high = ranges.length - 1;
  while (low <= high) {
    const middle = (low + high) >> 1;
    const [first, last] = ranges[middle]!;
    if (code < first) high = middle - 1;
    else if (code > last) low = middle + 1;
    else return true;
  }
  return false;
}

/** Counts what a grammar spends against `GRAMMAR_LIMITS` as it is built. */
export class GrammarBudget {
  #nodes = 0;
  #alternatives = 0;
  #repetitions = 0;

  /** Spends one node. */
  node(): void {
    if (++this.#nodes > GRAMMAR_LIMITS.nodes) throw new GrammarDefinitionError(`The grammar is too large: more than ${GRAMMAR_LIMITS.nodes} elements.`);
  }

  /** Spends the alternatives of one choice. */
  alternatives(count: number): void {
    this.#alternatives += count;
    if (this.#alternatives > GRAMMAR_LIMITS.alternatives) {
      throw new GrammarDefinitionError(`The grammar has more than ${GRAMMAR_LIMITS.alternatives} alternatives.`);
    }
  }

  /** Spends one bounded repetition whose largest count is `count`. */
  repetition(count: number): void {
    if (count > GRAMMAR_LIMITS.repetition) {
      throw new GrammarDefinitionError(`A repetition count of ${count} is more than the ${GRAMMAR_LIMITS.repetition} allowed.`, true);
    }
    this.#repetitions += count;
    if (this.#repetitions > GRAMMAR_LIMITS.repetitionTotal) {
      throw new GrammarDefinitionError(`The grammar's repetition counts add up to more than ${GRAMMAR_LIMITS.repetitionTotal}.`, true);
    }
  }
}

/** Rejects nesting past `GRAMMAR_LIMITS.depth`. */
export function checkDepth(depth: number): void {
  if (depth > GRAMMAR_LIMITS.depth) throw new GrammarDefinitionError(`The grammar nests groups more than ${GRAMMAR_LIMITS.depth} levels deep.`);
}

/** A sequence of `items`, or the single item itself. */
export function sequenceOf(items: Expression[]): Expression {
  return items.length === 1 ? items[0]! : { kind: "sequence", items };
}

/** A choice of `alternatives`, or the single alternative itself. */
export function choiceOf(alternatives: Expression[]): Expression {
  return alternatives.length === 1 ? alternatives[0]! : { kind: "choice", alternatives };
}

/** One code point of a GBNF character class, escaped when it is not plain printable ASCII. */
function classCharacter(code: number): string {
  if (code >= 0x20 && code < 0x7f && !"]\\^-[".includes(String.fromCodePoint(code))) return String.fromCodePoint(code);
  if (code <= 0xff) return `\\x${code.toString(16).padStart(2, "0")}`;
  if (code <= 0xffff) return `\\u${code.toString(16).padStart(4, "0")}`;
  return `\\U${code.toString(16).padStart(8, "0")}`;
}

/** A GBNF character class; written negated when that is shorter. */
function gbnfClass(ranges: readonly CodeRange[]): string {
  const complement = complementRanges(ranges);
  const negated = complement.length < ranges.length;
  const written = (negated ? complement : ranges).map(([first, last]) =>
    first === last ? classCharacter(first) : last === first + 1 ? classCharacter(first) + classCharacter(last) : `${classCharacter(first)}-${classCharacter(last)}`,
  );
  return `[${negated ? "^" : ""}${written.join("")}]`;
}

/** Whether an expression is written as one GBNF symbol (a suffix binds to all of it). */
function isAtomic(expression: Expression): boolean {
  if (expression.kind === "class" || expression.kind === "reference") return true;
  return expression.kind === "literal" && [...expression.text].length === 1;
}

/**
 * The GBNF of one expression. Recursion is bounded by the parsers' nesting limit.
 * Repeated items of more than one symbol are parenthesized, which makes llama.cpp give them a
 * rule of their own: its repetition limit counts the symbols repeated.
 */
function gbnfExpression(expression: Expression, ruleName: (name: string) => string): string {
  switch (expression.kind) {
    case "literal":
      return gbnfLiteral(expression.text);
    case "class":
      return gbnfClass(expression.ranges);
    case "reference":
      return ruleName(expression.name);
    case "sequence":
      if (expression.items.length === 0) return '""';
      return expression.items.map((item) => (item.kind === "choice" ? `( ${gbnfExpression(item, ruleName)} )` : gbnfExpression(item, ruleName))).join(" ");
    case "choice":
      return expression.alternatives.map((alternative) => gbnfExpression(alternative, ruleName)).join(" | ");
    case "repeat": {
      const item = gbnfExpression(expression.item, ruleName);
      const operand = isAtomic(expression.item) ? item : `( ${item} )`;
      const { min, max } = expression;
      if (min === 0 && max === undefined) return `${operand}*`;
      if (min === 1 && max === undefined) return `${operand}+`;
      if (min === 0 && max === 1) return `${operand}?`;
      if (max === undefined) return `${operand}{${min},}`;
      return min === max ? `${operand}{${min}}` : `${operand}{${min},${max}}`;
    }
  }
}

/**
 * The GBNF of a grammar, its root `root`. `ruleName` maps a rule's name to a GBNF rule name
 * (letters, digits and `-`), one to one, never `root`.
 */
export function writeGbnf(grammar: Grammar, ruleName: (name: string) => string): string {
  const lines = [`root ::= ${ruleName(grammar.start)}`];
  for (const [name, expression] of grammar.rules) lines.push(`${ruleName(name)} ::= ${gbnfExpression(expression, ruleName)}`);
  return lines.join("\n");
}

/** Whether each rule can match the empty string (a fixed point over all rules). */
export function nullableRules(grammar: Grammar): Set<string> {
  const nullable = new Set<string>();
  const canBeEmpty = (expression: Expression): boolean => {
    switch (expression.kind) {
      case "literal":
        return expression.text === "";
      case "class":
        return false;
      case "reference":
        return nullable.has(expression.name);
      case "sequence":
        return expression.items.every(canBeEmpty);
      case "choice":
        return expression.alternatives.some(canBeEmpty);
      case "repeat":
        return expression.min === 0 || canBeEmpty(expression.item);
    }
  };
  let changed = true;
  while (changed) {
    changed = false;
    for (const [name, expression] of grammar.rules) {
      if (!nullable.has(name) && canBeEmpty(expression)) {
        nullable.add(name);
        changed = true;
      }
    }
  }
  return nullable;
}

/**
 * Refuses left recursion (a rule that can reach itself before matching any character):
 * llama.cpp's grammar cannot run it. Lark's parsers take it, so a grammar written for them may
 * hold it; the error names the rule so the client can rewrite it with a repetition.
 */
export function checkLeftRecursion(grammar: Grammar, displayName: (name: string) => string): void {
  const nullable = nullableRules(grammar);
  const leftReferences = new Map<string, Set<string>>();
  const collect = (expression: Expression, into: Set<string>): boolean => {
    // Adds the rules `expression` may begin with; returns whether it can be empty.
    switch (expression.kind) {
      case "literal":
        return expression.text === "";
      case "class":
        return false;
      case "reference":
        into.add(expression.name);
        return nullable.has(expression.name);
      case "sequence":
        for (const item of expression.items) if (!collect(item, into)) return false;
        return true;
      case "choice": {
        let empty = false;
        for (const alternative of expression.alternatives) empty = collect(alternative, into) || empty;
        return empty;
      }
      case "repeat":
        return collect(expression.item, into) || expression.min === 0;
    }
  };
  for (const [name, expression] of grammar.rules) {
    const into = new Set<string>();
    collect(expression, into);
    leftReferences.set(name, into);
  }
  // Iterative depth-first search for a cycle (colours: 1 on the path, 2 done).
  const colour = new Map<string, number>();
  for (const root of grammar.rules.keys()) {
    if (colour.has(root)) continue;
    const stack: { name: string; next: Iterator<string> }[] = [{ name: root, next: leftReferences.get(root)!.values() }];
    colour.set(root, 1);
    while (stack.length > 0) {
      const top = stack.at(-1)!;
      const step = top.next.next();
      if (step.done) {
        colour.set(top.name, 2);
        stack.pop();
        continue;
      }
      const state = colour.get(step.value);
      if (state === 1) {
        throw new GrammarDefinitionError(
          `Rule '${displayName(step.value)}' is left-recursive (it can begin with itself); llama.cpp's grammar cannot enforce that: write it with a repetition, e.g. 'list: item ("," item)*'.`,
          true,
        );
      }
      if (state === undefined && leftReferences.has(step.value)) {
        colour.set(step.value, 1);
        stack.push({ name: step.value, next: leftReferences.get(step.value)!.values() });
      }
    }
  }
}
