/**
 * Translates a client's JSON Schema into the subset node-llama-cpp's grammar generator
 * (`GbnfJsonSchema`) enforces, or refuses it naming the first keyword it cannot enforce.
 * Nothing is silently dropped: a keyword is either enforced by the grammar, provably implied by
 * it, an annotation with no effect on validity, or a 400.
 *
 * What the grammar does, and why the output still validates against the original schema:
 * - every declared property is always written (optional ones too: a present optional property
 *   is valid), in the declared order; no undeclared property is written unless
 *   `additionalProperties` allows it;
 * - `anyOf` (and `oneOf` whose alternatives cannot overlap) becomes a choice of alternatives;
 * - integers are written without exponent and with at most 15 digits, so the safe-integer
 *   bounds zod emits for `.int()` are implied.
 */
import type { GbnfJsonSchema } from "node-llama-cpp";
import { UnsupportedParameterError } from "../../protocol/errors.ts";
import type { JsonSchema } from "../engine.ts";

/** The largest integer the grammar can write (15 digits); see `grammar.ts`. */
export const GRAMMAR_INTEGER_LIMIT = 999_999_999_999_999;

/**
 * Bounds that keep a schema's grammar cheap to build (it is built on the event loop) and within
 * what llama.cpp's grammar parser accepts. OpenAI's structured outputs allow less: 10 levels of
 * nesting, 5000 properties, 1000 enum values.
 */
export const SCHEMA_LIMITS = {
  /** Nesting of subschemas (properties, items, alternatives, definitions). */
  depth: 64,
  /** Subschemas in one schema, definitions included. */
  subschemas: 5000,
  /** Values of one `enum`. */
  enumValues: 1000,
  /** `oneOf` alternatives: each pair is checked for overlap. */
  oneOfAlternatives: 64,
  /**
   * `minLength`/`maxLength`/`minItems`/`maxItems`. llama.cpp's parser refuses a repetition when
   * its count times the rules it repeats passes 2000 (`MAX_REPETITION_THRESHOLD`); the rules
   * node-llama-cpp writes repeat two rules, so 1000 is the most that always compiles.
   */
  repetitions: 1000,
  /** Items past `prefixItems` that `minItems`/`maxItems` may ask for: that repetition repeats three rules. */
  repetitionsAfterPrefix: 666,
  /**
   * Alternatives one choice (`anyOf`, `oneOf`, `enum`, a type list) expands to, counted through
   * the references and choices it holds: llama.cpp's grammar follows every path to a first
   * character each time it reaches the choice (16^7 paths took seconds per token).
   */
  alternatives: 4096,
  /**
   * Work the schemas of one request may cost, in steps of roughly a microsecond of event-loop
   * time (translation, the overlap checks of `oneOf`, building and compiling the grammar).
   */
  work: 50_000,
} as const;

/**
 * What each part of a schema costs against `SCHEMA_LIMITS.work`, in steps (measured on a small
 * CPU: node-llama-cpp writes ~8 µs of grammar per subschema, compiles ~0.7 µs per repeated rule,
 * and re-registers every definition at every object, array, alternative and reference).
 */
const WORK_COST = {
  subschema: 8,
  enumValue: 2,
  repetition: 1,
  /** Per (subschema × definition): node-llama-cpp's definition bookkeeping, ~0.1 µs each. */
  definitionScope: 1 / 8,
} as const;

/**
 * The work budget shared by every schema of one request (the response format's and each tool's
 * parameters): past it, the schema being translated is refused with a 400 naming it.
 */
export class SchemaBudget {
  #left: number;

  constructor(steps: number = SCHEMA_LIMITS.work) {
    this.#left = steps;
  }

  /** Steps left. */
  get left(): number {
    return this.#left;
  }

  /** Spends `steps` on the schema at `param` (its root); throws `UnsupportedSchemaError` past the budget. */
  spend(steps: number, param: string): void {
    this.#left -= steps;
    if (this.#left < 0) {
      refuse(
        param,
        `the request's schemas are too complex to turn into a grammar (more than ${SCHEMA_LIMITS.work} steps of work); ` +
          "use fewer subschemas, definitions, 'oneOf' alternatives or smaller length and item bounds",
      );
    }
  }
}

