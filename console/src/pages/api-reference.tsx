/**
 * API reference: `/openapi.json` as a page. Operations grouped by tag: method and path, summary,
 * who may call it, the request's fields (body or query), and the responses with their error codes.
 */
import { useState } from "react";
import { Badge, ErrorState, Loading, PageHeader, useApi } from "../components/ui.tsx";

/** The parts of a JSON Schema the page shows. */
type Schema = {
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
type Response = { description: string; "x-error-codes"?: string[] };
type Operation = {
  operationId: string;
  tags: string[];
  summary: string;
  "x-auth"?: "none" | "key" | "account" | "admin";
  parameters?: Parameter[];
  requestBody?: { content: Record<string, { schema: Schema; example?: unknown }> };
  responses: Record<string, Response>;
};
type OpenApiDocument = {
  info: { title: string; version: string; description?: string };
  tags: Array<{ name: string; description?: string }>;
  paths: Record<string, Record<string, Operation>>;
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

/** A schema's type in a few words: `string`, `"day" | "model"`, `array of string`, `integer | null`. */
export function describeType(schema: Schema): string {
  if (schema.enum !== undefined) return schema.enum.map((value) => JSON.stringify(value)).join(" | ");
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  const alternatives = schema.anyOf ?? schema.oneOf;
  if (alternatives !== undefined) return [...new Set(alternatives.map(describeType))].join(" | ");
  const types = [schema.type ?? "any"].flat();
  return types.map((type) => (type === "array" && schema.items ? `array of ${describeType(schema.items)}` : type)).join(" | ");
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

function Fields({ fields, label }: { fields: Array<{ name: string; required: boolean; schema: Schema; where?: string }>; label: string }) {
  if (fields.length === 0) return null;
  return (
    <section className="api-fields" aria-label={label}>
      <h4>{label}</h4>
      <ul>
        {fields.map((field) => {
          const limits = describeLimits(field.schema);
          return (
            <li key={`${field.where ?? ""}${field.name}`}>
              <code className="api-field-name">{field.name}</code> <span className="api-field-type">{describeType(field.schema)}</span>
              {field.required ? <span className="api-required"> required</span> : null}
              {field.where === "path" ? <span className="muted small"> (in the path)</span> : null}
              {field.schema.description || limits ? (
                <div className="muted small">{[field.schema.description, limits].filter(Boolean).join(" · ")}</div>
              ) : null}
            </li>
          );
        })}
      </ul>
    </section>
  );
}

function OperationCard({ method, path, operation, meanings }: { method: string; path: string; operation: Operation; meanings: Map<string, string> }) {
  const [showExample, setShowExample] = useState(false);
  const body = operation.requestBody?.content["application/json"];
  const bodyFields = Object.entries(body?.schema.properties ?? {}).map(([name, schema]) => ({ name, schema, required: (body?.schema.required ?? []).includes(name) }));
  const parameters = (operation.parameters ?? []).map((parameter) => ({ name: parameter.name, schema: parameter.schema, required: parameter.required === true, where: parameter.in }));
  const responses = Object.entries(operation.responses).sort(([first], [second]) => Number(first) - Number(second));
  return (
    <article className="card api-operation" id={operation.operationId} aria-labelledby={`${operation.operationId}-title`}>
      <h3 id={`${operation.operationId}-title`} className="api-operation-title">
        <span className={`api-method api-method-${method}`}>{method.toUpperCase()}</span> <code className="api-path">{path}</code>
      </h3>
      <p className="api-summary">
        <InlineCode text={operation.summary} />
      </p>
      <div className="muted small">Auth: {AUTH_LABELS[operation["x-auth"] ?? "none"]}</div>
      <Fields fields={parameters} label="Parameters" />
      <Fields fields={bodyFields} label="Request body" />
      {body?.example !== undefined && (
        <div>
          <button type="button" className="button small" aria-expanded={showExample} onClick={() => setShowExample((shown) => !shown)}>
            {showExample ? "Hide example" : "Show example"}
          </button>
          {showExample && <pre className="api-example">{JSON.stringify(body.example, null, 2)}</pre>}
        </div>
      )}
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
              <OperationCard key={`${entry.method} ${entry.path}`} method={entry.method} path={entry.path} operation={entry.operation} meanings={meanings} />
            ))}
        </section>
      ))}
    </>
  );
}
