/**
 * Generation parts → the Responses API: output items (reasoning, the assistant message, function
 * and custom tool calls), the stream's events in the spec's grammar, and the final resource. The
 * Responses dialect's other half of the generation core; free of HTTP, billing and storage.
 *
 * One `ResponseAssembly` follows one response: `push` turns each part into its events (and keeps
 * the items), `close` ends the open items, `resource` gives the whole resource in any state.
 * The stream's lifecycle events (`response.created`, `.in_progress`, the terminal one) come from
 * the caller, which decides when the response is settled and stored.
 */
import { partBatches, type EngineFinishReason, type GenerationOutcome, type GenerationOutput, type StreamPart, type TokenLogprob } from "../generation.ts";
import { createEventSequencer, type ResponseStreamEvent, type UnsequencedEvent } from "./events.ts";
import {
  buildResponseResource,
  customToolCallItem,
  emptyOutputMessage,
  functionCallItem,
  newId,
  outputMessage,
  reasoningItem,
  usageOf,
  type EchoedRequestFields,
  type IncompleteReason,
  type Logprob,
  type OutputItem,
  type ResponseError,
  type ResponseResource,
  type ResponseStatus,
} from "./resource.ts";
import { ITEM_ID_PREFIXES } from "./to-generation.ts";

/** What a response says besides its generated content: its id, its time, the request's echo. */
export type ResponseShape = {
  id: string;
  /** Unix seconds. */
  createdAt: number;
  echoed: EchoedRequestFields;
  /** The names of the request's custom tools: their calls become `custom_tool_call` items, their input raw text. */
  customTools: ReadonlySet<string>;
  /** Whether output text carries log probabilities (`include: ["message.output_text.logprobs"]`, or `top_logprobs`). */
  logprobs: boolean;
  /** Conversation items `truncation: "auto"` left out of the prompt: set once the prompt is prepared, before anything is answered. */
  truncatedInputItems?: number;
};

/** The wire form of engine log probabilities. */
function toWireLogprobs(tokens: readonly TokenLogprob[]): Logprob[] {
  return tokens.map((token) => ({
    token: token.token,
    logprob: token.logprob,
    bytes: token.bytes,
    top_logprobs: token.topLogprobs.map((alternative) => ({ token: alternative.token, logprob: alternative.logprob, bytes: alternative.bytes })),
  }));
}

/** The status and reason a finished generation gives its response. */
export function statusOf(finishReason: EngineFinishReason): { status: ResponseStatus; incompleteReason?: IncompleteReason } {
  switch (finishReason) {
    case "length":
      return { status: "incomplete", incompleteReason: "max_output_tokens" };
    case "content_filter":
      return { status: "incomplete", incompleteReason: "content_filter" };
    case "cancelled":
      return { status: "cancelled" };
    default:
      return { status: "completed" };
  }
}

type OpenItem =
  | { kind: "reasoning"; id: string; text: string }
  | { kind: "message"; id: string; text: string; logprobs: Logprob[] }
  | { kind: "function_call"; id: string; callId: string; name: string; arguments: string }
  | { kind: "custom_tool_call"; id: string; callId: string; name: string; input: string };

/**
 * One response's output, built part by part; the events each part makes, in the spec's order.
 * Only the first choice is read (the Responses API has no `n`).
 */
export class ResponseAssembly {
  readonly shape: ResponseShape;
  readonly #items: OutputItem[] = [];
  #open: OpenItem | undefined;
  #finishReason: EngineFinishReason | undefined;
  readonly #sequence = createEventSequencer();

  constructor(shape: ResponseShape) {
    this.shape = shape;
  }

  /** Numbers an event: every event of the stream passes here once, so numbers never skip or repeat. */
  number(event: UnsequencedEvent): ResponseStreamEvent {
    return this.#sequence(event);
  }

  /** How the generation finished, once it did (`cancelled` when cut). */
  get finishReason(): EngineFinishReason | undefined {
    return this.#finishReason;
  }

