/**
 * toGrammarSchema: what the grammar enforces, and every keyword it refuses with a 400 naming it.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { z } from "zod";
import { zodResponseFormat } from "openai/helpers/zod";
import { SCHEMA_LIMITS, SchemaBudget, toGrammarSchema, UnsupportedSchemaError } from "./json-schema.ts";

const base = "response_format.json_schema.schema";

function assertRefused(schema: Record<string, unknown>, param: string, mentions?: string, budget?: SchemaBudget): void {
  assert.throws(
    () => toGrammarSchema(schema, base, budget),
    (error: unknown) => {
      assert.ok(error instanceof UnsupportedSchemaError, `expected UnsupportedSchemaError, got ${String(error)}`);
      assert.equal(error.status, 400);
      assert.equal(error.type, "invalid_request_error");
      assert.equal(error.code, "unsupported_parameter");
      assert.equal(error.param, param);
      if (mentions !== undefined) assert.match(error.message, new RegExp(mentions));
      return true;
    },
  );
}

describe("toGrammarSchema", () => {
  it("translates a plain object schema, keeping descriptions and string lengths", () => {
    const translated = toGrammarSchema(
      {
        $schema: "https://json-schema.org/draft/2020-12/schema",
        type: "object",
        description: "A person",
        properties: { name: { type: "string", maxLength: 20 }, age: { type: "integer" }, ok: { type: "boolean" } },
        required: ["name", "age"],
        additionalProperties: false,
      },
      base,
    );
    assert.deepEqual(translated, {
      type: "object",
      description: "A person",
      properties: { name: { type: "string", maxLength: 20 }, age: { type: "integer" }, ok: { type: "boolean" } },
      additionalProperties: false,
    });
  });

  it("turns type lists, anyOf, enum and const into grammar alternatives", () => {
    const translated = toGrammarSchema(
      {
        type: "object",
        properties: {
          maybe: { type: ["string", "null"] },
          either: { anyOf: [{ type: "number" }, { type: "null" }] },
          kind: { type: "string", enum: ["a", "b"] },
          fixed: { type: "string", const: "x" },
        },
      },
      base,
    );
    assert.deepEqual(translated, {
      type: "object",
      properties: {
        maybe: { oneOf: [{ type: "string" }, { type: "null" }] },
        either: { oneOf: [{ type: "number" }, { type: "null" }] },
        kind: { enum: ["a", "b"] },
        fixed: { const: "x" },
      },
      additionalProperties: false,
    });
  });

  it("accepts what zod and the OpenAI SDK's zodResponseFormat emit", () => {
    const item = z.object({ label: z.string().max(10), qty: z.number().int() });
    const schema = z.object({
      name: z.string(),
      age: z.number().int().nullable(),
      kind: z.enum(["a", "b"]),
      items: z.array(item),
      tag: z.literal("x"),
      either: z.union([z.string(), z.number()]),
      shape: z.discriminatedUnion("t", [z.object({ t: z.literal("p"), v: z.string() }), z.object({ t: z.literal("q"), w: z.number() })]),
    });
    toGrammarSchema(z.toJSONSchema(schema) as Record<string, unknown>, base);
    const format = zodResponseFormat(schema, "thing");
    toGrammarSchema(format.json_schema.schema as Record<string, unknown>, base);
  });

  it("resolves $defs references, recursive ones included", () => {
    const translated = toGrammarSchema(
      {
        type: "object",
        properties: { root: { $ref: "#/$defs/node" } },
        $defs: { node: { type: "object", properties: { children: { type: "array", items: { $ref: "#/$defs/node" } } } } },
      },
      base,
    ) as Record<string, any>;
    assert.ok(translated.$defs["d-node"], "the definition is carried along");
    assert.deepEqual(translated.oneOf[0].properties.root, { $ref: "#/$defs/d-node" });
  });

  it("treats an object without properties as any object and true as any value", () => {
    assert.deepEqual(toGrammarSchema({ type: "object" }, base), { type: "object", properties: {}, additionalProperties: true });
    const anything = toGrammarSchema({ type: "object", properties: { x: true } }, base) as Record<string, any>;
    assert.ok(Array.isArray(anything.properties.x.oneOf));
  });

  it("accepts the safe-integer bounds zod emits, which the grammar implies", () => {
    toGrammarSchema({ type: "integer", minimum: -9007199254740991, maximum: 9007199254740991 }, base);
  });

  it("accepts oneOf whose alternatives cannot overlap", () => {
    toGrammarSchema({ oneOf: [{ type: "string" }, { type: "number" }] }, base);
    toGrammarSchema({ oneOf: [{ const: "a" }, { const: "b" }] }, base);
  });

  const refused: Array<[string, Record<string, unknown>, string, string]> = [
    ["pattern", { type: "string", pattern: "^a+$" }, `${base}.pattern`, "pattern"],
    ["an unsupported format", { type: "string", format: "email" }, `${base}.format`, "email"],
    ["minimum", { type: "number", minimum: 0 }, `${base}.minimum`, "minimum"],
    ["maximum on an integer", { type: "integer", maximum: 10 }, `${base}.maximum`, "maximum"],
    ["multipleOf", { type: "number", multipleOf: 2 }, `${base}.multipleOf`, "multipleOf"],
    ["not", { not: { type: "string" } }, `${base}.not`, "not"],
    ["if/then", { if: { type: "string" }, then: { maxLength: 2 } }, `${base}.if`, "if"],
    ["allOf of two", { allOf: [{ type: "object" }, { type: "object" }] }, `${base}.allOf`, "allOf"],
    ["uniqueItems", { type: "array", uniqueItems: true }, `${base}.uniqueItems`, "uniqueItems"],
    ["patternProperties", { type: "object", patternProperties: { "^x": { type: "string" } } }, `${base}.patternProperties`, "patternProperties"],
    ["an object enum value", { enum: [{ a: 1 }] }, `${base}.enum`, "enum"],
    ["an external $ref", { $ref: "https://example.com/schema.json" }, `${base}.$ref`, "reference"],
    ["a $ref to nothing", { $ref: "#/$defs/missing" }, `${base}.$ref`, "no definition"],
    ["a required property that is not declared", { type: "object", properties: {}, required: ["x"] }, `${base}.required`, "required"],
    ["overlapping oneOf", { oneOf: [{ type: "string" }, { type: "string", maxLength: 3 }] }, `${base}.oneOf`, "anyOf"],
    ["minProperties", { type: "object", minProperties: 1 }, `${base}.minProperties`, "minProperties"],
    ["an unknown type", { type: "date" }, `${base}.type`, "date"],
    ["draft-4 tuple items", { type: "array", items: [{ type: "string" }] }, `${base}.items`, "prefixItems"],
    ["nullable", { type: "string", nullable: true }, `${base}.nullable`, "nullable"],
  ];
  for (const [what, schema, param, mentions] of refused) {
    it(`refuses ${what}, naming '${param}'`, () => assertRefused(schema, param, mentions));
  }

  it("refuses a $ref cycle with no object or array in between (left recursion), naming the $ref", () => {
    assertRefused({ $defs: { a: { $ref: "#/$defs/b" }, b: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" }, `${base}.$defs.b.$ref`, "leads back to itself");
    assertRefused({ $defs: { a: { anyOf: [{ $ref: "#/$defs/a" }, { type: "null" }] } }, $ref: "#/$defs/a" }, `${base}.$defs.a.anyOf[0].$ref`, "leads back");
    assertRefused({ anyOf: [{ $ref: "#" }, { type: "string" }] }, `${base}.anyOf[0].$ref`, "leads back");
    assertRefused({ allOf: [{ $ref: "#" }] }, `${base}.allOf[0].$ref`, "leads back");
  });

  it("accepts recursion through an object or an array", () => {
    toGrammarSchema({ $defs: { node: { type: "object", properties: { next: { anyOf: [{ $ref: "#/$defs/node" }, { type: "null" }] } } } }, $ref: "#/$defs/node" }, base);
    toGrammarSchema({ anyOf: [{ type: "array", items: { $ref: "#" } }, { type: "string" }] }, base);
    toGrammarSchema({ $defs: { a: { $ref: "#/$defs/b" }, b: { type: "array", prefixItems: [{ $ref: "#/$defs/a" }] } }, $ref: "#/$defs/a" }, base);
    toGrammarSchema({ $defs: { a: { type: "object", additionalProperties: { $ref: "#/$defs/a" } } }, $ref: "#/$defs/a" }, base);
  });

  it("refuses schemas past its size limits, naming where", () => {
    const nested = (levels: number) => {
      let schema: Record<string, unknown> = { type: "string" };
      for (let level = 0; level < levels; level++) schema = { type: "object", properties: { a: schema } };
      return schema;
    };
    // Each level is one subschema deeper: the string inside `levels` objects is `levels` + 1 deep.
    toGrammarSchema(nested(SCHEMA_LIMITS.depth - 1), base);
    assertRefused(nested(SCHEMA_LIMITS.depth), `${base}${".properties.a".repeat(SCHEMA_LIMITS.depth)}`, "nest at most 64");
    assertRefused(nested(10_000), `${base}${".properties.a".repeat(SCHEMA_LIMITS.depth)}`, "nest at most 64");

    const wide = (count: number) => ({ type: "object", properties: Object.fromEntries(Array.from({ length: count }, (_, index) => [`p${index}`, { type: "string" }])) });
    toGrammarSchema(wide(SCHEMA_LIMITS.subschemas - 1), base);
    assertRefused(wide(SCHEMA_LIMITS.subschemas), `${base}.properties.p${SCHEMA_LIMITS.subschemas - 1}`, "at most 5000 subschemas");

    toGrammarSchema({ enum: Array.from({ length: SCHEMA_LIMITS.enumValues }, (_, index) => index) }, base);
    assertRefused({ enum: Array.from({ length: SCHEMA_LIMITS.enumValues + 1 }, (_, index) => index) }, `${base}.enum`, "at most 1000 values");

    const oneOf = (count: number) => ({ oneOf: Array.from({ length: count }, (_, index) => ({ const: index })) });
    toGrammarSchema(oneOf(SCHEMA_LIMITS.oneOfAlternatives), base);
    assertRefused(oneOf(SCHEMA_LIMITS.oneOfAlternatives + 1), `${base}.oneOf`, "anyOf");

    for (const keyword of ["minLength", "maxLength"]) {
      toGrammarSchema({ type: "string", [keyword]: SCHEMA_LIMITS.repetitions }, base);
      assertRefused({ type: "string", [keyword]: SCHEMA_LIMITS.repetitions + 1 }, `${base}.${keyword}`, "above 1000");
    }
    for (const keyword of ["minItems", "maxItems"]) {
      toGrammarSchema({ type: "array", items: { type: "integer" }, [keyword]: SCHEMA_LIMITS.repetitions }, base);
      assertRefused({ type: "array", items: { type: "integer" }, [keyword]: 100_000 }, `${base}.${keyword}`, "above 1000");
    }
    // Past a prefix, the repeated rule is bigger: llama.cpp allows fewer repetitions of it.
    const prefixItems = [{ type: "string" }];
    toGrammarSchema({ type: "array", prefixItems, maxItems: 1 + SCHEMA_LIMITS.repetitionsAfterPrefix }, base);
    assertRefused({ type: "array", prefixItems, maxItems: 2 + SCHEMA_LIMITS.repetitionsAfterPrefix }, `${base}.maxItems`, "past 'prefixItems'");
    assertRefused({ type: "array", prefixItems, minItems: 2 + SCHEMA_LIMITS.repetitionsAfterPrefix }, `${base}.minItems`, "past 'prefixItems'");
  });

  it("names the nested path of a refused keyword", () => {
    assertRefused(
      { type: "object", properties: { items: { type: "array", items: { type: "object", properties: { email: { type: "string", format: "email" } } } } } },
      `${base}.properties.items.items.properties.email.format`,
    );
    assertRefused({ anyOf: [{ type: "string" }, { type: "string", pattern: "x" }] }, `${base}.anyOf[1].pattern`);
  });

  describe("work", () => {
    /** Issue 9 row 1: `levels` definitions, each an anyOf of `fanOut` references to the next. */
    function chain(fanOut: number, levels: number, beside: Record<string, unknown>): Record<string, unknown> {
      const $defs: Record<string, unknown> = {};
      for (let level = 0; level < levels; level++) {
        $defs[`d${level}`] = level === levels - 1 ? { type: "string" } : { anyOf: Array.from({ length: fanOut }, () => ({ $ref: `#/$defs/d${level + 1}` })) };
      }
      return { $defs, type: "object", properties: { x: { oneOf: [{ $ref: "#/$defs/d0" }, beside] } } };
    }

    /** CPU milliseconds `run` takes. */
    function cpuMs(run: () => void): number {
      const before = process.cpuUsage();
      run();
      const used = process.cpuUsage(before);
      return (used.user + used.system) / 1000;
    }

    it("checks oneOf over a chain of definitions with many references each, each definition once (issue 9 row 1)", () => {
      // Before: every path through the chain was followed, fanOut^levels of them (k=10: seconds).
      const spent = cpuMs(() => {
        assertRefused(chain(4, 6, { type: "string" }), `${base}.properties.x.oneOf`, "may both match");
        toGrammarSchema(chain(4, 6, { type: "number" }), base);
      });
      assert.ok(spent < 1000, `took ${spent} ms of CPU`);
    });

    it("refuses a choice that expands to too many alternatives through its references, naming it", () => {
      // 40 references to the next of 8 levels: 40^7 paths llama.cpp's grammar would follow.
      const spent = cpuMs(() => {
        assertRefused(chain(40, 8, { type: "string" }), `${base}.$defs.d4.anyOf`, "expands to 64000 alternatives");
        assertRefused(chain(40, 8, { type: "number" }), `${base}.$defs.d4.anyOf`, "expands to");
      });
      assert.ok(spent < 1000, `took ${spent} ms of CPU`);
      const enums = { anyOf: Array.from({ length: 5 }, (_, index) => ({ enum: Array.from({ length: 1000 }, (_, value) => `${index}-${value}`) })) };
      assertRefused(enums, `${base}.anyOf`, "expands to 5000 alternatives");
      toGrammarSchema({ anyOf: enums.anyOf.slice(0, 4) }, base);
    });

    it("refuses schemas whose overlap checks would pass the work budget, naming the schema", () => {
      // 64 alternatives of 60 distinct values each: 2016 pairs to compare.
      const alternatives = Array.from({ length: SCHEMA_LIMITS.oneOfAlternatives }, (_, index) => ({ enum: Array.from({ length: 60 }, (_, value) => index * 1000 + value) }));
      const spent = cpuMs(() => assertRefused({ oneOf: alternatives }, base, "too complex"));
      assert.ok(spent < 1000, `took ${spent} ms of CPU`);
    });

    it("refuses many definitions used from many places (node-llama-cpp's bookkeeping is their product)", () => {
      const $defs: Record<string, unknown> = {};
      const properties: Record<string, unknown> = {};
      for (let index = 0; index < 1500; index++) {
        $defs[`d${index}`] = { type: "object", properties: { v: { type: "string" } } };
        properties[`p${index}`] = { $ref: `#/$defs/d${index}` };
      }
      assertRefused({ $defs, type: "object", properties }, base, "too complex");
    });

    it("shares one budget across the schemas of a request, refusing the one that passes it", () => {
      const budget = new SchemaBudget();
      const long = { type: "object", properties: Object.fromEntries(Array.from({ length: 20 }, (_, index) => [`p${index}`, { type: "string", maxLength: SCHEMA_LIMITS.repetitions }])) };
      toGrammarSchema(long, "tools[0].function.parameters", budget);
      toGrammarSchema(long, "tools[1].function.parameters", budget);
      assert.throws(
        () => toGrammarSchema(long, "tools[2].function.parameters", budget),
        (error: unknown) => error instanceof UnsupportedSchemaError && error.param === "tools[2].function.parameters" && /too complex/.test(error.message),
      );
    });
  });
});
