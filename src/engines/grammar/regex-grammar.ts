/**
 * Custom tools' formats of `syntax: "regex"`: the whole input must match the regex. Shares the
 * regex translator of Lark's terminals (`regex-syntax.ts`); see there for the subset supported.
 */
import { GRAMMAR_LIMITS, GrammarBudget, GrammarDefinitionError, grammarDefinitionRefused, writeGbnf, type Grammar } from "./grammar-expression.ts";
import { parseRegex } from "./regex-syntax.ts";

/** Parses a regex format into a grammar of one rule, `start`. Throws `GrammarDefinitionError`. */
export function parseRegexGrammar(pattern: string): Grammar {
  if (pattern.length > GRAMMAR_LIMITS.definitionLength) {
    throw new GrammarDefinitionError(`The regex is longer than ${GRAMMAR_LIMITS.definitionLength} characters.`);
  }
  return { rules: new Map([["start", parseRegex(pattern, new GrammarBudget())]]), start: "start" };
}

/**
 * The GBNF (root rule `root`) whose texts are exactly those the regex matches in full. Throws an
 * `UnsupportedGrammarError` or `InvalidGrammarError` (400s) naming `param`, e.g. `tools[0].format`.
 */
export function regexToGbnf(pattern: string, param: string): string {
  try {
    return writeGbnf(parseRegexGrammar(pattern), () => "start");
  } catch (error) {
    throw grammarDefinitionRefused(error, param);
  }
}
