/**
 * The response object of the Responses API (the Open Responses specification's `ResponseResource`):
 * its types, in the spec's field order, and builders that fill every field the spec requires
 * (`null` where it allows null, the documented default otherwise). What `POST /v1/responses`
 * answers, what each stream snapshot holds and what `GET /v1/responses/{id}` returns.
 */
import { randomBytes } from "node:crypto";
import type { TokenUsage } from "../generation.ts";
import type { ReasoningEffort, ReasoningSummary, ResponsesRequest } from "./request.ts";
import { servedTier, type ServiceTier } from "../service-tiers.ts";

/** `queued`/`in_progress` for a response still running (background ones are polled in these). */
export type ResponseStatus = "queued" | "in_progress" | "completed" | "incomplete" | "failed" | "cancelled";

/** An output item's status: `incomplete` when generation stopped inside it (the response is then incomplete). */
export type ItemStatus = "in_progress" | "completed" | "incomplete";

/** An alternative token with its log probability (natural log) and UTF-8 bytes. */
export type TopLogprob = { token: string; logprob: number; bytes: number[] };

/** A generated token's log probability, with the likeliest alternatives when asked for. */
export type Logprob = TopLogprob & { top_logprobs: TopLogprob[] };

/** Text the model wrote. Turnpike adds no annotations (no built-in search tools cite sources). */
export type OutputTextPart = {
  type: "output_text";
  text: string;
  annotations: unknown[];
  /** Empty unless `include` asked for `message.output_text.logprobs` (or `top_logprobs` was set). */
  logprobs: Logprob[];
};

export type RefusalPart = { type: "refusal"; refusal: string };

export type SummaryTextPart = { type: "summary_text"; text: string };

/** A reasoning model's thinking, as it wrote it (Turnpike never encrypts it). */
export type ReasoningTextPart = { type: "reasoning_text"; text: string };

export type OutputMessage = {
  type: "message";
  id: string;
  status: ItemStatus;
  role: "assistant";
  content: Array<OutputTextPart | RefusalPart>;
};

export type FunctionCallItem = {
  type: "function_call";
  id: string;
  /** The id the client's `function_call_output` answers. */
  call_id: string;
  name: string;
  /** JSON text. */
  arguments: string;
  status: ItemStatus;
};

/** A call of a custom (freeform) tool: `input` is the text the model wrote, matching the tool's grammar when it has one. */
export type CustomToolCallItem = {
  type: "custom_tool_call";
  id: string;
  call_id: string;
  name: string;
  input: string;
  status: ItemStatus;
};

export type ReasoningItem = {
  type: "reasoning";
  id: string;
  /** Turnpike writes no summaries: empty. */
  summary: SummaryTextPart[];
  content: ReasoningTextPart[];
  status: ItemStatus;
};

/** An item the model produced. */
export type OutputItem = OutputMessage | FunctionCallItem | CustomToolCallItem | ReasoningItem;

export type ResponseUsage = {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  /** Reasoning included. */
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
};

/** Why a response failed (the spec's `Error`: a code and a message). */
export type ResponseError = { code: string; message: string };

export type IncompleteReason = "max_output_tokens" | "content_filter";

export type ResourceFunctionTool = {
  type: "function";
  name: string;
  description: string | null;
  parameters: Record<string, unknown> | null;
  strict: boolean | null;
};

export type ResourceCustomToolFormat = { type: "text" } | { type: "grammar"; syntax: "lark" | "regex"; definition: string };

export type ResourceCustomTool = {
  type: "custom";
  name: string;
  description: string | null;
  format: ResourceCustomToolFormat;
};

export type ResourceTool = ResourceFunctionTool | ResourceCustomTool;

export type ResourceToolChoice =
  | "none"
  | "auto"
  | "required"
  | { type: "function"; name: string }
  | { type: "custom"; name: string }
  | { type: "allowed_tools"; mode: "none" | "auto" | "required"; tools: Array<{ type: "function" | "custom"; name: string }> };

export type ResourceTextFormat =
  | { type: "text" }
  | { type: "json_object" }
  | { type: "json_schema"; name: string; description: string | null; schema: Record<string, unknown>; strict: boolean };

export type ResourceText = { format: ResourceTextFormat; verbosity: "low" | "medium" | "high" };

export type ResourceReasoning = { effort: ReasoningEffort | null; summary: ReasoningSummary | null };

