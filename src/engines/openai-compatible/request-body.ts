/**
 * The body Turnpike posts to an upstream's `/chat/completions`: always streamed, always with usage
 * asked for (running counts too, where the kind gives them), and always with the completion limit the engine computed (billing reserved exactly
 * that many tokens per choice, so the upstream must never be left to pick its own).
 */
import type { EngineContentPart, EngineMessage, GenerationRequest, ResponseFormat, ToolChoice, ToolDefinition } from "../engine.ts";
import { VENDOR_FIELDS, type VendorField } from "./config-schema.ts";
import type { Dialect } from "./dialects.ts";
import { InvalidRequestError } from "../../protocol/errors.ts";
import { customToolDescription, customToolParameters, wireToolCall } from "../custom-tools.ts";
import { grammarBodyFields, type CustomToolPlan } from "./custom-tool-plan.ts";

/** Where the body goes: the upstream's name for the model and the per-choice completion bound. */
export type RequestTarget = {
  dialect: Dialect;
  /** The model's name upstream. */
  model: string;
  /** Completion tokens each choice may use at most (`PreparedGeneration.maxTokens`). */
  maxTokens: number;
  /** How the request's custom tools go (`planCustomTools`); undefined when it has none. */
  customTools?: CustomToolPlan;
};

type WireContentPart = { type: "text"; text: string } | { type: "image_url"; image_url: { url: string; detail?: string } };

function wireParts(parts: readonly EngineContentPart[]): WireContentPart[] {
  return parts.map((part) =>
    part.type === "text"
      ? { type: "text", text: part.text }
      : { type: "image_url", image_url: part.image.detail === undefined ? { url: part.image.url } : { url: part.image.url, detail: part.image.detail } },
  );
}

/** A message's content: its parts in the order sent, when it had parts; else its text. */
function wireContent(message: EngineMessage): string | WireContentPart[] {
  if (message.parts !== undefined && message.parts.length > 0) return wireParts(message.parts);
  // Images without parts (a caller that did not keep the order): text first, then the images.
  if (message.images !== undefined && message.images.length > 0) {
    return wireParts([...(message.content === "" ? [] : [{ type: "text" as const, text: message.content }]), ...message.images.map((image) => ({ type: "image" as const, image }))]);
  }
  return message.content;
}

/** `customTools`: the custom tools' names, whose calls carry raw input (sent as `{"input": ...}`). */
function wireMessage(message: EngineMessage, customTools: ReadonlySet<string>): Record<string, unknown> {
  const name = message.name !== undefined ? { name: message.name } : {};
  switch (message.role) {
    case "tool":
      return { role: "tool", tool_call_id: message.toolCallId, content: wireContent(message) };
    case "assistant": {
      const calls = message.toolCalls ?? [];
      if (calls.length === 0) return { role: "assistant", content: wireContent(message), ...name };
      const content = wireContent(message);
      return {
        role: "assistant",
        // OpenAI's shape for a turn of only calls: content null.
        content: content === "" ? null : content,
        ...name,
        tool_calls: calls.map((call) => wireToolCall(call, customTools)).map((call) => ({ id: call.id, type: "function", function: { name: call.name, arguments: call.arguments } })),
      };
    }
    default:
      return { role: message.role, content: wireContent(message), ...name };
  }
}

function wireTool(tool: ToolDefinition): Record<string, unknown> {
  if (tool.custom !== undefined) {
    // A function of one string, `input` (its grammar, when it has one, is enforced otherwise or refused: `custom-tool-plan.ts`).
    const description = customToolDescription(tool);
    return { type: "function", function: { name: tool.name, ...(description !== "" ? { description } : {}), parameters: customToolParameters() } };
  }
  return {
    type: "function",
    function: {
      name: tool.name,
      ...(tool.description !== undefined ? { description: tool.description } : {}),
      ...(tool.parameters !== undefined ? { parameters: tool.parameters } : {}),
      ...(tool.strict !== undefined ? { strict: tool.strict } : {}),
    },
  };
}

/** A named choice goes as `required` to a kind without named choices (only when it names the only tool: `checkRequestForDialect` refuses the rest). */
function wireToolChoice(choice: ToolChoice, dialect: Dialect): unknown {
  if (typeof choice === "string") return choice;
  return dialect.namedToolChoice ? { type: "function", function: { name: choice.name } } : "required";
}

function wireResponseFormat(format: ResponseFormat): Record<string, unknown> {
  if (format.type !== "json_schema") return { type: format.type };
  return {
    type: "json_schema",
    json_schema: { name: format.name, schema: format.schema, ...(format.strict !== undefined ? { strict: format.strict } : {}) },
  };
}

