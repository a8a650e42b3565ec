/**
 * Checks a text against a custom tool's grammar (`lark-grammar.ts`, `regex-grammar.ts`): an
 * Earley recognizer over the grammar tree the GBNF is written from, working on code points.
 * It takes any context-free grammar (ambiguous ones included), in O(n³) time at worst and about
 * linear time for the usual line-by-line formats, so a caller validating long inputs should bound
 * their length.
 */
import { inRanges, nullableRules, type CodeRange, type Expression, type Grammar } from "./grammar-expression.ts";

/** A flattened grammar: productions over nonterminals (numbers >= 0) and character classes (-1 - index). */
type Flat = {
  /** Productions: head nonterminal and body symbols. */
  heads: number[];
  bodies: number[][];
  /** Production indices by head. */
  byHead: number[][];
  classes: CodeRange[][];
  nullable: boolean[];
  /** The production `start' -> start`. */
  accept: number;
};

function flatten(grammar: Grammar): Flat {
  const heads: number[] = [];
  const bodies: number[][] = [];
  const byHead: number[][] = [];
  const classes: CodeRange[][] = [];
  const classIds = new Map<string, number>();
  const ruleIds = new Map<string, number>();
  const newNonterminal = (): number => byHead.push([]) - 1;
  const produce = (head: number, body: number[]): void => {
    byHead[head]!.push(heads.length);
    heads.push(head);
    bodies.push(body);
  };
  const classSymbol = (ranges: CodeRange[]): number => {
    const key = ranges.map(([first, last]) => `${first}-${last}`).join(",");
    let id = classIds.get(key);
    if (id === undefined) {
      id = classes.push(ranges) - 1;
      classIds.set(key, id);
    }
    return -1 - id;
  };
  for (const name of grammar.rules.keys()) ruleIds.set(name, newNonterminal());
  // The symbols one expression is written as (recursion bounded by the parsers' nesting limit).
  const symbols = (expression: Expression): number[] => {
    switch (expression.kind) {
      case "literal":
        return [...expression.text].map((character) => classSymbol([[character.codePointAt(0)!, character.codePointAt(0)!]]));
      case "class":
        return [classSymbol(expression.ranges)];
      case "reference":
        return [ruleIds.get(expression.name)!];
      case "sequence":
        return expression.items.flatMap(symbols);
      case "choice": {
        const head = newNonterminal();
        for (const alternative of expression.alternatives) produce(head, symbols(alternative));
        return [head];
      }
      case "repeat": {
        const item = symbols(expression.item);
        const body: number[] = [];
        for (let count = 0; count < expression.min; count++) body.push(...item);
        if (expression.max === undefined) {
          // Left recursion: Earley runs it in linear time.
          const star = newNonterminal();
          produce(star, []);
          produce(star, [star, ...item]);
          body.push(star);
        } else if (expression.max > expression.min) {
          let optional = newNonterminal();
          produce(optional, []);
          produce(optional, item);
          for (let count = expression.min + 1; count < expression.max; count++) {
            const outer = newNonterminal();
            produce(outer, []);
            produce(outer, [...item, optional]);
            optional = outer;
          }
          body.push(optional);
        }
        const head = newNonterminal();
        produce(head, body);
        return [head];
      }
    }
  };
  for (const [name, expression] of grammar.rules) produce(ruleIds.get(name)!, symbols(expression));
  const acceptHead = newNonterminal();
  const accept = heads.length;
  produce(acceptHead, [ruleIds.get(grammar.start)!]);
  // Nullable nonterminals: the rules' own, then a fixed point over the productions.
  const nullable = byHead.map(() => false);
  const nullableNames = nullableRules(grammar);
  for (const [name, id] of ruleIds) nullable[id] = nullableNames.has(name);
  let changed = true;
  while (changed) {
    changed = false;
    for (let production = 0; production < heads.length; production++) {
      if (!nullable[heads[production]!] && bodies[production]!.every((symbol) => symbol >= 0 && nullable[symbol])) {
        nullable[heads[production]!] = true;
        changed = true;
      }
    }
  }
  return { heads, bodies, byHead, classes, nullable, accept };
}

/** Checks whole texts against one grammar; build it once, call `accepts` for each text. */
export class GrammarRecognizer {
  readonly #flat: Flat;

  constructor(grammar: Grammar) {
    this.#flat = flatten(grammar);
  }

  /** Whether the grammar's start rule matches all of `text`. */
  accepts(text: string): boolean {
    return this.#run(text) === "complete";
  }

  /** Whether `text` begins some text the grammar matches (or is one): a generation cut short is. */
  acceptsPrefix(text: string): boolean {
    return this.#run(text) !== "rejected";
  }

  #run(text: string): "complete" | "prefix" | "rejected" {
    const { heads, bodies, byHead, classes, nullable, accept } = this.#flat;
    const codes = Array.from(text, (character) => character.codePointAt(0)!);
    // An item is [production, dot, origin]; each set dedupes them by a string key.
    type Item = [production: number, dot: number, origin: number];
    const sets: Item[][] = [];
    const waiting: Map<number, Item[]>[] = [];
    let current: Item[] = [[accept, 0, 0]];
    for (let position = 0; position <= codes.length; position++) {
      const seen = new Set<string>();
      const items: Item[] = [];
      const waits = new Map<number, Item[]>();
      sets.push(items);
      waiting.push(waits);
      const add = (item: Item): void => {
        const key = `${item[0]},${item[1]},${item[2]}`;
        if (seen.has(key)) return;
        seen.add(key);
        items.push(item);
      };
      for (const item of current) add(item);
      const next: Item[] = [];
      for (let index = 0; index < items.length; index++) {
        const [production, dot, origin] = items[index]!;
        const body = bodies[production]!;
        if (dot === body.length) {
          // Complete: advance whatever waited for this head where it began.
          const head = heads[production]!;
          for (const parent of origin === position ? (waits.get(head) ?? []) : (waiting[origin]!.get(head) ?? [])) add([parent[0], parent[1] + 1, parent[2]]);
          continue;
        }
        const symbol = body[dot]!;
        if (symbol < 0) {
          if (position < codes.length && inRanges(classes[-1 - symbol]!, codes[position]!)) next.push([production, dot + 1, origin]);
          continue;
        }
        const list = waits.get(symbol);
        if (list === undefined) waits.set(symbol, [[production, dot, origin]]);
        else list.push([production, dot, origin]);
        for (const predicted of byHead[symbol]!) add([predicted, 0, position]);
        // A nullable symbol may be skipped right away (Aycock and Horspool's fix for empty rules).
        if (nullable[symbol]) add([production, dot + 1, origin]);
      }
      if (position === codes.length) return items.some(([production, dot, origin]) => production === accept && dot === 1 && origin === 0) ? "complete" : "prefix";
      if (next.length === 0) return "rejected";
      current = next;
    }
    return "rejected";
  }
}
