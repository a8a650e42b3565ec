/**
 * Grammar composition: rule prefixes, literals, the call syntax of chat templates, and the
 * reply grammars llama.cpp must accept for templates with and without their own tool format.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { ChatMLChatWrapper, GeneralChatWrapper, Llama3_1ChatWrapper, Llama2ChatWrapper, QwenChatWrapper, type ChatWrapper, type Llama } from "node-llama-cpp";
import { createRuntimeLoader } from "./runtime.ts";
import { callSyntaxOf, gbnfLiteral, GrammarFactory, prefixRules, replyGrammarText } from "./grammar.ts";
import { SCHEMA_LIMITS, UnsupportedSchemaError } from "./json-schema.ts";

describe("prefixRules", () => {
  it("renames rule definitions and references, never literals or character classes", () => {
    const grammar = 'root ::= "{" ws value "}"\nvalue ::= "value" | [a-z]+ ws\nws ::= [ \\t]*  # ws stays\n';
    const renamed = prefixRules(grammar, "p-");
    assert.equal(renamed, 'p-root ::= "{" p-ws p-value "}"\np-value ::= "value" | [a-z]+ p-ws\np-ws ::= [ \\t]*  \n');
  });
});

describe("gbnfLiteral", () => {
  it("escapes quotes, backslashes and control characters", () => {
    assert.equal(gbnfLiteral('a"b\\c\nd\te\u0001'), '"a\\"b\\\\c\\nd\\te\\x01"');
  });
});

describe("callSyntaxOf", () => {
  it("uses node-llama-cpp's generic syntax for templates without a tool format", () => {
    for (const wrapper of [new Llama2ChatWrapper(), new ChatMLChatWrapper(), new GeneralChatWrapper()]) {
      const syntax = callSyntaxOf(wrapper);
      assert.equal(syntax.prefix, "||call: ");
      assert.equal(syntax.paramsPrefix("f"), "(");
      assert.equal(syntax.suffix, ")");
    }
  });

  it("reads a template's own tool format", () => {
    const syntax = callSyntaxOf(new QwenChatWrapper());
    assert.equal(syntax.prefix, '<tool_call>\n{"name": "');
    assert.equal(syntax.paramsPrefix("f"), '", "arguments": ');
  });
});

describe("reply grammars", () => {
  let llama: Llama;
  let factory: GrammarFactory;
  before(async () => {
    llama = await createRuntimeLoader({ threads: 1, gpu: "cpu" })();
    factory = new GrammarFactory(llama);
  });
  after(async () => {
    await llama?.dispose();
  });

  const tools = [
    { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } } } },
    { name: "get_time" },
  ];
  const wrappers: ChatWrapper[] = [new Llama2ChatWrapper(), new ChatMLChatWrapper(), new QwenChatWrapper(), new Llama3_1ChatWrapper()];

  for (const wrapper of wrappers) {
    it(`compiles for every tool choice with the ${wrapper.wrapperName} template`, async () => {
      const syntax = callSyntaxOf(wrapper);
      for (const choice of ["auto", "required", { name: "get_time" }] as const) {
        for (const format of [undefined, { type: "json_object" as const }, { type: "json_schema" as const, name: "x", schema: { type: "object", properties: { a: { type: "boolean" } } } }]) {
          const text = await replyGrammarText(factory, { tools, choice, parallel: true, syntax, format });
          await factory.grammar(text);
        }
      }
    });
  }

  it("writes integers as plain digits and drops node-llama-cpp's trailing newlines", async () => {
    const text = await factory.contentRules({ type: "json_schema", name: "x", schema: { type: "object", properties: { n: { type: "integer" } } } }, "");
    assert.match(text!, /^integer-number-rule ::= "-"\? \("0" \| \[1-9\] \[0-9\]\{0,14\}\)$/m);
    assert.doesNotMatch(text!, /\\n\\n\\n\\n/);
  });

  it("compiles the largest bounds the schema translator lets through", async () => {
    const schema = {
      type: "object",
      properties: {
        text: { type: "string", minLength: SCHEMA_LIMITS.repetitions, maxLength: SCHEMA_LIMITS.repetitions },
        short: { type: "string", maxLength: SCHEMA_LIMITS.repetitions },
        list: { type: "array", items: { type: "integer" }, minItems: SCHEMA_LIMITS.repetitions, maxItems: SCHEMA_LIMITS.repetitions },
        choice: { enum: Array.from({ length: SCHEMA_LIMITS.enumValues }, (_, index) => `value-${index}`) },
      },
    };
    const text = await factory.contentRules({ type: "json_schema", name: "x", schema }, "");
    await factory.grammar(text!);
  });

  it("refuses tool parameters that are not an object schema, naming them", async () => {
    await assert.rejects(
      replyGrammarText(factory, { tools: [{ name: "f", parameters: { type: "array" } }], choice: "auto", parallel: true, syntax: callSyntaxOf(new GeneralChatWrapper()) }),
      (error: unknown) => error instanceof UnsupportedSchemaError && error.param === "tools[0].function.parameters",
    );
  });
});