/** The response object, every field the spec requires present (and OpenAI's `user`). */
export type ResponseResource = {
  id: string;
  object: "response";
  /** Unix seconds. */
  created_at: number;
  /** Unix seconds; null until the response ends completed. */
  completed_at: number | null;
  status: ResponseStatus;
  incomplete_details: { reason: IncompleteReason } | null;
  model: string;
  previous_response_id: string | null;
  instructions: string | null;
  output: OutputItem[];
  error: ResponseError | null;
  tools: ResourceTool[];
  tool_choice: ResourceToolChoice;
  truncation: "auto" | "disabled";
  parallel_tool_calls: boolean;
  text: ResourceText;
  top_p: number;
  presence_penalty: number;
  frequency_penalty: number;
  top_logprobs: number;
  temperature: number;
  reasoning: ResourceReasoning | null;
  /** Null until the response ends. */
  usage: ResponseUsage | null;
  max_output_tokens: number | null;
  max_tool_calls: number | null;
  store: boolean;
  background: boolean;
  /** The tier that served it: `default`, `flex` or `priority` (`auto` asks for `default`). */
  service_tier: ServiceTier;
  metadata: Record<string, string>;
  safety_identifier: string | null;
  prompt_cache_key: string | null;
  /** OpenAI's deprecated end-user id, echoed. */
  user: string | null;
  /**
   * Turnpike's extension, present only with `truncation: "auto"`: how many conversation items
   * (earlier responses' items first, then this request's input items, oldest first) were left
   * out of the prompt so that it fits the model's context; 0 when none were.
   */
  truncated_input_items?: number;
};

/** The resource's fields that echo the request (with the defaults OpenAI reports for fields not sent). */
export type EchoedRequestFields = Pick<
  ResponseResource,
  | "model"
  | "previous_response_id"
  | "instructions"
  | "tools"
  | "tool_choice"
  | "truncation"
  | "parallel_tool_calls"
  | "text"
  | "top_p"
  | "presence_penalty"
  | "frequency_penalty"
  | "top_logprobs"
  | "temperature"
  | "reasoning"
  | "max_output_tokens"
  | "max_tool_calls"
  | "store"
  | "background"
  | "service_tier"
  | "metadata"
  | "safety_identifier"
  | "prompt_cache_key"
  | "user"
>;

/** The request's tools as the resource lists them (every field present, null where not sent). */
function echoedTools(request: ResponsesRequest): ResourceTool[] {
  return (request.tools ?? []).map((tool): ResourceTool => {
    if (tool.type === "function") {
      return { type: "function", name: tool.name, description: tool.description ?? null, parameters: tool.parameters ?? null, strict: tool.strict ?? null };
    }
    return { type: "custom", name: tool.name, description: tool.description ?? null, format: tool.format ?? { type: "text" } };
  });
}

function echoedToolChoice(request: ResponsesRequest): ResourceToolChoice {
  const choice = request.tool_choice;
  if (choice == null) return "auto";
  if (typeof choice === "string") return choice;
  if (choice.type === "allowed_tools") return { type: "allowed_tools", mode: choice.mode ?? "auto", tools: choice.tools.map((tool) => ({ type: tool.type, name: tool.name })) };
  return { type: choice.type, name: choice.name };
}

function echoedText(request: ResponsesRequest): ResourceText {
  const format = request.text?.format;
  const verbosity = request.text?.verbosity ?? "medium";
  if (format == null || format.type === "text") return { format: { type: "text" }, verbosity };
  if (format.type === "json_object") return { format: { type: "json_object" }, verbosity };
  return { format: { type: "json_schema", name: format.name, description: format.description ?? null, schema: format.schema, strict: format.strict ?? false }, verbosity };
}

/**
 * The request-derived fields of the resource, with their defaults: `temperature` and `top_p` 1,
 * penalties 0, `top_logprobs` 0, `truncation` `disabled`, `parallel_tool_calls` and `store` true,
 * `background` false, `tool_choice` `auto`, `text.format` `text`, `metadata` {}, `service_tier`
 * the tier that serves it (`auto` or none: `default`), the rest null.
 */
export function echoedRequestFields(request: ResponsesRequest): EchoedRequestFields {
  const effort = request.reasoning?.effort ?? null;
  const summary = request.reasoning?.summary ?? request.reasoning?.generate_summary ?? null;
  return {
    model: request.model,
    previous_response_id: request.previous_response_id ?? null,
    instructions: request.instructions ?? null,
    tools: echoedTools(request),
    tool_choice: echoedToolChoice(request),
    truncation: request.truncation ?? "disabled",
    parallel_tool_calls: request.parallel_tool_calls ?? true,
    text: echoedText(request),
    top_p: request.top_p ?? 1,
    presence_penalty: request.presence_penalty ?? 0,
    frequency_penalty: request.frequency_penalty ?? 0,
    top_logprobs: request.top_logprobs ?? 0,
    temperature: request.temperature ?? 1,
    reasoning: { effort, summary },
    max_output_tokens: request.max_output_tokens ?? null,
    max_tool_calls: request.max_tool_calls ?? null,
    store: request.store ?? true,
    background: request.background ?? false,
    service_tier: servedTier(request.service_tier),
    metadata: (request.metadata ?? {}) as Record<string, string>,
    safety_identifier: request.safety_identifier ?? null,
    prompt_cache_key: request.prompt_cache_key ?? null,
    user: request.user ?? null,
  };
}