/** Keywords that never change which values are valid. */
const ANNOTATIONS = new Set([
  "$schema",
  "$id",
  "$comment",
  "title",
  "description",
  "default",
  "examples",
  "deprecated",
  "readOnly",
  "writeOnly",
  "contentEncoding",
  "contentMediaType",
  "nullable", // OpenAPI's spelling; only honoured through `type`, so refused below when true
  "strict",
]);

const STRING_FORMATS = new Set(["date-time", "date", "time"]);
const BASIC_TYPES = ["string", "number", "integer", "boolean", "null", "object", "array"] as const;
type BasicType = (typeof BASIC_TYPES)[number];

/** The schema is not one the grammar can enforce; `param` names the offending keyword. */
export class UnsupportedSchemaError extends UnsupportedParameterError {}

type Context = {
  /** Where the whole schema is, e.g. `response_format.json_schema.schema`. */
  root: string;
  /** Definitions from the root's `$defs` / `definitions`, by name. */
  definitions: Record<string, unknown>;
  /** Definitions already translated (or being translated), by name. */
  translated: Record<string, GbnfJsonSchema>;
  /** Whether some `$ref` points at the root itself. */
  refersToRoot: boolean;
  /** Subschemas translated so far, and the nesting of the one being translated. */
  subschemas: number;
  depth: number;
  /**
   * Definitions being translated with no object or array opened since: a `$ref` back to one of
   * them would make a rule that starts with itself (left recursion), which never writes a value.
   */
  unguarded: Set<string>;
  /** The request's work budget. */
  budget: SchemaBudget;
  /** `possibleTypes` of each (client) subschema already looked at, so every one is looked at once. */
  types: Map<object, Set<string> | undefined>;
  /** `alternativesOf` each (client) subschema already looked at. */
  alternatives: Map<object, number>;
};

const ROOT_DEFINITION = "__root";

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function refuse(param: string, why: string): never {
  throw new UnsupportedSchemaError(`The JSON schema cannot be enforced on this model: ${why} (at '${param}').`, param);
}

function isPrimitive(value: unknown): value is string | number | boolean | null {
  return value === null || typeof value === "string" || typeof value === "number" || typeof value === "boolean";
}

function typeOfValue(value: string | number | boolean | null): BasicType {
  if (value === null) return "null";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value as "string" | "boolean";
}

/**
 * Translates `schema` (found at `param`, e.g. `response_format.json_schema.schema`).
 * Throws `UnsupportedSchemaError` naming the first keyword the grammar cannot enforce.
 */
export function toGrammarSchema(schema: JsonSchema, param: string, budget: SchemaBudget = new SchemaBudget()): GbnfJsonSchema {
  if (!isObject(schema)) refuse(param, "a schema must be a JSON object");
  const definitions: Record<string, unknown> = {};
  for (const keyword of ["$defs", "definitions"] as const) {
    const defs = schema[keyword];
    if (defs === undefined) continue;
    if (!isObject(defs)) refuse(`${param}.${keyword}`, `'${keyword}' must be an object`);
    Object.assign(definitions, defs);
  }
  const context: Context = {
    root: param,
    definitions,
    translated: {},
    refersToRoot: false,
    subschemas: 0,
    depth: 0,
    unguarded: new Set([ROOT_DEFINITION]),
    budget,
    types: new Map(),
    alternatives: new Map(),
  };
  const rootSchema = Object.fromEntries(Object.entries(schema).filter(([key]) => key !== "$defs" && key !== "definitions"));
  const root = translate(rootSchema, param, context);
  const defs: Record<string, GbnfJsonSchema> = { ...context.translated };
  if (context.refersToRoot) defs[ROOT_DEFINITION] = root;
  budget.spend(Math.ceil(context.subschemas * Object.keys(defs).length * WORK_COST.definitionScope), param);
  if (Object.keys(defs).length === 0) return root;
  if (context.refersToRoot) return { $ref: `#/$defs/${ROOT_DEFINITION}`, $defs: defs } as GbnfJsonSchema;
  return { oneOf: [root], $defs: defs } as GbnfJsonSchema;
}

