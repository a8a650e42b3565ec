/**
 * Checking answers against `/openapi.json`: ajv compiles the document's schemas in the document
 * (so their `$ref`s to `components` resolve), and a walk over the schema, refs inlined, fails any
 * field the schema does not declare (the schemas are open objects, as OpenAI's are, so ajv alone
 * would let an undocumented field through). Shared by openapi.test.ts, openapi-responses.test.ts
 * and payments.test.ts.
 */
import assert from "node:assert/strict";
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";

type Json = Record<string, any>;

/** The node a local `$ref` (`#/components/...`) points at in `document`. */
export function pointerTarget(document: Json, ref: string): any {
  assert.match(ref, /^#\//, `${ref} is local`);
  const target = ref
    .slice(2)
    .split("/")
    .reduce((at: any, segment: string) => at?.[segment.replaceAll("~1", "/").replaceAll("~0", "~")], document);
  assert.ok(target !== undefined, `${ref} resolves`);
  return target;
}

/** `node`, or what it refers to when it is a `{$ref}` (a shared response, a component schema). */
export function resolved(document: Json, node: any): any {
  return typeof node?.$ref === "string" ? resolved(document, pointerTarget(document, node.$ref)) : node;
}

/** `schema` with every `#/...` reference into `document` replaced by its target (the document's refs are not recursive). */
export function inlineRefs(schema: unknown, document: Json): any {
  if (Array.isArray(schema)) return schema.map((item) => inlineRefs(item, document));
  if (typeof schema !== "object" || schema === null) return schema;
  const node = schema as Json;
  if (typeof node.$ref === "string" && node.$ref.startsWith("#/")) {
    const { $ref: _ref, ...rest } = node;
    return inlineRefs({ ...pointerTarget(document, node.$ref), ...rest }, document);
  }
  return Object.fromEntries(Object.entries(node).map(([key, value]) => [key, inlineRefs(value, document)]));
}

/** One ajv per document, the document added under the id `openapi`. */
const ajvs = new WeakMap<Json, Ajv2020>();
/** Schemas compiled so far, per ajv. */
const compiled = new WeakMap<object, ValidateFunction>();

function ajvOf(document: Json): Ajv2020 {
  let ajv = ajvs.get(document);
  if (ajv === undefined) {
    ajv = new Ajv2020({ strict: false, allErrors: true });
    ajv.addSchema(document, "openapi");
    ajvs.set(document, ajv);
  }
  return ajv;
}

/** `schema` (a part of `document`, or any schema whose refs point into it) compiled against the whole document. */
export function validatorIn(document: Json, schema: Json): ValidateFunction {
  let validate = compiled.get(schema);
  if (validate === undefined) {
    // A local ref means "in the document": say which one.
    const anchored = JSON.parse(JSON.stringify(schema).replaceAll('"$ref":"#/', '"$ref":"openapi#/'));
    validate = ajvOf(document).compile(anchored);
    compiled.set(schema, validate);
  }
  return validate;
}

/** A validator for schemas without refs (the walk's `anyOf` branches). */
const plainAjv = new Ajv2020({ strict: false, allErrors: true });

/** The error text of `validate`'s last run. */
export function errorsOf(validate: ValidateFunction): string {
  return plainAjv.errorsText(validate.errors);
}
const plainValidators = new WeakMap<object, ValidateFunction>();
function plainValidatorOf(schema: Json): ValidateFunction {
  let validate = plainValidators.get(schema);
  if (validate === undefined) {
    validate = plainAjv.compile(schema);
    plainValidators.set(schema, validate);
  }
  return validate;
}

/** The schemas that all apply to `value`: `schemas` with their `allOf` parts, and of each `anyOf`/`oneOf` the branches `value` passes. */
function applicable(schemas: Json[], value: unknown): Json[] {
  const result: Json[] = [];
  const pending = [...schemas];
  while (pending.length > 0) {
    const schema = pending.pop()!;
    result.push(schema);
    for (const part of schema.allOf ?? []) pending.push(part);
    for (const branch of [...(schema.anyOf ?? []), ...(schema.oneOf ?? [])]) if (plainValidatorOf(branch)(value)) pending.push(branch);
  }
  return result;
}

/** Every property of `value` (at any depth) that no applicable schema (refs inlined) declares, as `where.name`. */
export function undeclaredProperties(value: unknown, schemas: Json[], where = "$"): string[] {
  const all = applicable(schemas, value);
  // `{}` (zod's unknown) accepts anything, undeclared fields included.
  const structural = all.filter((schema) => Object.keys(schema).some((key) => !["description", "title", "example", "examples", "default"].includes(key)));
  if (structural.length === 0) return [];
  if (Array.isArray(value)) {
    const items = all.flatMap((schema) => (schema.items !== undefined && typeof schema.items === "object" ? [schema.items] : []));
    return value.flatMap((item, index) => undeclaredProperties(item, items, `${where}[${index}]`));
  }
  if (typeof value !== "object" || value === null) return [];
  const found: string[] = [];
  for (const [name, field] of Object.entries(value)) {
    const declared = all.flatMap((schema) => (schema.properties?.[name] !== undefined ? [schema.properties[name]] : []));
    const extra = all.flatMap((schema) => (typeof schema.additionalProperties === "object" ? [schema.additionalProperties] : []));
    if (declared.length === 0 && extra.length === 0) {
      found.push(`${where}.${name}`);
      continue;
    }
    found.push(...undeclaredProperties(field, declared.length > 0 ? declared : extra, `${where}.${name}`));
  }
  return found;
}

/** The document's schema (as written, refs and all) for the answer to `method route` with `status`. */
export function answerSchema(document: Json, method: string, route: string, status: number, contentType = "application/json"): Json {
  const operation = document.paths[route]?.[method];
  assert.ok(operation !== undefined, `${method} ${route} is documented`);
  const response = resolved(document, operation.responses[String(status)]);
  assert.ok(response !== undefined, `${method} ${route}: ${status} is documented (${Object.keys(operation.responses).join(", ")})`);
  const schema = response.content?.[contentType]?.schema;
  assert.ok(schema !== undefined, `${method} ${route} ${status}: no ${contentType} schema`);
  return schema;
}

/** Inlined schemas, cached per written schema (the walk compiles their branches once). */
const inlined = new WeakMap<object, Json>();

/** Checks `body` against the document: it passes the schema for `method route status` and has no field the schema leaves out. */
export function assertConforms(document: Json, method: string, route: string, status: number, body: unknown, contentType = "application/json"): void {
  const schema = answerSchema(document, method, route, status, contentType);
  let full = inlined.get(schema);
  if (full === undefined) {
    full = inlineRefs(schema, document) as Json;
    inlined.set(schema, full);
  }
  if (status < 300) assert.ok(Object.keys(full).length > 0, `${method} ${route}: the success answer has an empty schema`);
  const validate = validatorIn(document, schema);
  assert.ok(validate(body), `${method} ${route} ${status}: ${errorsOf(validate)}\n${JSON.stringify(body).slice(0, 2000)}`);
  assert.deepEqual(undeclaredProperties(body, [full]), [], `${method} ${route} ${status}: fields the document does not declare`);
}
