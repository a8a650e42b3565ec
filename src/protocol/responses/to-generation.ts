/**
 * From a validated Responses API request to the one internal `GenerationRequest`: the prompt from
 * `instructions`, the stored items of earlier responses and the request's own items; the tools
 * (custom tools included), the tool choice, the text format and the sampling fields. Also the
 * request's items as they are stored (normalised, each with an id).
 */
import type { EngineContentPart, EngineImage, EngineMessage, GenerationRequest, ResponseFormat, ToolCall, ToolChoice, ToolDefinition } from "../generation.ts";
import { InvalidRequestError, UnsupportedParameterError } from "../errors.ts";
import { imageUrlProblem } from "../image-url.ts";
import type { ResponsesInputItem, ResponsesMessagePart, ResponsesRequest, ResponsesTool, ResponsesToolOutputPart } from "./request.ts";
import { newId, type ItemStatus, type OutputItem } from "./resource.ts";

/** What the model can read besides text. */
export type ModelInputs = { images: boolean };

/** An input item as stored: its type always given, an id always set, a message's content always parts. */
export type StoredInputItem =
  | {
      type: "message";
      id: string;
      role: "user" | "system" | "developer" | "assistant";
      content: ResponsesMessagePart[];
      status: ItemStatus;
      phase?: "commentary" | "final_answer";
    }
  | { type: "function_call"; id: string; call_id: string; name: string; arguments: string; status: ItemStatus }
  | { type: "function_call_output"; id: string; call_id: string; output: string | ResponsesToolOutputPart[]; status: ItemStatus }
  | { type: "custom_tool_call"; id: string; call_id: string; name: string; input: string; status: ItemStatus }
  | { type: "custom_tool_call_output"; id: string; call_id: string; output: string | ResponsesToolOutputPart[] }
  | {
      type: "reasoning";
      id: string;
      summary: Array<{ type: "summary_text"; text: string }>;
      content?: Array<{ type: "reasoning_text" | "text"; text: string }>;
      encrypted_content?: string;
    }
  | { type: "item_reference"; id: string };

/** An item of a conversation: an input item as stored, or an item a response produced. */
export type ConversationItem = StoredInputItem | OutputItem;

/** The id prefix of each item type (OpenAI's, where it has one). */
export const ITEM_ID_PREFIXES = {
  message: "msg",
  function_call: "fc",
  function_call_output: "fco",
  custom_tool_call: "ctc",
  custom_tool_call_output: "ctco",
  reasoning: "rs",
} as const;

/** One input item as stored (see `itemsOf`). */
function storedItem(item: ResponsesInputItem): StoredInputItem {
  switch (item.type) {
    case "item_reference":
      return { type: "item_reference", id: item.id };
    case "message": {
      const content: ResponsesMessagePart[] =
        typeof item.content !== "string"
          ? item.content
          : item.role === "assistant"
            ? [{ type: "output_text", text: item.content, annotations: [] }]
            : [{ type: "input_text", text: item.content }];
      return {
        type: "message",
        id: item.id ?? newId(ITEM_ID_PREFIXES.message),
        role: item.role,
        content,
        status: item.status ?? "completed",
        ...(item.phase != null ? { phase: item.phase } : {}),
      };
    }
    case "function_call":
      return { type: "function_call", id: item.id ?? newId(ITEM_ID_PREFIXES.function_call), call_id: item.call_id, name: item.name, arguments: item.arguments, status: item.status ?? "completed" };
    case "function_call_output":
      return { type: "function_call_output", id: item.id ?? newId(ITEM_ID_PREFIXES.function_call_output), call_id: item.call_id, output: item.output, status: item.status ?? "completed" };
    case "custom_tool_call":
      return { type: "custom_tool_call", id: item.id ?? newId(ITEM_ID_PREFIXES.custom_tool_call), call_id: item.call_id, name: item.name, input: item.input, status: item.status ?? "completed" };
    case "custom_tool_call_output":
      return { type: "custom_tool_call_output", id: item.id ?? newId(ITEM_ID_PREFIXES.custom_tool_call_output), call_id: item.call_id, output: item.output };
    case "reasoning":
      return {
        type: "reasoning",
        id: item.id ?? newId(ITEM_ID_PREFIXES.reasoning),
        summary: item.summary,
        ...(item.content != null ? { content: item.content } : {}),
        ...(item.encrypted_content != null ? { encrypted_content: item.encrypted_content } : {}),
      };
  }
}

/**
 * The request's `input` as items to store: a string becomes one user message; every item gets
 * its type and an id (the client's, or a new `msg_…`, `fc_…`…); message content becomes parts.
 */