function translate(schema: unknown, param: string, context: Context): GbnfJsonSchema {
  if (++context.subschemas > SCHEMA_LIMITS.subschemas) refuse(param, `a schema may have at most ${SCHEMA_LIMITS.subschemas} subschemas`);
  context.budget.spend(WORK_COST.subschema, context.root);
  if (context.depth >= SCHEMA_LIMITS.depth) refuse(param, `a schema may nest at most ${SCHEMA_LIMITS.depth} levels deep`);
  context.depth++;
  try {
    return translateSchema(schema, param, context);
  } finally {
    context.depth--;
  }
}

/** Translates the contents of an object or array: the definitions entered so far are guarded by it. */
function guarded<T>(context: Context, inner: () => T): T {
  const unguarded = context.unguarded;
  context.unguarded = new Set();
  try {
    return inner();
  } finally {
    context.unguarded = unguarded;
  }
}

function translateSchema(schema: unknown, param: string, context: Context): GbnfJsonSchema {
  if (schema === true) return anyValue();
  if (schema === false) refuse(param, "the schema 'false' allows no value");
  if (!isObject(schema)) refuse(param, "a schema must be a JSON object or a boolean");

  const description = typeof schema.description === "string" ? schema.description : undefined;
  const withDescription = (translated: GbnfJsonSchema): GbnfJsonSchema =>
    description === undefined ? translated : ({ ...translated, description } as GbnfJsonSchema);

  for (const key of Object.keys(schema)) {
    if (!ANNOTATIONS.has(key) && !KNOWN_ASSERTIONS.has(key)) refuse(`${param}.${key}`, `the keyword '${key}' is not supported`);
  }
  if (schema.nullable === true) refuse(`${param}.nullable`, "'nullable' is not JSON Schema; use type: [..., \"null\"] or anyOf");

  if (schema.$ref !== undefined) {
    onlyWith(schema, param, "$ref", []);
    return withDescription(reference(schema.$ref, `${param}.$ref`, context));
  }
  if (schema.allOf !== undefined) {
    const parts = schema.allOf;
    if (!Array.isArray(parts) || parts.length !== 1) refuse(`${param}.allOf`, "'allOf' with more than one schema is not supported");
    onlyWith(schema, param, "allOf", []);
    return withDescription(translate(parts[0], `${param}.allOf[0]`, context));
  }
  for (const keyword of ["anyOf", "oneOf"] as const) {
    if (schema[keyword] === undefined) continue;
    const alternatives = schema[keyword];
    if (!Array.isArray(alternatives) || alternatives.length === 0) refuse(`${param}.${keyword}`, `'${keyword}' must be a non-empty array`);
    if (keyword === "oneOf" && alternatives.length > SCHEMA_LIMITS.oneOfAlternatives) {
      refuse(`${param}.oneOf`, `'oneOf' with more than ${SCHEMA_LIMITS.oneOfAlternatives} alternatives is not supported; use 'anyOf'`);
    }
    onlyWith(schema, param, keyword, []);
    const translated = alternatives.map((alternative, index) => translate(alternative, `${param}.${keyword}[${index}]`, context));
    const paths = alternativesOf(schema, context);
    if (paths > SCHEMA_LIMITS.alternatives) {
      refuse(
        `${param}.${keyword}`,
        `'${keyword}' expands to ${paths} alternatives through the choices and references it holds (at most ${SCHEMA_LIMITS.alternatives}); the grammar would follow each of them`,
      );
    }
    if (keyword === "oneOf") assertDisjoint(alternatives, param, context);
    return withDescription(translated.length === 1 ? translated[0]! : ({ oneOf: translated } as GbnfJsonSchema));
  }

  const types = declaredTypes(schema, param);
  if (schema.const !== undefined || schema.enum !== undefined) {
    return withDescription(literals(schema, param, types, context));
  }
  if (types === undefined) {
    // No type: only keywords that apply regardless of type could constrain; none are allowed here.
    onlyWith(schema, param, undefined, []);
    return withDescription(anyValue());
  }
  const alternatives = types.filter((type) => !(type === "integer" && types.includes("number"))).map((type) => typed(schema, type, param, context));
  return withDescription(alternatives.length === 1 ? alternatives[0]! : ({ oneOf: alternatives } as GbnfJsonSchema));
}

