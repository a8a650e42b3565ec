/**
 * API reference: `/openapi.json` as a page. Operations grouped by tag: method and path, summary,
 * who may call it, the request's fields (body or query), the answer's fields (a stream's event's
 * too), and the responses with their error codes. Schemas written once in `components` are
 * followed through their `$ref`s.
 */
import { useState } from "react";
import { Badge, ErrorState, Loading, PageHeader, useApi } from "../components/ui.tsx";

/** The parts of a JSON Schema the page shows. */
type Schema = {
  /** `#/components/schemas/Name`: the schema is written once, there. */
  $ref?: string;
  type?: string | string[];
  enum?: unknown[];
  const?: unknown;
  anyOf?: Schema[];
  oneOf?: Schema[];
  items?: Schema;
  properties?: Record<string, Schema>;
  required?: string[];
  description?: string;
  default?: unknown;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  maxItems?: number;
  pattern?: string;
};

type Parameter = { name: string; in: string; required?: boolean; description?: string; schema: Schema };
type Response = { description: string; content?: Record<string, { schema: Schema }>; "x-error-codes"?: string[] };
type Operation = {
  operationId: string;
  tags: string[];
  summary: string;
  "x-auth"?: "none" | "key" | "account" | "admin";
  parameters?: Parameter[];
  requestBody?: { content: Record<string, { schema: Schema; example?: unknown }> };
  /** A response, or a `$ref` to one of `components.responses` (the error answers several operations share). */
  responses: Record<string, Response | { $ref: string }>;
};
type OpenApiDocument = {
  info: { title: string; version: string; description?: string };
  tags: Array<{ name: string; description?: string }>;
  paths: Record<string, Record<string, Operation>>;
  components?: { schemas?: Record<string, Schema>; responses?: Record<string, Response> };
  "x-error-catalog"?: Array<{ code: string; status: number; type: string; meaning: string }>;
};

const AUTH_LABELS: Record<string, string> = {
  none: "No key",
  key: "API key",
  account: "Session or account key",
  admin: "Admin session or admin key",
};

/** Text with `backticked` words shown as code. */
function InlineCode({ text }: { text: string }) {
  return <>{text.split("`").map((part, index) => (index % 2 === 1 ? <code key={index}>{part}</code> : part))}</>;
}

/** Follows a `$ref` into the document (`#/components/...`); anything else as it is. */
type Resolve = <Node>(node: Node) => Node;

function resolverOf(document: OpenApiDocument): Resolve {
  const resolve = <Node,>(node: Node): Node => {
    const ref = (node as { $ref?: unknown } | undefined)?.$ref;
    if (typeof ref !== "string" || !ref.startsWith("#/")) return node;
    const target = ref
      .slice(2)
      .split("/")
      .reduce<unknown>((at, segment) => (at as Record<string, unknown> | undefined)?.[segment.replaceAll("~1", "/").replaceAll("~0", "~")], document);
    return target === undefined ? node : resolve(target as Node);
  };
  return resolve;
}

/** A schema's type in a few words: `string`, `"day" | "model"`, `array of string`, `integer | null`, a component's name (`Model`). */
export function describeType(schema: Schema): string {
  if (schema.$ref !== undefined) return schema.$ref.split("/").at(-1)!;
  if (schema.enum !== undefined) return schema.enum.map((value) => JSON.stringify(value)).join(" | ");
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  const alternatives = schema.anyOf ?? schema.oneOf;
  if (alternatives !== undefined) return [...new Set(alternatives.map(describeType))].join(" | ");
  const types = [schema.type ?? "any"].flat();
  return types.map((type) => (type === "array" && schema.items ? `array of ${describeType(schema.items)}` : type)).join(" | ");
}

/** One field of a body: its schema as written (a `$ref` keeps its name), and the fields of the object it holds, if shown. */
type Field = { name: string; required: boolean; schema: Schema; where?: string; fields?: Field[] };