/**
 * The JSON body for one request in the target's dialect. Fields at their defaults are left out
 * where every kind agrees on the default (`n` 1, no stop, no seed); temperature and top_p are
 * always sent (kinds differ in their defaults: Ollama's and llama-server's are not OpenAI's 1),
 * except to OpenAI at its own defaults (its reasoning models refuse them).
 */
export function buildRequestBody(request: GenerationRequest, target: RequestTarget): Record<string, unknown> {
  const { dialect, customTools } = target;
  const customNames = customTools === undefined ? new Set<string>() : customTools.mode === "functions" ? customTools.names : new Set([customTools.tool]);
  const body: Record<string, unknown> = {
    model: target.model,
    messages: request.messages.map((message) => wireMessage(message, customNames)),
    stream: true,
    stream_options: dialect.continuousUsage ? { include_usage: true, continuous_usage_stats: true } : { include_usage: true },
    [dialect.maxTokensField]: target.maxTokens,
  };
  // llama-server's running counts on every chunk: a stream cut short is billed its real prompt.
  if (dialect.timingsPerToken) body.timings_per_token = true;
  writeSampling(request, dialect, body);
  if (request.choices > 1) body.n = request.choices;
  if (request.logprobs !== undefined) {
    body.logprobs = true;
    if (request.logprobs.top > 0) body.top_logprobs = request.logprobs.top;
  }
  if (customTools?.mode === "grammar") {
    // The reply is the forced custom tool's input: its grammar constrains all of it, and no
    // tools (nor a response format, which a forced call makes moot) go with it.
    Object.assign(body, grammarBodyFields(dialect, customTools.gbnf));
  } else {
    if (request.tools !== undefined && request.tools.length > 0) {
      body.tools = request.tools.map(wireTool);
      if (request.toolChoice !== undefined) body.tool_choice = wireToolChoice(request.toolChoice, dialect);
      // OpenAI's default is true; llama-server's is false: say it always.
      body.parallel_tool_calls = request.parallelToolCalls ?? true;
    }
    if (request.responseFormat !== undefined && request.responseFormat.type !== "text") body.response_format = wireResponseFormat(request.responseFormat);
  }
  writeVendorFields(request, dialect, body);
  return body;
}

/**
 * The sampling fields in OpenAI's spelling (llama-server's native `/infill` reads the same names):
 * temperature and top_p always, except to a kind that omits them at OpenAI's defaults; the others
 * where they differ from the defaults every kind shares.
 */
export function writeSampling(request: GenerationRequest, dialect: Dialect, body: Record<string, unknown>): void {
  const sampling = request.sampling;
  if (!dialect.omitDefaultSampling || sampling.temperature !== 1) body.temperature = sampling.temperature;
  if (!dialect.omitDefaultSampling || sampling.topP !== 1) body.top_p = sampling.topP;
  if (sampling.frequencyPenalty !== 0) body.frequency_penalty = sampling.frequencyPenalty;
  if (sampling.presencePenalty !== 0) body.presence_penalty = sampling.presencePenalty;
  if (sampling.seed !== undefined) body.seed = sampling.seed;
  if (sampling.stop.length > 0) body.stop = [...sampling.stop];
  if (sampling.logitBias !== undefined && sampling.logitBias.size > 0) {
    body.logit_bias = Object.fromEntries([...sampling.logitBias].map(([token, bias]) => [String(token), bias]));
  }
}

/** The request's vendor fields under the kind's names; only vendor fields, so nothing passed through replaces another field. */
export function writeVendorFields(request: GenerationRequest, dialect: Dialect, body: Record<string, unknown>): void {
  for (const [field, value] of Object.entries(request.vendor ?? {})) {
    if (!(VENDOR_FIELDS as readonly string[]).includes(field) || value === undefined) continue;
    body[dialect.vendorFieldNames[field as VendorField] ?? field] = value;
  }
}

/**
 * The body as JSON text, written when the request is prepared, before any member is tried: a
 * body that cannot be written (one nested too deeply for `JSON.stringify`, which the request
 * schema's bounds should already have refused) is a 400 for this request, never a member's failure.
 */
export function serializeRequestBody(body: Record<string, unknown>): string {
  try {
    return JSON.stringify(body);
  } catch (error) {
    const vendor = Object.keys(body).filter((field) => (VENDOR_FIELDS as readonly string[]).includes(field));
    throw new InvalidRequestError(
      `The request could not be written for the model's upstream server (${error instanceof Error ? error.name : "error"})${vendor.length > 0 ? `: check ${vendor.map((field) => `'${field}'`).join(", ")}` : ""}.`,
      vendor.length === 1 ? vendor[0]! : null,
    );
  }
}