/** Assertion keywords, by the type they apply to. */
const TYPE_KEYWORDS: Record<BasicType, string[]> = {
  string: ["minLength", "maxLength", "format"],
  number: ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"],
  integer: ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"],
  boolean: [],
  null: [],
  object: ["properties", "required", "additionalProperties"],
  array: ["items", "prefixItems", "minItems", "maxItems", "uniqueItems"],
};

/** Keywords this translator knows (some only to refuse them). */
const KNOWN_ASSERTIONS = new Set([
  "type",
  "enum",
  "const",
  "$ref",
  "$defs",
  "definitions",
  "anyOf",
  "oneOf",
  "allOf",
  ...Object.values(TYPE_KEYWORDS).flat(),
]);

/** Refuses assertion keywords beside `keyword` other than those allowed. */
function onlyWith(schema: Record<string, unknown>, param: string, keyword: string | undefined, allowed: string[]): void {
  for (const key of Object.keys(schema)) {
    if (key === keyword || ANNOTATIONS.has(key) || allowed.includes(key)) continue;
    if (key === "$defs" || key === "definitions") refuse(`${param}.${key}`, `'${key}' is only supported at the root of the schema`);
    const beside = keyword === undefined ? "without a 'type'" : `beside '${keyword}'`;
    refuse(`${param}.${key}`, `the keyword '${key}' ${beside} is not supported`);
  }
}

function declaredTypes(schema: Record<string, unknown>, param: string): BasicType[] | undefined {
  const type = schema.type;
  if (type === undefined) return undefined;
  const list = Array.isArray(type) ? type : [type];
  if (list.length === 0) refuse(`${param}.type`, "'type' must name at least one type");
  for (const entry of list) {
    if (!BASIC_TYPES.includes(entry as BasicType)) refuse(`${param}.type`, `unknown type ${JSON.stringify(entry)}`);
  }
  return [...new Set(list as BasicType[])];
}

/** `const` / `enum`, optionally narrowed by `type`. */
function literals(schema: Record<string, unknown>, param: string, types: BasicType[] | undefined, context: Context): GbnfJsonSchema {
  const keyword = schema.const !== undefined ? "const" : "enum";
  onlyWith(schema, param, keyword, ["type", ...(keyword === "const" && schema.enum !== undefined ? ["enum"] : [])]);
  const values: unknown[] = keyword === "const" ? [schema.const] : Array.isArray(schema.enum) ? schema.enum : refuse(`${param}.enum`, "'enum' must be an array");
  if (values.length > SCHEMA_LIMITS.enumValues) refuse(`${param}.enum`, `'enum' may list at most ${SCHEMA_LIMITS.enumValues} values`);
  context.budget.spend(values.length * WORK_COST.enumValue, context.root);
  for (const value of values) {
    if (!isPrimitive(value)) refuse(`${param}.${keyword}`, `'${keyword}' values that are objects or arrays are not supported`);
  }
  const allowed = (values as Array<string | number | boolean | null>).filter((value) => {
    const inEnum = keyword === "enum" || !Array.isArray(schema.enum) || schema.enum.some((entry) => entry === value);
    const valueType = typeOfValue(value);
    const typeOk = types === undefined || types.includes(valueType) || (valueType === "integer" && types.includes("number"));
    return inEnum && typeOk;
  });
  if (allowed.length === 0) refuse(`${param}.${keyword}`, "no value satisfies both 'type' and '" + keyword + "'");
  if (allowed.length === 1) return { const: allowed[0]! };
  return { enum: allowed };
}