export function itemsOf(request: ResponsesRequest): StoredInputItem[] {
  const input = request.input;
  if (input == null) return [];
  if (typeof input === "string") return [storedItem({ type: "message", role: "user", content: input })];
  return input.map(storedItem);
}

/** Fields accepted by the schema that this release answers with a clear 400. */
export function rejectUnsupported(request: ResponsesRequest): void {
  if (request.conversation != null) {
    throw new UnsupportedParameterError("'conversation' is not supported: Turnpike keeps a conversation's state through 'previous_response_id'.", "conversation");
  }
  if (request.prompt != null) {
    throw new UnsupportedParameterError("'prompt' (a stored prompt template) is not supported: send 'instructions' and 'input' instead.", "prompt");
  }
}

/** An item to map, and how to name its fields in an error: `input[3]`, or `previous_response_id` for stored items. */
type Placed = { item: ResponsesInputItem | ConversationItem; param: (field: string) => string };

/**
 * The prompt being built: its messages, the ids of the calls made so far (which outputs must
 * answer), and those of calls `truncation: "auto"` dropped (whose outputs go with them).
 */
type PromptState = { messages: EngineMessage[]; callIds: Set<string>; droppedCallIds: Set<string>; inputs: ModelInputs };

/** A message's text and images; refuses parts this model cannot read and malformed images, naming the part. */
function messageContent(content: string | ReadonlyArray<ResponsesMessagePart | OutputItemPart>, param: (field: string) => string, inputs: ModelInputs) {
  if (typeof content === "string") return { text: content, images: [] as EngineImage[], parts: undefined };
  const images: EngineImage[] = [];
  const parts: EngineContentPart[] = [];
  let text = "";
  content.forEach((part, index) => {
    const partParam = param(`content[${index}]`);
    switch (part.type) {
      case "input_text":
      case "output_text":
        text += part.text;
        parts.push({ type: "text", text: part.text });
        return;
      case "refusal":
        text += part.refusal;
        parts.push({ type: "text", text: part.refusal });
        return;
      case "input_image": {
        if (!inputs.images) {
          throw new InvalidRequestError(
            "This model does not accept images (input_image content parts); it reads text only. GET /v1/models lists each model's input modalities.",
            partParam,
            "model_does_not_support_images",
          );
        }
        if (part.image_url == null) {
          throw new UnsupportedParameterError("Images by 'file_id' are not supported (Turnpike has no Files API): send the image as 'image_url', an http(s) or data URL.", `${partParam}.file_id`);
        }
        const problem = imageUrlProblem(part.image_url);
        if (problem !== undefined) throw new InvalidRequestError(`Invalid image in '${partParam}': ${problem}.`, `${partParam}.image_url`, "invalid_image_url");
        const image: EngineImage = part.detail == null ? { url: part.image_url } : { url: part.image_url, detail: part.detail };
        images.push(image);
        parts.push({ type: "image", image });
        return;
      }
      case "input_file":
        throw new UnsupportedParameterError("This model does not accept files (input_file content parts); it reads text and, where its modalities say so, images.", partParam);
    }
  });
  return { text, images, parts };
}

type OutputItemPart = Extract<OutputItem, { type: "message" }>["content"][number];

/** A tool call's output as text; images and files in it are refused, naming the part. */
function toolOutputText(output: string | ReadonlyArray<ResponsesToolOutputPart>, param: (field: string) => string): string {
  if (typeof output === "string") return output;
  return output
    .map((part, index) => {
      if (part.type === "input_text") return part.text;
      throw new UnsupportedParameterError(`A tool call's output may hold text only here ('${part.type}' parts are not supported).`, param(`output[${index}]`));
    })
    .join("");
}

/** Adds a call to the assistant turn it belongs to: the last message when it is the assistant's, else a new turn. */
function addToolCall(state: PromptState, call: ToolCall): void {
  state.callIds.add(call.id);
  const last = state.messages.at(-1);
  if (last?.role === "assistant") {
    (last.toolCalls ??= []).push(call);
    return;
  }
  state.messages.push({ role: "assistant", content: "", toolCalls: [call] });
}

/** Adds the tool message answering a call; the call must have been made earlier (as OpenAI requires). */
function addToolOutput(state: PromptState, callId: string, content: string, param: (field: string) => string): void {
  // The call was dropped to fit the context: its answer alone would mean nothing (and break the template's pairing).
  if (!state.callIds.has(callId) && state.droppedCallIds.has(callId)) return;
  if (!state.callIds.has(callId)) {
    throw new InvalidRequestError(
      `No tool call with the call_id '${callId}' was found before this output. An output item must follow the 'function_call' or 'custom_tool_call' item it answers (in 'input' or in the previous response).`,
      param("call_id"),
    );
  }
  state.messages.push({ role: "tool", content, toolCallId: callId });
}