/** The object a field holds, refs followed: itself, its array's items, or its one non-null alternative. */
function objectInside(schema: Schema, resolve: Resolve): Schema | undefined {
  const resolved = resolve(schema);
  if (resolved.properties !== undefined) return resolved;
  if (resolved.items !== undefined) return objectInside(resolved.items, resolve);
  const alternatives = (resolved.anyOf ?? resolved.oneOf ?? []).filter((alternative) => resolve(alternative).type !== "null");
  return alternatives.length === 1 ? objectInside(alternatives[0]!, resolve) : undefined;
}

/** The fields of an object schema, and `depth` levels of the objects inside them. */
function fieldsOf(schema: Schema | undefined, resolve: Resolve, depth = 0): Field[] {
  if (schema === undefined) return [];
  const object = resolve(schema);
  return Object.entries(object.properties ?? {}).map(([name, property]) => {
    const inside = depth > 0 ? objectInside(property, resolve) : undefined;
    return { name, schema: property, required: (object.required ?? []).includes(name), fields: inside ? fieldsOf(inside, resolve, depth - 1) : undefined };
  });
}

/** A schema's bounds and default in a few words. */
function describeLimits(schema: Schema): string {
  const limits: string[] = [];
  if (schema.minimum !== undefined && schema.maximum !== undefined) limits.push(`${schema.minimum} to ${schema.maximum}`);
  else if (schema.minimum !== undefined) limits.push(`≥ ${schema.minimum}`);
  else if (schema.maximum !== undefined) limits.push(`≤ ${schema.maximum}`);
  if (schema.maxLength !== undefined) limits.push(`at most ${schema.maxLength} characters`);
  if (schema.maxItems !== undefined) limits.push(`at most ${schema.maxItems} items`);
  if (schema.default !== undefined) limits.push(`default ${JSON.stringify(schema.default)}`);
  return limits.join(", ");
}

/**
 * A list of fields. A request's (`mark: "required"`) flags the fields it must send; an answer's
 * (`mark: "optional"`) the fields it may leave out. Nullable fields say so in their type.
 */
function FieldList({ fields, mark, resolve }: { fields: Field[]; mark: "required" | "optional"; resolve: Resolve }) {
  return (
    <ul>
      {fields.map((field) => {
        const described = resolve(field.schema);
        const limits = describeLimits(described);
        const description = field.schema.description ?? described.description;
        return (
          <li key={`${field.where ?? ""}${field.name}`}>
            <code className="api-field-name">{field.name}</code> <span className="api-field-type">{describeType(field.schema)}</span>
            {mark === "required" && field.required ? <span className="api-required"> required</span> : null}
            {mark === "optional" && !field.required ? <span className="api-optional"> optional</span> : null}
            {field.where === "path" ? <span className="muted small"> (in the path)</span> : null}
            {description || limits ? <div className="muted small">{[description, limits].filter(Boolean).join(" · ")}</div> : null}
            {field.fields !== undefined && field.fields.length > 0 ? (
              <div className="api-subfields">
                <FieldList fields={field.fields} mark={mark} resolve={resolve} />
              </div>
            ) : null}
          </li>
        );
      })}
    </ul>
  );
}

function Fields({ fields, label, mark = "required", resolve }: { fields: Field[]; label: string; mark?: "required" | "optional"; resolve: Resolve }) {
  if (fields.length === 0) return null;
  return (
    <section className="api-fields" aria-label={label}>
      <h4>{label}</h4>
      <FieldList fields={fields} mark={mark} resolve={resolve} />
    </section>
  );
}