function typed(schema: Record<string, unknown>, type: BasicType, param: string, context: Context): GbnfJsonSchema {
  // Keywords of the other declared types do not apply to this type's values (JSON Schema semantics).
  const declared = declaredTypes(schema, param) ?? [];
  const applicable = new Set(declared.flatMap((entry) => TYPE_KEYWORDS[entry]));
  onlyWith(schema, param, "type", [...applicable]);
  switch (type) {
    case "string":
      return stringSchema(schema, param, context);
    case "number":
    case "integer":
      return numberSchema(schema, type, param);
    case "boolean":
    case "null":
      return { type };
    case "object":
      return objectSchema(schema, param, context);
    case "array":
      return arraySchema(schema, param, context);
  }
}

/**
 * A length or item-count bound; the grammar repeats a rule that many times (llama.cpp expands
 * each repetition into that many rules), so it is capped and counted against the work budget.
 */
function repetitionBound(schema: Record<string, unknown>, keyword: string, param: string, context: Context): number | undefined {
  const value = schema[keyword];
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0) refuse(`${param}.${keyword}`, `'${keyword}' must be a non-negative integer`);
  if (value > SCHEMA_LIMITS.repetitions) refuse(`${param}.${keyword}`, `'${keyword}' above ${SCHEMA_LIMITS.repetitions} is not supported`);
  context.budget.spend(value * WORK_COST.repetition, context.root);
  return value;
}

function stringSchema(schema: Record<string, unknown>, param: string, context: Context): GbnfJsonSchema {
  const minLength = repetitionBound(schema, "minLength", param, context);
  const maxLength = repetitionBound(schema, "maxLength", param, context);
  if (minLength !== undefined && maxLength !== undefined && maxLength < minLength) refuse(`${param}.maxLength`, "'maxLength' is below 'minLength'");
  if (schema.format !== undefined) {
    if (typeof schema.format !== "string" || !STRING_FORMATS.has(schema.format)) {
      refuse(`${param}.format`, `the string format ${JSON.stringify(schema.format)} is not supported (only date-time, date and time are)`);
    }
    if (minLength !== undefined || maxLength !== undefined) refuse(`${param}.format`, "'format' together with 'minLength'/'maxLength' is not supported");
    return { type: "string", format: schema.format as "date-time" | "date" | "time" };
  }
  return { type: "string", ...(minLength !== undefined ? { minLength } : {}), ...(maxLength !== undefined ? { maxLength } : {}) };
}

/** Bounds are refused unless the grammar's own limits imply them (zod's safe-integer bounds do). */
function numberSchema(schema: Record<string, unknown>, type: "number" | "integer", param: string): GbnfJsonSchema {
  for (const keyword of ["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"] as const) {
    const bound = schema[keyword];
    if (bound === undefined) continue;
    if (typeof bound !== "number") refuse(`${param}.${keyword}`, `'${keyword}' must be a number`);
    const lower = keyword === "minimum" || keyword === "exclusiveMinimum";
    const implied = type === "integer" && (lower ? bound < -GRAMMAR_INTEGER_LIMIT : bound > GRAMMAR_INTEGER_LIMIT);
    const impliedInclusive = type === "integer" && (lower ? bound <= -GRAMMAR_INTEGER_LIMIT : bound >= GRAMMAR_INTEGER_LIMIT);
    const ok = keyword.startsWith("exclusive") ? implied : impliedInclusive;
    if (!ok) refuse(`${param}.${keyword}`, `numeric bounds ('${keyword}') are not supported`);
  }
  return { type };
}