/** Maps one item into the prompt. Reasoning items are dropped: a generation request carries no reasoning. */
function addItem(state: PromptState, { item, param }: Placed, resolve: (id: string) => ConversationItem | undefined): void {
  switch (item.type) {
    case "message": {
      const { text, images, parts } = messageContent(item.content, param, state.inputs);
      if (item.role === "assistant") state.messages.push({ role: "assistant", content: text });
      else if (item.role === "user") {
        // The parts as sent matter only where an image stands among them (an upstream forwards them).
        state.messages.push(images.length > 0 && parts !== undefined ? { role: "user", content: text, images, parts } : { role: "user", content: text });
      } else state.messages.push({ role: "system", content: text });
      return;
    }
    case "function_call":
      return addToolCall(state, { id: item.call_id, name: item.name, arguments: item.arguments });
    case "custom_tool_call":
      // The call's free-text input is its arguments text (see ToolDefinition.custom).
      return addToolCall(state, { id: item.call_id, name: item.name, arguments: item.input });
    case "function_call_output":
    case "custom_tool_call_output":
      return addToolOutput(state, item.call_id, toolOutputText(item.output, param), param);
    case "reasoning":
      return;
    case "item_reference": {
      const referenced = resolve(item.id);
      if (referenced === undefined || referenced.type === "item_reference") {
        throw new InvalidRequestError(`No stored item with the id '${item.id}' is in this conversation; an 'item_reference' must name an item of a previous response in the chain.`, param("id"));
      }
      return addItem(state, { item: referenced, param }, resolve);
    }
  }
}

function toolDefinitionOf(tool: ResponsesTool): ToolDefinition {
  const description = tool.description != null ? { description: tool.description } : {};
  if (tool.type === "custom") return { name: tool.name, ...description, custom: { format: tool.format ?? { type: "text" } } };
  return {
    name: tool.name,
    ...description,
    ...(tool.parameters != null ? { parameters: tool.parameters } : {}),
    ...(tool.strict != null ? { strict: tool.strict } : {}),
  };
}

/**
 * The tools and the choice among them. `allowed_tools` is enforced by offering only the allowed
 * tools (a generation request cannot show a tool it forbids calling), with its mode as the choice.
 * The schema checked that every named tool is among `tools`.
 */
function toolOptions(request: ResponsesRequest): Pick<GenerationRequest, "tools" | "toolChoice" | "parallelToolCalls"> {
  let tools = (request.tools ?? []).map(toolDefinitionOf);
  const choice = request.tool_choice;
  let toolChoice: ToolChoice | undefined;
  if (choice == null) toolChoice = undefined;
  else if (typeof choice === "string") toolChoice = choice;
  else if (choice.type === "allowed_tools") {
    const allowed = new Set(choice.tools.map((tool) => tool.name));
    tools = tools.filter((tool) => allowed.has(tool.name));
    toolChoice = choice.mode ?? "auto";
  } else toolChoice = { name: choice.name };
  return {
    ...(tools.length > 0 ? { tools } : {}),
    ...(toolChoice !== undefined ? { toolChoice } : {}),
    ...(request.parallel_tool_calls != null ? { parallelToolCalls: request.parallel_tool_calls } : {}),
  };
}

function responseFormatOf(request: ResponsesRequest): ResponseFormat | undefined {
  const format = request.text?.format;
  if (format == null || format.type === "text") return undefined;
  if (format.type === "json_object") return { type: "json_object" };
  return { type: "json_schema", name: format.name, schema: format.schema, ...(format.strict != null ? { strict: format.strict } : {}) };
}

/**
 * The generation request for a validated Responses request. The prompt is `instructions` (as a
 * system message; earlier responses' instructions are not carried over, as OpenAI does), then
 * `history` (the stored input and output items of the previous responses in the chain, oldest
 * first), then the request's items. Throws a 400 naming the field for what cannot be mapped:
 * an output answering no earlier call (`input[i].call_id`), images to a text-only model
 * (`input[i].content[j]`, code `model_does_not_support_images`), files, an unknown item reference,
 * and the fields `rejectUnsupported` refuses. An error in a stored item names `previous_response_id`.
 *
 * `options.dropItems`: leave out the conversation's first items (`truncation: "auto"`, see
 * `droppableItems`); an output answering a dropped call is left out with it.
 *
 * Not mapped here, for the caller: `max_tool_calls`, `truncation`, `prompt_cache_key` (the upstream
 * affinity key), `store`, `background`, `stream` (set `buffered` when not streaming), `metadata`.
 */