function OperationCard({ method, path, operation, meanings, resolve }: { method: string; path: string; operation: Operation; meanings: Map<string, string>; resolve: Resolve }) {
  const [showExample, setShowExample] = useState(false);
  const body = operation.requestBody?.content["application/json"];
  const bodyFields = fieldsOf(body?.schema, resolve);
  const parameters = (operation.parameters ?? []).map((parameter) => ({ name: parameter.name, schema: parameter.schema, required: parameter.required === true, where: parameter.in }));
  const responses = Object.entries(operation.responses)
    .map(([status, response]) => [status, resolve(response) as Response] as const)
    .sort(([first], [second]) => Number(first) - Number(second));
  // The success answer's fields (and a list's items'), and for a stream each event's.
  const success = responses.find(([status]) => status.startsWith("2"))?.[1];
  const answerFields = fieldsOf(success?.content?.["application/json"]?.schema, resolve, 1);
  const eventFields = fieldsOf(success?.content?.["text/event-stream"]?.schema, resolve, 1);
  return (
    <article className="card api-operation" id={operation.operationId} aria-labelledby={`${operation.operationId}-title`}>
      <h3 id={`${operation.operationId}-title`} className="api-operation-title">
        <span className={`api-method api-method-${method}`}>{method.toUpperCase()}</span> <code className="api-path">{path}</code>
      </h3>
      <p className="api-summary">
        <InlineCode text={operation.summary} />
      </p>
      <div className="muted small">Auth: {AUTH_LABELS[operation["x-auth"] ?? "none"]}</div>
      <Fields fields={parameters} label="Parameters" resolve={resolve} />
      <Fields fields={bodyFields} label="Request body" resolve={resolve} />
      {body?.example !== undefined && (
        <div>
          <button type="button" className="button small" aria-expanded={showExample} onClick={() => setShowExample((shown) => !shown)}>
            {showExample ? "Hide example" : "Show example"}
          </button>
          {showExample && <pre className="api-example">{JSON.stringify(body.example, null, 2)}</pre>}
        </div>
      )}
      <Fields fields={answerFields} label="Response body" mark="optional" resolve={resolve} />
      <Fields fields={eventFields} label="Stream event (each data: line)" mark="optional" resolve={resolve} />
      <section className="api-responses" aria-label="Responses">
        <h4>Responses</h4>
        <ul>
          {responses.map(([status, response]) => (
            <li key={status}>
              <Badge tone={status.startsWith("2") ? "green" : status.startsWith("5") ? "amber" : "red"}>{status}</Badge>{" "}
              {response["x-error-codes"] ? (
                <span className="api-codes">
                  {response["x-error-codes"].map((code) => (
                    <code key={code} className="api-code" title={meanings.get(code)}>
                      {code}
                    </code>
                  ))}
                </span>
              ) : (
                <span className="small">
                  <InlineCode text={response.description} />
                </span>
              )}
            </li>
          ))}
        </ul>
      </section>
    </article>
  );
}

export function ApiReferencePage() {
  const document = useApi<OpenApiDocument>("/openapi.json");
  if (document.error) return <ErrorState error={document.error} retry={document.reload} />;
  if (!document.data) return <Loading />;
  const { tags, paths } = document.data;
  const resolve = resolverOf(document.data);
  const meanings = new Map((document.data["x-error-catalog"] ?? []).map((entry) => [entry.code, `${entry.status} ${entry.type}: ${entry.meaning}`]));
  const operations = Object.entries(paths).flatMap(([path, item]) => Object.entries(item).map(([method, operation]) => ({ path, method, operation })));
  return (
    <>
      <PageHeader
        title="API reference"
        description={
          <>
            Every route of <code>/v1</code> and <code>/api</code>, from <a href="/openapi.json">/openapi.json</a> (OpenAPI 3.1, version {document.data.info.version}). Errors are{" "}
            <code>{'{"error": {"message", "type", "param", "code"}}'}</code>; times on <code>/api</code> are seconds since the epoch.
          </>
        }
      />
      <nav className="api-tags" aria-label="API sections">
        {tags.map((tag) => (
          <a key={tag.name} href={`#tag-${tag.name}`}>
            {tag.name}
          </a>
        ))}
      </nav>
      {tags.map((tag) => (
        <section key={tag.name} className="api-tag" id={`tag-${tag.name}`} aria-labelledby={`tag-${tag.name}-title`}>
          <h2 id={`tag-${tag.name}-title`}>{tag.name}</h2>
          {tag.description && <p className="muted">{tag.description}</p>}
          {operations
            .filter((entry) => entry.operation.tags.includes(tag.name))
            .map((entry) => (
              <OperationCard key={`${entry.method} ${entry.path}`} method={entry.method} path={entry.path} operation={entry.operation} meanings={meanings} resolve={resolve} />
            ))}
        </section>
      ))}
    </>
  );
}