function objectSchema(schema: Record<string, unknown>, param: string, context: Context): GbnfJsonSchema {
  const properties = schema.properties ?? {};
  if (!isObject(properties)) refuse(`${param}.properties`, "'properties' must be an object");
  const translated: Record<string, GbnfJsonSchema> = {};
  guarded(context, () => {
    for (const [name, property] of Object.entries(properties)) {
      translated[name] = translate(property, `${param}.properties.${name}`, context);
    }
  });
  const required = schema.required ?? [];
  if (!Array.isArray(required)) refuse(`${param}.required`, "'required' must be an array");
  for (const name of required) {
    if (typeof name !== "string" || !(name in properties)) {
      refuse(`${param}.required`, `the required property ${JSON.stringify(name)} is not declared in 'properties'`);
    }
  }
  const additional = schema.additionalProperties;
  // JSON Schema allows extra properties by default; writing none is still valid. An object
  // without declared properties and no say on extras is "any object".
  let additionalProperties: boolean | GbnfJsonSchema = false;
  if (additional === true || (additional === undefined && schema.properties === undefined)) additionalProperties = true;
  else if (additional !== undefined && additional !== false) {
    additionalProperties = guarded(context, () => translate(additional, `${param}.additionalProperties`, context));
  }
  return { type: "object", properties: translated, additionalProperties } as GbnfJsonSchema;
}

function arraySchema(schema: Record<string, unknown>, param: string, context: Context): GbnfJsonSchema {
  if (schema.uniqueItems === true) refuse(`${param}.uniqueItems`, "'uniqueItems' is not supported");
  let minItems = repetitionBound(schema, "minItems", param, context);
  let maxItems = repetitionBound(schema, "maxItems", param, context);
  if (minItems !== undefined && maxItems !== undefined && maxItems < minItems) refuse(`${param}.maxItems`, "'maxItems' is below 'minItems'");
  let prefixItems: GbnfJsonSchema[] | undefined;
  if (schema.prefixItems !== undefined) {
    if (!Array.isArray(schema.prefixItems)) refuse(`${param}.prefixItems`, "'prefixItems' must be an array");
    const declared = schema.prefixItems;
    prefixItems = guarded(context, () => declared.map((item, index) => translate(item, `${param}.prefixItems[${index}]`, context)));
    // The grammar always writes every prefix item.
    if (maxItems !== undefined && maxItems < prefixItems.length) refuse(`${param}.maxItems`, "'maxItems' below the number of 'prefixItems' is not supported");
    // The items after the prefix are one repetition of (separator, item): llama.cpp counts it three rules.
    const beyond = maxItems !== undefined && maxItems > prefixItems.length ? "maxItems" : minItems !== undefined ? "minItems" : undefined;
    const repeated = beyond === undefined ? 0 : (beyond === "maxItems" ? maxItems! : minItems!) - prefixItems.length;
    if (beyond !== undefined && repeated > SCHEMA_LIMITS.repetitionsAfterPrefix) {
      refuse(`${param}.${beyond}`, `'${beyond}' more than ${SCHEMA_LIMITS.repetitionsAfterPrefix} items past 'prefixItems' is not supported`);
    }
    if (minItems === undefined || minItems < prefixItems.length) minItems = prefixItems.length;
  }
  let items: GbnfJsonSchema | undefined;
  if (schema.items === false) {
    maxItems = prefixItems?.length ?? 0;
  } else if (Array.isArray(schema.items)) {
    refuse(`${param}.items`, "'items' as an array (draft 4 tuples) is not supported; use 'prefixItems'");
  } else if (schema.items !== undefined) {
    const declared = schema.items;
    items = guarded(context, () => translate(declared, `${param}.items`, context));
  }
  return {
    type: "array",
    ...(items !== undefined ? { items } : {}),
    ...(prefixItems !== undefined ? { prefixItems } : {}),
    ...(minItems !== undefined ? { minItems } : {}),
    ...(maxItems !== undefined ? { maxItems } : {}),
  } as GbnfJsonSchema;
}