/** A fresh id: `prefix` and 48 hex digits (OpenAI's shape: `resp_…`, `msg_…`, `fc_…`). */
export function newId(prefix: string): string {
  return `${prefix}_${randomBytes(24).toString("hex")}`;
}

/** A new response id (`resp_…`). */
export function newResponseId(): string {
  return newId("resp");
}

/** The spec's usage from the engine's counts (prompt tokens are input tokens, completion tokens output). */
export function usageOf(usage: TokenUsage): ResponseUsage {
  return {
    input_tokens: usage.promptTokens,
    input_tokens_details: { cached_tokens: usage.cachedPromptTokens },
    output_tokens: usage.completionTokens,
    output_tokens_details: { reasoning_tokens: usage.reasoningTokens ?? 0 },
    total_tokens: usage.promptTokens + usage.completionTokens,
  };
}

/** What a resource holds beyond the request's echo: the state of its run. */
export type ResourceState = {
  id: string;
  /** Unix seconds. */
  createdAt: number;
  status: ResponseStatus;
  /** Unix seconds; set when the response ended `completed`. */
  completedAt?: number;
  output?: OutputItem[];
  usage?: ResponseUsage;
  error?: ResponseError;
  incompleteReason?: IncompleteReason;
  /** Conversation items `truncation: "auto"` left out of the prompt (see `ResponseResource.truncated_input_items`). */
  truncatedInputItems?: number;
};

/** The whole resource, in the spec's field order, from the request's echo and the run's state. */
export function buildResponseResource(echoed: EchoedRequestFields, state: ResourceState): ResponseResource {
  return {
    id: state.id,
    object: "response",
    created_at: state.createdAt,
    completed_at: state.completedAt ?? null,
    status: state.status,
    incomplete_details: state.incompleteReason === undefined ? null : { reason: state.incompleteReason },
    model: echoed.model,
    previous_response_id: echoed.previous_response_id,
    instructions: echoed.instructions,
    output: state.output ?? [],
    error: state.error ?? null,
    tools: echoed.tools,
    tool_choice: echoed.tool_choice,
    truncation: echoed.truncation,
    parallel_tool_calls: echoed.parallel_tool_calls,
    text: echoed.text,
    top_p: echoed.top_p,
    presence_penalty: echoed.presence_penalty,
    frequency_penalty: echoed.frequency_penalty,
    top_logprobs: echoed.top_logprobs,
    temperature: echoed.temperature,
    reasoning: echoed.reasoning,
    usage: state.usage ?? null,
    max_output_tokens: echoed.max_output_tokens,
    max_tool_calls: echoed.max_tool_calls,
    store: echoed.store,
    background: echoed.background,
    service_tier: echoed.service_tier,
    metadata: echoed.metadata,
    safety_identifier: echoed.safety_identifier,
    prompt_cache_key: echoed.prompt_cache_key,
    user: echoed.user,
    ...(echoed.truncation === "auto" ? { truncated_input_items: state.truncatedInputItems ?? 0 } : {}),
  };
}

/** An assistant message with one output text part (empty while it streams). */
export function outputMessage(id: string, text: string, status: ItemStatus, logprobs: Logprob[] = []): OutputMessage {
  return { type: "message", id, status, role: "assistant", content: [{ type: "output_text", text, annotations: [], logprobs }] };
}

/** An assistant message with no content yet, as `response.output_item.added` announces it. */
export function emptyOutputMessage(id: string): OutputMessage {
  return { type: "message", id, status: "in_progress", role: "assistant", content: [] };
}

/** A function call item. */
export function functionCallItem(id: string, callId: string, name: string, callArguments: string, status: ItemStatus): FunctionCallItem {
  return { type: "function_call", id, call_id: callId, name, arguments: callArguments, status };
}

/** A custom tool call item. */
export function customToolCallItem(id: string, callId: string, name: string, input: string, status: ItemStatus): CustomToolCallItem {
  return { type: "custom_tool_call", id, call_id: callId, name, input, status };
}

/** A reasoning item holding the model's reasoning text (none while it is announced). */
export function reasoningItem(id: string, text: string | undefined, status: ItemStatus): ReasoningItem {
  return { type: "reasoning", id, summary: [], content: text === undefined ? [] : [{ type: "reasoning_text", text }], status };
}
