/**
 * The streaming events of the Responses API: every event of the Open Responses specification,
 * and OpenAI's events for reasoning text and custom tool calls. Each carries `sequence_number`,
 * counted from 0 and increased by one per event of the stream.
 *
 * The grammar a stream follows: `response.created` first (`response.queued` next for a background
 * response), then `response.in_progress`; per output item `response.output_item.added` … its
 * `.done`; inside an item with content, per part `response.content_part.added`, its deltas, the
 * `.done` of its text, `response.content_part.done`; one terminal event last
 * (`response.completed`, `response.incomplete` or `response.failed`, the last preceded by an
 * `error` event when the failure came from an error), whose response is the final resource.
 */
import type {
  Logprob,
  OutputItem,
  OutputTextPart,
  ReasoningTextPart,
  RefusalPart,
  ResponseResource,
  SummaryTextPart,
} from "./resource.ts";

/** A content part as `response.content_part.added`/`.done` carries it. */
export type StreamedContentPart = OutputTextPart | RefusalPart | ReasoningTextPart;

type Sequenced = { sequence_number: number };

/** The events that carry the whole resource (a snapshot at that moment). */
export type ResponseLifecycleEvent = Sequenced & {
  type: "response.created" | "response.queued" | "response.in_progress" | "response.completed" | "response.incomplete" | "response.failed";
  response: ResponseResource;
};

export type ResponseCreatedEvent = ResponseLifecycleEvent & { type: "response.created" };
export type ResponseQueuedEvent = ResponseLifecycleEvent & { type: "response.queued" };
export type ResponseInProgressEvent = ResponseLifecycleEvent & { type: "response.in_progress" };
export type ResponseCompletedEvent = ResponseLifecycleEvent & { type: "response.completed" };
export type ResponseIncompleteEvent = ResponseLifecycleEvent & { type: "response.incomplete" };
export type ResponseFailedEvent = ResponseLifecycleEvent & { type: "response.failed" };

export type OutputItemAddedEvent = Sequenced & { type: "response.output_item.added"; output_index: number; item: OutputItem };
export type OutputItemDoneEvent = Sequenced & { type: "response.output_item.done"; output_index: number; item: OutputItem };

/** Where a content event belongs: the item (by id and place) and the part's place in it. */
type InContentPart = Sequenced & { item_id: string; output_index: number; content_index: number };

export type ContentPartAddedEvent = InContentPart & { type: "response.content_part.added"; part: StreamedContentPart };
export type ContentPartDoneEvent = InContentPart & { type: "response.content_part.done"; part: StreamedContentPart };

export type OutputTextDeltaEvent = InContentPart & {
  type: "response.output_text.delta";
  delta: string;
  /** The tokens of this delta, when log probabilities were asked for; else empty. */
  logprobs: Logprob[];
  /** Random padding against length side channels (`stream_options.include_obfuscation`). */
  obfuscation?: string;
};
export type OutputTextDoneEvent = InContentPart & { type: "response.output_text.done"; text: string; logprobs: Logprob[] };
export type OutputTextAnnotationAddedEvent = InContentPart & {
  type: "response.output_text.annotation.added";
  annotation_index: number;
  annotation: unknown;
};

export type RefusalDeltaEvent = InContentPart & { type: "response.refusal.delta"; delta: string };
export type RefusalDoneEvent = InContentPart & { type: "response.refusal.done"; refusal: string };

/**
 * Reasoning text, in a `reasoning_text` content part of a reasoning item. OpenAI names these
 * `response.reasoning_text.delta`/`.done`; the Open Responses specification names them
 * `response.reasoning.delta`/`.done`, with the same fields.
 */
export type ReasoningTextDeltaEvent = InContentPart & { type: "response.reasoning_text.delta" | "response.reasoning.delta"; delta: string; obfuscation?: string };
export type ReasoningTextDoneEvent = InContentPart & { type: "response.reasoning_text.done" | "response.reasoning.done"; text: string };

/** Where a reasoning summary event belongs: the item and the summary part's place in it. */
type InSummaryPart = Sequenced & { item_id: string; output_index: number; summary_index: number };

export type ReasoningSummaryPartAddedEvent = InSummaryPart & { type: "response.reasoning_summary_part.added"; part: SummaryTextPart };
export type ReasoningSummaryPartDoneEvent = InSummaryPart & { type: "response.reasoning_summary_part.done"; part: SummaryTextPart };
export type ReasoningSummaryTextDeltaEvent = InSummaryPart & { type: "response.reasoning_summary_text.delta"; delta: string; obfuscation?: string };
export type ReasoningSummaryTextDoneEvent = InSummaryPart & { type: "response.reasoning_summary_text.done"; text: string };

/** Where a tool call event belongs: the call item, by id and place. */
type InItem = Sequenced & { item_id: string; output_index: number };

export type FunctionCallArgumentsDeltaEvent = InItem & { type: "response.function_call_arguments.delta"; delta: string; obfuscation?: string };
export type FunctionCallArgumentsDoneEvent = InItem & { type: "response.function_call_arguments.done"; arguments: string };

export type CustomToolCallInputDeltaEvent = InItem & { type: "response.custom_tool_call_input.delta"; delta: string; obfuscation?: string };
export type CustomToolCallInputDoneEvent = InItem & { type: "response.custom_tool_call_input.done"; input: string };

/** An error inside a stream (followed by `response.failed`): the same fields as an error body's. */
export type ErrorEvent = Sequenced & {
  type: "error";
  error: { type: string; code: string | null; message: string; param: string | null };
};

/** Every event a Responses stream may hold. */
export type ResponseStreamEvent =
  | ResponseLifecycleEvent
  | OutputItemAddedEvent
  | OutputItemDoneEvent
  | ContentPartAddedEvent
  | ContentPartDoneEvent
  | OutputTextDeltaEvent
  | OutputTextDoneEvent
  | OutputTextAnnotationAddedEvent
  | RefusalDeltaEvent
  | RefusalDoneEvent
  | ReasoningTextDeltaEvent
  | ReasoningTextDoneEvent
  | ReasoningSummaryPartAddedEvent
  | ReasoningSummaryPartDoneEvent
  | ReasoningSummaryTextDeltaEvent
  | ReasoningSummaryTextDoneEvent
  | FunctionCallArgumentsDeltaEvent
  | FunctionCallArgumentsDoneEvent
  | CustomToolCallInputDeltaEvent
  | CustomToolCallInputDoneEvent
  | ErrorEvent;

export type ResponseStreamEventType = ResponseStreamEvent["type"];

/** The events that end a stream. */
export const TERMINAL_EVENT_TYPES = ["response.completed", "response.incomplete", "response.failed"] as const;

/** An event without its number, as a producer writes it before the sequencer numbers it. */
export type UnsequencedEvent = ResponseStreamEvent extends infer Event ? (Event extends ResponseStreamEvent ? Omit<Event, "sequence_number"> : never) : never;

/**
 * Numbers a stream's events from 0, one more per event: the one place a stream's
 * `sequence_number`s are given, so they cannot skip or repeat.
 */
export function createEventSequencer(): (event: UnsequencedEvent) => ResponseStreamEvent {
  let next = 0;
  // `type` first, then the number, then the rest: the field order of OpenAI's events.
  return (event) => {
    const { type, ...rest } = event;
    return { type, sequence_number: next++, ...rest } as ResponseStreamEvent;
  };
}
