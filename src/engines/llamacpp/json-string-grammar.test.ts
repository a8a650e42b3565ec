/**
 * The JSON-string encoding of a custom tool's grammar: the encoded grammar takes exactly the
 * encodings of the texts the grammar takes (checked by the recognizer on both trees), and its
 * GBNF compiles in llama.cpp.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Llama } from "node-llama-cpp";
import { GrammarRecognizer } from "../grammar/grammar-recognizer.ts";
import { customArgumentsRules, escapeJsonText, jsonStringGrammar, parseCustomFormat } from "./json-string-grammar.ts";
import { InvalidGrammarError, UnsupportedGrammarError } from "../grammar/grammar-expression.ts";
import { createRuntimeLoader } from "./runtime.ts";
import { APPLY_PATCH } from "../grammar/test-grammars.ts";

const PATCH = "*** Begin Patch\n*** Add File: a \"b\"\\c.txt\n+\tsay \"hi\"\x01\x1f\n*** End Patch\n";

/** Formats, with texts they match and texts they do not. */
const CASES = [
  {
    format: { type: "grammar", syntax: "lark", definition: APPLY_PATCH } as const,
    matching: [PATCH, "*** Begin Patch\n*** Delete File: x\n*** End Patch"],
    notMatching: ["*** Begin Patch\n*** End Patch\n", `${PATCH}\n`],
  },
  {
    format: { type: "grammar", syntax: "regex", definition: String.raw`[^a]{1,3}"\\[\x00-\x1f]\n?` } as const,
    matching: ['"\\\\"\\\x00', '\n\t\x7f"\\\x1f\n', 'é"\\\t'],
    notMatching: ['a"\\\x00', '"\\ ', ""],
  },
  { format: { type: "text" } as const, matching: ["", PATCH, "😀\u2028\x00"], notMatching: [] },
];

describe("jsonStringGrammar", () => {
  it("takes exactly the JSON encodings of the grammar's texts", () => {
    for (const { format, matching, notMatching } of CASES) {
      const { grammar } = parseCustomFormat(format, "tools[0].format");
      const plain = new GrammarRecognizer(grammar);
      const encoded = new GrammarRecognizer(jsonStringGrammar(grammar));
      for (const text of matching) {
        assert.ok(plain.accepts(text), `the format takes ${JSON.stringify(text)}`);
        assert.ok(encoded.accepts(escapeJsonText(text)), `the encoded grammar takes ${JSON.stringify(escapeJsonText(text))}`);
        // The encoding is JSON's: decoding gives the text back.
        assert.equal(JSON.parse(`"${escapeJsonText(text)}"`), text);
        if (/["\\\n\t\x00-\x1f]/.test(text)) assert.ok(!encoded.accepts(text), `the raw ${JSON.stringify(text)} is no JSON string text`);
      }
      for (const text of notMatching) assert.ok(!encoded.accepts(escapeJsonText(text)), `the encoded grammar refuses ${JSON.stringify(text)}`);
    }
  });

  it("writes one encoding per character: \\u00xx in lower case for other controls", () => {
    assert.equal(escapeJsonText('"\\\n\t\r\x01\x1f/é'), '\\"\\\\\\n\\t\\u000d\\u0001\\u001f/é');
  });

  it("refuses a format it cannot enforce with a 400 naming the tool's format", () => {
    assert.throws(() => parseCustomFormat({ type: "grammar", syntax: "lark", definition: "start: a\na: a \"x\" | \"y\"" }, "tools[3].format"), (error: unknown) => {
      assert.ok(error instanceof UnsupportedGrammarError);
      assert.equal(error.param, "tools[3].format");
      return true;
    });
    assert.throws(() => parseCustomFormat({ type: "grammar", syntax: "regex", definition: "(" }, "tools[1].format"), InvalidGrammarError);
  });
});

describe("customArgumentsRules on llama.cpp", () => {
  let llama: Llama;
  before(async () => {
    llama = await createRuntimeLoader({ threads: 1, gpu: "cpu" })();
  });
  after(async () => {
    await llama?.dispose();
  });

  it("compiles for every format", async () => {
    for (const { format } of CASES) {
      const rules = customArgumentsRules(parseCustomFormat(format, "tools[0].format"), "t0-");
      const grammar = await llama.createGrammar({ grammar: `root ::= t0-root\n${rules}` });
      assert.match(grammar.grammar, /^t0-root ::= "\{\\"input\\": \\"" t0-in-root "\\"\}"$/m);
    }
  });
});
