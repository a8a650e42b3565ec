/**
 * Regex formats of custom tools: each construct's GBNF and the texts it matches in full,
 * refusals, llama.cpp compiling the output, and generation on stories260K held to the regex.
 */
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { LlamaCompletion, type Llama, type LlamaModel } from "node-llama-cpp";
import { modelsDir } from "../../../test/helpers/server.ts";
import { InvalidGrammarError, UnsupportedGrammarError } from "./grammar-expression.ts";
import { GrammarRecognizer } from "./grammar-recognizer.ts";
import { parseRegexGrammar, regexToGbnf } from "./regex-grammar.ts";
import { createRuntimeLoader } from "../llamacpp/runtime.ts";

/** The GBNF of a regex, with its `root ::= start` line dropped. */
function ruleOf(pattern: string): string {
  return regexToGbnf(pattern, "tools[0].format").split("\n").slice(1).join("\n");
}

function assertLanguage(pattern: string, matching: string[], notMatching: string[]): void {
  const recognizer = new GrammarRecognizer(parseRegexGrammar(pattern));
  for (const text of matching) assert.ok(recognizer.accepts(text), `/${pattern}/ should match ${JSON.stringify(text)}`);
  for (const text of notMatching) assert.ok(!recognizer.accepts(text), `/${pattern}/ should not match ${JSON.stringify(text)}`);
}

function assertRefused(pattern: string, type: typeof UnsupportedGrammarError | typeof InvalidGrammarError, message: RegExp): void {
  assert.throws(
    () => regexToGbnf(pattern, "tools[1].format"),
    (error: unknown) => {
      assert.ok(error instanceof type, `expected ${type.name}, got ${String(error)}`);
      assert.equal(error.param, "tools[1].format");
      assert.match(error.message, message);
      return true;
    },
  );
}

describe("regexToGbnf", () => {
  it("matches the whole input, a leading '^' and trailing '$' changing nothing", () => {
    assert.equal(regexToGbnf("^abc$", "tools[0].format"), 'root ::= start\nstart ::= "abc"');
    assertLanguage("^abc$", ["abc"], ["abcd", "xabc", ""]);
  });

  it("translates literals and escapes", () => {
    assert.equal(ruleOf(String.raw`a\.b\n\t\\\x41\u00e9\/`), String.raw`start ::= "a.b\n\t\\Aé/"`);
  });

  it("translates \\d \\w \\s as ASCII sets and \\S as not whitespace in Unicode", () => {
    assert.equal(ruleOf(String.raw`\d\w\s`), "start ::= [0-9] [0-9A-Z_a-z] [\\x09-\\x0d ]");
    assertLanguage(String.raw`\S+`, ["abc", "é€"], ["a b", "a\u00a0b", "a\u2003b", ""]);
  });

  it("translates classes, negated classes, ranges and '.' without newlines", () => {
    assert.equal(ruleOf(String.raw`[a-c_\d-][^\n"].`), 'start ::= [\\x2d0-9_a-c] [^\\x0a"] [^\\x0a]');
    assertLanguage(String.raw`[]a]x[^\]]`, ["]xz", "axz"], ["]x]", "bxz"]);
    assertLanguage(".*", ["", "anything at all"], ["two\nlines"]);
  });

  it("translates groups, alternation and quantifiers, lazy ones included", () => {
    assert.equal(ruleOf(String.raw`(?:ab|c)+(?P<x>d)?e{2}f{2,}g{,3}h*?`), 'start ::= ( "ab" | "c" )+ "d"? "e"{2} "f"{2,} "g"{0,3} "h"*');
    assertLanguage(String.raw`(ab|c){2,3}x{`, ["abcx{", "ccabx{"], ["cx{", "ccccx{", "abcx"]);
  });

  it("refuses what it cannot enforce, naming it", () => {
    assertRefused("a^b", UnsupportedGrammarError, /'\^' after the start/);
    assertRefused("a$b", UnsupportedGrammarError, /'\$' before the end/);
    assertRefused("(?i)a", UnsupportedGrammarError, /inline flag/);
    assertRefused(String.raw`(?<=a)b`, UnsupportedGrammarError, /lookaround/);
    assertRefused(String.raw`\D`, UnsupportedGrammarError, /'\\D'/);
    assertRefused(String.raw`[^\w]`, UnsupportedGrammarError, /'\\w' inside a negated class/);
    assertRefused(String.raw`\p{L}`, UnsupportedGrammarError, /escape '\\p'/);
    assertRefused("a{2000}", UnsupportedGrammarError, /repetition count of 2000/);
  });

  it("refuses malformed regexes", () => {
    assertRefused("(a", InvalidGrammarError, /'\(' without its '\)'/);
    assertRefused("a)", InvalidGrammarError, /unmatched '\)'/);
    assertRefused("*a", InvalidGrammarError, /nothing to repeat/);
    assertRefused("a**", InvalidGrammarError, /quantifier after a quantifier/);
    assertRefused("[z-a]", InvalidGrammarError, /end comes before its start/);
    assertRefused("[^\\x00-\\U0010ffff]", InvalidGrammarError, /matches nothing/);
    assertRefused("a{3,2}", InvalidGrammarError, /m > n/);
  });
});

describe("regex formats on llama.cpp", () => {
  let llama: Llama;
  let model: LlamaModel;
  before(async () => {
    llama = await createRuntimeLoader({ threads: 1, gpu: "cpu" })();
    model = await llama.loadModel({ modelPath: path.join(modelsDir, "stories260K.gguf") });
  });
  after(async () => {
    await model?.dispose();
    await llama?.dispose();
  });

  it("holds generation to the regex, repetitions of empty-able groups included", async () => {
    const context = await model.createContext({ contextSize: 512, threads: 1 });
    try {
      const completion = new LlamaCompletion({ contextSequence: context.getSequence() });
      for (const pattern of [String.raw`[A-Z][a-z]+ (is|was) \d{1,3} years old\.`, String.raw`(a*|[b-z ]{0,4})*\.`, String.raw`\S{1,8}( \S{1,8}){2}`]) {
        const grammar = await llama.createGrammar({ grammar: regexToGbnf(pattern, "tools[0].format") });
        const recognizer = new GrammarRecognizer(parseRegexGrammar(pattern));
        for (let run = 0; run < 5; run++) {
          const { response, metadata } = await completion.generateCompletionWithMeta("Once upon a time", { grammar, maxTokens: 120, seed: run + 1, temperature: 0.8 });
          const shown = `/${pattern}/ run ${run} (${metadata.stopReason}): ${JSON.stringify(response)}`;
          assert.equal(metadata.stopReason, "eogToken", shown);
          assert.ok(recognizer.accepts(response), shown);
        }
      }
    } finally {
      await context.dispose();
    }
  });
});
