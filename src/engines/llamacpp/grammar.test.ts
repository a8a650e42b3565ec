/**
 * Grammar composition: rule prefixes, literals, the call syntax of chat templates, and the
 * reply grammars llama.cpp must accept for templates with and without their own tool format.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { ChatMLChatWrapper, GeneralChatWrapper, Llama3_1ChatWrapper, Llama2ChatWrapper, QwenChatWrapper, type ChatWrapper, type Llama } from "node-llama-cpp";
import { createRuntimeLoader } from "./runtime.ts";
import { callSyntaxOf, contentFormat, GrammarFactory, grammarRefused, prefixRules, replyGrammarText, toolParametersSchema } from "./grammar.ts";
import { gbnfLiteral } from "../grammar/grammar-expression.ts";
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
  ].map((tool, index) => ({ name: tool.name, parameters: toolParametersSchema(tool, index) }));
  const wrappers: ChatWrapper[] = [new Llama2ChatWrapper(), new ChatMLChatWrapper(), new QwenChatWrapper(), new Llama3_1ChatWrapper()];

  for (const wrapper of wrappers) {
    it(`compiles for every tool choice with the ${wrapper.wrapperName} template`, async () => {
      const syntax = callSyntaxOf(wrapper);
      for (const choice of ["auto", "required", { name: "get_time" }] as const) {
        for (const format of [undefined, { type: "json_object" as const }, { type: "json_schema" as const, name: "x", schema: { type: "object", properties: { a: { type: "boolean" } } } }]) {
          const text = await replyGrammarText(factory, { tools, choice, parallel: true, syntax, format: contentFormat(format) });
          await factory.grammar(text, "tools");
        }
      }
    });
  }

  it("writes integers as plain digits and drops node-llama-cpp's trailing newlines", async () => {
    const text = await factory.contentRules(contentFormat({ type: "json_schema", name: "x", schema: { type: "object", properties: { n: { type: "integer" } } } }), "");
    assert.match(text!, /^integer-number-rule ::= "-"\? \("0" \| \[1-9\] \[0-9\]\{0,14\}\)$/m);
    assert.doesNotMatch(text!, /\\n\\n\\n\\n/);
  });

  it("compiles the largest bounds the schema translator lets through, in every shape node-llama-cpp writes", async () => {
    const most = SCHEMA_LIMITS.repetitions;
    const past = SCHEMA_LIMITS.repetitionsAfterPrefix;
    const items = [undefined, { type: "integer" }, { type: "string", maxLength: most }, { type: ["string", "null"] }, { enum: ["a", 3] }, { type: "object", properties: { q: { type: "string" } } }, { anyOf: [{ type: "string" }, { type: "number" }] }];
    const shapes: Array<Record<string, unknown>> = [
      { type: "string", maxLength: most },
      { type: "string", minLength: most },
      { type: "string", minLength: 1, maxLength: most },
      { type: "string", minLength: most, maxLength: most },
      { enum: Array.from({ length: SCHEMA_LIMITS.enumValues }, (_, index) => `value-${index}`) },
    ];
    for (const item of items) {
      for (const [minItems, maxItems] of [[undefined, most], [1, most], [2, most], [most, most], [most, undefined]]) {
        shapes.push({ type: "array", ...(item ? { items: item } : {}), ...(minItems !== undefined ? { minItems } : {}), ...(maxItems !== undefined ? { maxItems } : {}) });
      }
      for (const prefixItems of [[{ type: "string" }], [{ type: "string" }, { type: "boolean" }]]) {
        const length = prefixItems.length;
        for (const [minItems, maxItems] of [[undefined, length + past], [length + past, undefined], [length + past, length + past], [length + 1, length + past]]) {
          shapes.push({ type: "array", prefixItems, ...(item ? { items: item } : {}), ...(minItems !== undefined ? { minItems } : {}), ...(maxItems !== undefined ? { maxItems } : {}) });
        }
      }
    }
    for (const shape of shapes) {
      const label = JSON.stringify(shape).slice(0, 160);
      const text = await factory.contentRules(contentFormat({ type: "json_schema", name: "x", schema: shape }), "");
      await factory.grammar(text!, "response_format").catch((error: unknown) => assert.fail(`${label}: ${String(error)}`));
      // As a property of tool parameters, beside a response format, as the reply grammar composes them.
      const tool = { name: "f", parameters: toolParametersSchema({ name: "f", parameters: { type: "object", properties: { a: shape, b: { type: "array", items: shape } } } }, 0) };
      const reply = await replyGrammarText(factory, { tools: [tool], choice: "auto", parallel: true, syntax: callSyntaxOf(new QwenChatWrapper()), format: contentFormat({ type: "json_schema", name: "x", schema: shape }) });
      await factory.grammar(reply, "tools").catch((error: unknown) => assert.fail(`${label} in a tool: ${String(error)}`));
    }
  });

  it("refuses the bounds llama.cpp's parser refuses with a 400 naming them, not a 500 (issue 9 row 7)", async () => {
    // Before: the translator let up to 2000 through, and llama.cpp's refusal became a 500.
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ type: "string", maxLength: 1500 }, "maxLength"],
      [{ type: "string", minLength: 1001 }, "minLength"],
      [{ type: "array", items: { type: "integer" }, maxItems: 1002 }, "maxItems"],
      [{ type: "array", items: { type: "integer" }, maxItems: 2000 }, "maxItems"],
      [{ type: "array", prefixItems: [{ type: "string" }], maxItems: 1000 }, "maxItems"],
    ];
    for (const [schema, keyword] of cases) {
      await assert.rejects(
        async () => factory.contentRules(contentFormat({ type: "json_schema", name: "x", schema }), ""),
        (error: unknown) => error instanceof UnsupportedSchemaError && error.status === 400 && error.param === `response_format.json_schema.schema.${keyword}`,
        JSON.stringify(schema),
      );
    }
  });

  it("turns any grammar llama.cpp refuses into a 400 unsupported_parameter naming the place", async () => {
    await assert.rejects(factory.grammar('root ::= "a" ( "b" ){0,1999} | (', "tools"), (error: unknown) => {
      assert.ok(error instanceof UnsupportedSchemaError, String(error));
      assert.equal(error.status, 400);
      assert.equal(error.code, "unsupported_parameter");
      assert.equal(error.param, "tools");
      assert.match(error.message, /could not build a grammar for it \(Failed to parse grammar\)/);
      return true;
    });
    // A reason that is not a plain sentence (it could hold a path) is left out.
    const refusal = grammarRefused(new Error('Grammar file for type "json" was not found in "/opt/secret/grammars"'), "response_format");
    assert.equal(refusal.status, 400);
    assert.doesNotMatch(refusal.message, /secret/);
    // The failure is not cached under another request's name.
    await assert.rejects(factory.grammar('root ::= "a" ( "b" ){0,1999} | (', "response_format.json_schema.schema"), (error: unknown) => error instanceof UnsupportedSchemaError && error.param === "response_format.json_schema.schema");
  });

  it("refuses tool parameters that are not an object schema, naming them", () => {
    assert.throws(
      () => toolParametersSchema({ name: "f", parameters: { type: "array" } }, 0),
      (error: unknown) => error instanceof UnsupportedSchemaError && error.param === "tools[0].function.parameters",
    );
  });
});