/** `#`, `#/$defs/name` and `#/definitions/name`; definitions are translated once. */
function reference(ref: unknown, param: string, context: Context): GbnfJsonSchema {
  if (ref === "#") {
    if (context.unguarded.has(ROOT_DEFINITION)) refuse(param, leftRecursion(ref));
    context.refersToRoot = true;
    return { $ref: `#/$defs/${ROOT_DEFINITION}` } as GbnfJsonSchema;
  }
  const match = typeof ref === "string" ? /^#\/(\$defs|definitions)\/([^/]+)$/.exec(ref) : null;
  if (match === null) refuse(param, `the reference ${JSON.stringify(ref)} is not supported (only '#', '#/$defs/…' and '#/definitions/…' are)`);
  const name = decodeURIComponent(match[2]!).replaceAll("~1", "/").replaceAll("~0", "~");
  if (!(name in context.definitions)) refuse(param, `the reference ${JSON.stringify(ref)} points to no definition`);
  const key = safeDefinitionName(name);
  if (context.unguarded.has(key)) refuse(param, leftRecursion(String(ref)));
  if (!(key in context.translated)) {
    // Placeholder first, so a recursive definition refers to itself instead of looping.
    context.translated[key] = { type: "null" };
    context.unguarded.add(key);
    try {
      context.translated[key] = translate(context.definitions[name], `${context.root}.${match[1]}.${name}`, context);
    } finally {
      context.unguarded.delete(key);
    }
  }
  return { $ref: `#/$defs/${key}` } as GbnfJsonSchema;
}

function leftRecursion(ref: string): string {
  return `the reference ${JSON.stringify(ref)} leads back to itself without an object or array in between, so no value could ever be written`;
}

function safeDefinitionName(name: string): string {
  return `d-${name.replace(/[^a-zA-Z0-9]/g, (character) => `_${character.charCodeAt(0).toString(16)}_`)}`;
}

/** Any JSON value. */
function anyValue(): GbnfJsonSchema {
  return {
    oneOf: [{ type: ["string", "number", "boolean", "null"] }, { type: "object", additionalProperties: true }, { type: "array" }],
  } as GbnfJsonSchema;
}

/**
 * Possible JSON types of a (client) schema, or undefined when unknown. Each subschema (and so
 * each definition) is looked at once per schema: a chain of definitions that each refer to the
 * next many times costs its size, not the product of its fan-outs. A definition that refers back
 * to itself counts as unknown while it is being looked at.
 */
function possibleTypes(schema: unknown, context: Context, depth = 0): Set<string> | undefined {
  if (!isObject(schema) || depth > SCHEMA_LIMITS.depth) return undefined;
  context.budget.spend(1, context.root);
  if (context.types.has(schema)) return context.types.get(schema);
  context.types.set(schema, undefined);
  const types = computePossibleTypes(schema, context, depth);
  context.types.set(schema, types);
  return types;
}

function computePossibleTypes(schema: Record<string, unknown>, context: Context, depth: number): Set<string> | undefined {
  if (typeof schema.$ref === "string") {
    const match = /^#\/(\$defs|definitions)\/([^/]+)$/.exec(schema.$ref);
    return match === null ? undefined : possibleTypes(context.definitions[match[2]!], context, depth + 1);
  }
  const alternatives = (schema.anyOf ?? schema.oneOf) as unknown[] | undefined;
  if (Array.isArray(alternatives)) {
    const union = new Set<string>();
    for (const alternative of alternatives) {
      const types = possibleTypes(alternative, context, depth + 1);
      if (types === undefined) return undefined;
      for (const type of types) union.add(type);
    }
    return union;
  }
  const values = schema.const !== undefined ? [schema.const] : Array.isArray(schema.enum) ? schema.enum : undefined;
  if (values !== undefined) return new Set(values.filter(isPrimitive).map((value) => (typeOfValue(value) === "integer" ? "number" : typeOfValue(value))));
  if (schema.type === undefined) return undefined;
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  return new Set(types.map((type) => (type === "integer" ? "number" : String(type))));
}

/**
 * How many alternatives a (client) schema stands for at its first character: a choice adds up
 * its alternatives', a reference is its definition's, a list of values or types counts each;
 * anything else begins with a character of its own (1). Each subschema is counted once; a
 * definition that refers back to itself counts 1 there (an object or array is in between).
 */