export function toGenerationRequest(request: ResponsesRequest, inputs: ModelInputs, history: readonly ConversationItem[] = [], options: { dropItems?: number } = {}): GenerationRequest {
  rejectUnsupported(request);
  const state: PromptState = { messages: [], callIds: new Set(), droppedCallIds: new Set(), inputs };
  if (request.instructions != null && request.instructions !== "") state.messages.push({ role: "system", content: request.instructions });
  const known = new Map<string, ConversationItem>();
  const resolve = (id: string) => known.get(id);
  // The first `dropItems` items of the conversation (history, then input) are left out; they still resolve references.
  let toDrop = options.dropItems ?? 0;
  const dropped = (item: ResponsesInputItem | ConversationItem): boolean => {
    if (toDrop <= 0) return false;
    toDrop--;
    if (item.type === "function_call" || item.type === "custom_tool_call") state.droppedCallIds.add(item.call_id);
    return true;
  };
  for (const item of history) {
    if (!dropped(item)) addItem(state, { item, param: () => "previous_response_id" }, resolve);
    if (item.type !== "item_reference") known.set(item.id, item);
  }
  const input = request.input;
  if (typeof input === "string") state.messages.push({ role: "user", content: input });
  else if (input != null) {
    input.forEach((item, index) => {
      if (!dropped(item)) addItem(state, { item, param: (field) => `input[${index}].${field}` }, resolve);
    });
  }
  if (!state.messages.some((message) => message.role !== "system")) {
    throw new InvalidRequestError("The request holds no input for the model: send 'input' (a string or items), or continue a response with 'previous_response_id'.", "input");
  }
  const responseFormat = responseFormatOf(request);
  const wantsLogprobs = (request.include ?? []).includes("message.output_text.logprobs") || (request.top_logprobs ?? 0) > 0;
  const effort = request.reasoning?.effort;
  return {
    messages: state.messages,
    sampling: {
      temperature: request.temperature ?? 1,
      topP: request.top_p ?? 1,
      frequencyPenalty: request.frequency_penalty ?? 0,
      presencePenalty: request.presence_penalty ?? 0,
      stop: [],
    },
    ...(request.max_output_tokens != null ? { maxTokens: request.max_output_tokens } : {}),
    ...(responseFormat !== undefined ? { responseFormat } : {}),
    ...toolOptions(request),
    choices: 1,
    ...(wantsLogprobs ? { logprobs: { top: request.top_logprobs ?? 0 } } : {}),
    // Passed only when asked: the caller refuses it for models whose entry does not allow it.
    ...(effort != null ? { vendor: { reasoning_effort: effort } } : {}),
  };
}

/**
 * How many of the conversation's first items (the stored history, then the request's input
 * items) `truncation: "auto"` may leave out of the prompt: every item before the last user
 * message, which stays, as do the instructions (never an item) and anything after it.
 */
export function droppableItems(request: ResponsesRequest, history: readonly ConversationItem[] = []): number {
  const input = request.input;
  // A string input is the last user message itself.
  if (typeof input === "string") return history.length;
  const items: ReadonlyArray<ResponsesInputItem | ConversationItem> = [...history, ...(input ?? [])];
  for (let index = items.length - 1; index >= 0; index--) {
    const item = items[index]!;
    if (item.type === "message" && item.role === "user") return index;
  }
  return 0;
}

/** Chat completions' spelling of a field (the engines' errors name fields so) → the Responses API's, prefix by prefix. */
const CHAT_TO_RESPONSES_PARAMS: ReadonlyArray<[RegExp, string]> = [
  [/^response_format\.json_schema\.schema(?=$|[.[])/, "text.format.schema"],
  [/^response_format(?=$|[.[])/, "text.format"],
  [/^tools\[(\d+)\]\.function(?=$|[.[])/, "tools[$1]"],
  [/^tool_choice\.function(?=$|[.[])/, "tool_choice"],
  [/^max_(?:completion_)?tokens$/, "max_output_tokens"],
  [/^reasoning_effort$/, "reasoning.effort"],
  // A message's place in the prompt is not an input item's (instructions and history come first): the whole input.
  [/^messages(?:$|[.[].*)/, "input"],
];

/**
 * The Responses API's name of a request field an engine's error names in chat completions'
 * spelling (`response_format.json_schema.schema.properties.age` → `text.format.schema.properties.age`,
 * `tools[0].function.parameters` → `tools[0].parameters`, `messages` → `input`); others unchanged.
 */
export function responsesParamOf(param: string): string {
  for (const [pattern, replacement] of CHAT_TO_RESPONSES_PARAMS) {
    if (pattern.test(param)) return param.replace(pattern, replacement);
  }
  return param;
}