  /** The events of one generation part. */
  push(part: StreamPart): UnsequencedEvent[] {
    if (part.choice !== 0) return [];
    switch (part.type) {
      case "reasoning-delta":
        return this.#text("reasoning", part.text, undefined);
      case "text-delta":
        return this.#text("message", part.text, part.logprobs);
      case "tool-call-start": {
        const events = this.#closeOpen("completed");
        const custom = this.shape.customTools.has(part.name);
        const open: OpenItem = custom
          ? { kind: "custom_tool_call", id: newId(ITEM_ID_PREFIXES.custom_tool_call), callId: part.id, name: part.name, input: "" }
          : { kind: "function_call", id: newId(ITEM_ID_PREFIXES.function_call), callId: part.id, name: part.name, arguments: "" };
        this.#open = open;
        events.push({ type: "response.output_item.added", output_index: this.#items.length, item: this.#snapshot(open, "in_progress") });
        return events;
      }
      case "tool-call-delta": {
        const open = this.#open;
        if (open === undefined || (open.kind !== "function_call" && open.kind !== "custom_tool_call")) return [];
        const where = { item_id: open.id, output_index: this.#items.length };
        if (open.kind === "function_call") {
          open.arguments += part.argumentsDelta;
          return [{ type: "response.function_call_arguments.delta", ...where, delta: part.argumentsDelta }];
        }
        open.input += part.argumentsDelta;
        return [{ type: "response.custom_tool_call_input.delta", ...where, delta: part.argumentsDelta }];
      }
      case "finish":
        this.#finishReason = part.reason;
        return this.#closeOpen(part.reason === "stop" || part.reason === "tool_calls" ? "completed" : "incomplete");
    }
  }

  /** Ends the item still open (a generation that stopped without its `finish`: cut, or failed). */
  close(): UnsequencedEvent[] {
    return this.#closeOpen("incomplete");
  }

  /** The output items so far; the open one as it stands, in `openStatus` (`incomplete` once the response ended). */
  output(openStatus: "in_progress" | "incomplete" = "in_progress"): OutputItem[] {
    return this.#open === undefined ? [...this.#items] : [...this.#items, this.#snapshot(this.#open, openStatus)];
  }

  /** The whole resource in a state (`in_progress` while it runs; a final status with its usage once it ended). */
  resource(state: { status: ResponseStatus; usage?: GenerationOutcome["usage"]; error?: ResponseError; incompleteReason?: IncompleteReason; completedAt?: number }): ResponseResource {
    return buildResponseResource(this.shape.echoed, {
      id: this.shape.id,
      createdAt: this.shape.createdAt,
      status: state.status,
      // An item still open when the response ended (a failure, a cut) ended incomplete, as the stream's last events say.
      output: this.output(state.status === "queued" || state.status === "in_progress" ? "in_progress" : "incomplete"),
      ...(state.usage !== undefined ? { usage: usageOf(state.usage) } : {}),
      ...(state.error !== undefined ? { error: state.error } : {}),
      ...(state.incompleteReason !== undefined ? { incompleteReason: state.incompleteReason } : {}),
      ...(state.completedAt !== undefined ? { completedAt: state.completedAt } : {}),
      ...(this.shape.truncatedInputItems !== undefined ? { truncatedInputItems: this.shape.truncatedInputItems } : {}),
    });
  }

  /** The final resource of a generation that ended with `outcome` (undefined: it produced nothing billable). */
  finalResource(outcome: GenerationOutcome | undefined, error?: ResponseError): ResponseResource {
    if (error !== undefined) return this.resource({ status: "failed", error, ...(outcome !== undefined ? { usage: outcome.usage } : {}) });
    const finishReason = outcome?.finishReason ?? this.#finishReason ?? "cancelled";
    const { status, incompleteReason } = statusOf(finishReason);
    return this.resource({
      status,
      ...(outcome !== undefined ? { usage: outcome.usage } : {}),
      ...(incompleteReason !== undefined ? { incompleteReason } : {}),
      ...(status === "completed" ? { completedAt: Math.floor(Date.now() / 1000) } : {}),
    });
  }

  #text(kind: "reasoning" | "message", text: string, logprobs: readonly TokenLogprob[] | undefined): UnsequencedEvent[] {
    const events: UnsequencedEvent[] = [];
    let open = this.#open;
    if (open === undefined || open.kind !== kind) {
      events.push(...this.#closeOpen("completed"));
      open = kind === "reasoning" ? { kind, id: newId(ITEM_ID_PREFIXES.reasoning), text: "" } : { kind, id: newId(ITEM_ID_PREFIXES.message), text: "", logprobs: [] };
      this.#open = open;
      const output_index = this.#items.length;
      if (open.kind === "reasoning") {
        events.push({ type: "response.output_item.added", output_index, item: reasoningItem(open.id, undefined, "in_progress") });
        events.push({ type: "response.content_part.added", item_id: open.id, output_index, content_index: 0, part: { type: "reasoning_text", text: "" } });
      } else {
        events.push({ type: "response.output_item.added", output_index, item: emptyOutputMessage(open.id) });
        events.push({ type: "response.content_part.added", item_id: open.id, output_index, content_index: 0, part: { type: "output_text", text: "", annotations: [], logprobs: [] } });
      }
    }
    const where = { item_id: open.id, output_index: this.#items.length, content_index: 0 };
    open.text += text;
    if (open.kind === "reasoning") {
      events.push({ type: "response.reasoning_text.delta", ...where, delta: text });
    } else {
      const wire = this.shape.logprobs && logprobs !== undefined ? toWireLogprobs(logprobs) : [];
      if (this.shape.logprobs) open.logprobs.push(...wire);
      events.push({ type: "response.output_text.delta", ...where, delta: text, logprobs: wire });
    }
    return events;
  }

  /** The item as it stands, in a status. */
  #snapshot(open: OpenItem, status: "in_progress" | "completed" | "incomplete"): OutputItem {
    switch (open.kind) {
      case "reasoning":
        return reasoningItem(open.id, status === "in_progress" && open.text === "" ? undefined : open.text, status);
      case "message":
        return outputMessage(open.id, open.text, status, open.logprobs);
      case "function_call":
        return functionCallItem(open.id, open.callId, open.name, open.arguments, status);
      case "custom_tool_call":
        return customToolCallItem(open.id, open.callId, open.name, open.input, status);
    }
  }

  /** The `.done` events of the open item, which joins the output. */
  #closeOpen(status: "completed" | "incomplete"): UnsequencedEvent[] {
    const open = this.#open;
    if (open === undefined) return [];
    this.#open = undefined;
    const output_index = this.#items.length;
    const item = this.#snapshot(open, status);
    this.#items.push(item);
    const events: UnsequencedEvent[] = [];
    const where = { item_id: open.id, output_index };
    switch (open.kind) {
      case "reasoning":
        events.push({ type: "response.reasoning_text.done", ...where, content_index: 0, text: open.text });
        events.push({ type: "response.content_part.done", ...where, content_index: 0, part: { type: "reasoning_text", text: open.text } });
        break;
      case "message":
        events.push({ type: "response.output_text.done", ...where, content_index: 0, text: open.text, logprobs: open.logprobs });
        events.push({ type: "response.content_part.done", ...where, content_index: 0, part: { type: "output_text", text: open.text, annotations: [], logprobs: open.logprobs } });
        break;
      case "function_call":
        events.push({ type: "response.function_call_arguments.done", ...where, arguments: open.arguments });
        break;
      case "custom_tool_call":
        events.push({ type: "response.custom_tool_call_input.done", ...where, input: open.input });
        break;
    }
    events.push({ type: "response.output_item.done", output_index, item });
    return events;
  }
}

/** Runs a non-streamed response's parts to their end: the assembly holds the output, with how it ended. */
export async function completeResponse(assembly: ResponseAssembly, generation: GenerationOutput): Promise<GenerationOutcome> {
  for await (const batch of partBatches(generation)) for (const part of batch) assembly.push(part);
  assembly.close();
  return { finishReason: assembly.finishReason ?? "cancelled", usage: generation.usage() };
}

/**
 * The stream's events from the generation's parts: `response.created` and `response.in_progress`
 * first, then each item's events. The terminal event is the caller's (written once the response
 * is settled and stored). The events of one part, or of one batch of parts (`partBatches`), come as one batch. Fills `outcome` once the generation finished.
 */
export async function* streamResponse(assembly: ResponseAssembly, generation: GenerationOutput, outcome: { value?: GenerationOutcome }): AsyncGenerator<ResponseStreamEvent | ResponseStreamEvent[]> {
  const started = assembly.resource({ status: "in_progress" });
  yield [assembly.number({ type: "response.created", response: started }), assembly.number({ type: "response.in_progress", response: started })];
  for await (const batch of partBatches(generation)) {
    // One part's events (an item, its part and its first delta), and a batch's parts', leave together.
    const events: ResponseStreamEvent[] = [];
    for (const part of batch) for (const event of assembly.push(part)) events.push(assembly.number(event));
    if (events.length === 1) yield events[0]!;
    else if (events.length > 1) yield events;
  }
  outcome.value = { finishReason: assembly.finishReason ?? "cancelled", usage: generation.usage() };
}