function alternativesOf(schema: unknown, context: Context, depth = 0): number {
  if (!isObject(schema) || depth > SCHEMA_LIMITS.depth) return 1;
  context.budget.spend(1, context.root);
  const known = context.alternatives.get(schema);
  if (known !== undefined) return known;
  context.alternatives.set(schema, 1);
  let count = 1;
  if (typeof schema.$ref === "string") {
    const match = /^#\/(\$defs|definitions)\/([^/]+)$/.exec(schema.$ref);
    count = match === null ? 1 : alternativesOf(context.definitions[decodeURIComponent(match[2]!).replaceAll("~1", "/").replaceAll("~0", "~")], context, depth + 1);
  } else if (Array.isArray(schema.anyOf ?? schema.oneOf)) {
    count = 0;
    for (const alternative of (schema.anyOf ?? schema.oneOf) as unknown[]) count = Math.min(Number.MAX_SAFE_INTEGER, count + alternativesOf(alternative, context, depth + 1));
  } else if (Array.isArray(schema.allOf) && schema.allOf.length === 1) {
    count = alternativesOf(schema.allOf[0], context, depth + 1);
  } else if (Array.isArray(schema.enum)) {
    count = Math.max(1, schema.enum.length);
  } else if (Array.isArray(schema.type)) {
    count = Math.max(1, schema.type.length);
  }
  context.alternatives.set(schema, count);
  return count;
}

/** The values a property may take when they are a finite list (const/enum). */
function literalValues(schema: unknown, context: Context): Set<unknown> | undefined {
  if (!isObject(schema)) return undefined;
  if (schema.const !== undefined) return new Set([schema.const]);
  if (!Array.isArray(schema.enum)) return undefined;
  context.budget.spend(schema.enum.length, context.root);
  return new Set(schema.enum);
}

/** Whether two finite lists of values share none (objects compare by identity: never equal). */
function shareNone(left: Set<unknown>, right: Set<unknown>, context: Context): boolean {
  const [small, large] = left.size <= right.size ? [left, right] : [right, left];
  context.budget.spend(small.size, context.root);
  for (const value of small) if (large.has(value)) return false;
  return true;
}

/** What the overlap check needs of one alternative, worked out once. */
type AlternativeFacts = { schema: unknown; types: Set<string> | undefined; values: Set<unknown> | undefined };

/** Whether no value generated for `a` can also validate against `b` (and vice versa). */
function provablyDisjoint(a: AlternativeFacts, b: AlternativeFacts, context: Context): boolean {
  context.budget.spend(1, context.root);
  if (a.types !== undefined && b.types !== undefined && [...a.types].every((type) => !b.types!.has(type))) return true;
  if (a.values !== undefined && b.values !== undefined) return shareNone(a.values, b.values, context);
  const left = a.schema;
  const right = b.schema;
  if (!isObject(left) || !isObject(right) || !isObject(left.properties) || !isObject(right.properties)) return false;
  return generatedFails(left, right, context) && generatedFails(right, left, context);
}

/**
 * Whether every object the grammar writes for `a` fails `b`: the grammar writes every declared
 * property, so a property whose literal values differ, or one `b` does not allow, tells them apart.
 */
function generatedFails(a: Record<string, unknown>, b: Record<string, unknown>, context: Context): boolean {
  const propertiesA = a.properties as Record<string, unknown>;
  const propertiesB = b.properties as Record<string, unknown>;
  return Object.keys(propertiesA).some((name) => {
    context.budget.spend(1, context.root);
    if (!Object.hasOwn(propertiesB, name)) return b.additionalProperties === false;
    const left = literalValues(propertiesA[name], context);
    const right = left === undefined ? undefined : literalValues(propertiesB[name], context);
    return left !== undefined && right !== undefined && shareNone(left, right, context);
  });
}

function assertDisjoint(alternatives: unknown[], param: string, context: Context): void {
  const facts: AlternativeFacts[] = alternatives.map((schema) => ({ schema, types: possibleTypes(schema, context), values: literalValues(schema, context) }));
  for (let left = 0; left < facts.length; left++) {
    for (let right = left + 1; right < facts.length; right++) {
      if (!provablyDisjoint(facts[left]!, facts[right]!, context)) {
        refuse(`${param}.oneOf`, `'oneOf' alternatives ${left} and ${right} may both match one value, so "exactly one" cannot be enforced; use 'anyOf'`);
      }
    }
  }
}
