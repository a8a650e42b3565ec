/**
 * Generation parts → the Messages API: content blocks (text, thinking, tool use), the stream's
 * events in Anthropic's grammar, the final `message`. The Messages dialect's other half of the
 * generation core; free of HTTP and billing.
 *
 * One `MessageAssembly` follows one message: `push` turns each part into its events (a block is
 * opened with `content_block_start`, grown with deltas, closed with `content_block_stop` before
 * the next opens: indices run 0, 1, … and never interleave; a tool use starts as `input: {}` and
 * its JSON follows as `input_json_delta` fragments). `messageStart` is the stream's first event,
 * sent with the first part (the prompt has been read by then, so its cached part is known);
 * `messageEnd` the last two (`message_delta` with the stop reason and the final usage, `message_stop`).
 */
import type { ServiceTier } from "../service-tiers.ts";
import { partBatches, type EngineFinishReason, type GenerationOutcome, type GenerationOutput, type GenerationUsage, type StreamPart } from "../generation.ts";
import { toolUseIdOf, type ContentBlock, type Message, type MessageStreamEvent, type MessageUsage, type StopReason } from "./message.ts";

/** What a message says besides its generated content. */
export type MessageShape = {
  /** `msg_…`. */
  id: string;
  /** As the catalog names it. */
  model: string;
  /** The prompt's tokens as prepared (exact, or an upper bound upstream): set once the prompt is prepared, for `message_start`. */
  promptTokens?: number;
  /** The tier that serves it; `default` when absent (all a Messages request can ask for). */
  serviceTier?: ServiceTier;
};

/** Anthropic's name of the tier that served a message: `priority`, or `standard` (the default and flex tiers). */
export function anthropicServiceTier(tier: ServiceTier | undefined): "standard" | "priority" {
  return tier === "priority" ? "priority" : "standard";
}

/** Anthropic's usage from the engine's counts: `input_tokens` excludes the cached part, which is `cache_read_input_tokens`. */
export function messageUsageOf(usage: Pick<GenerationUsage, "promptTokens" | "cachedPromptTokens" | "completionTokens">): MessageUsage {
  const cached = Math.min(usage.cachedPromptTokens, usage.promptTokens);
  return { input_tokens: usage.promptTokens - cached, cache_creation_input_tokens: 0, cache_read_input_tokens: cached, output_tokens: usage.completionTokens };
}

/**
 * The stop reason of a finished generation. `stop` is `stop_sequence` only when the engine said
 * which sequence it met (`finish.stopSequence`); otherwise `end_turn`, never a guess.
 * `cancelled` has none (the caller answers an error instead).
 */
export function stopReasonOf(reason: EngineFinishReason, stopSequence: string | undefined): StopReason | undefined {
  switch (reason) {
    case "stop":
      return stopSequence !== undefined ? "stop_sequence" : "end_turn";
    case "length":
      return "max_tokens";
    case "tool_calls":
      return "tool_use";
    case "content_filter":
      return "refusal";
    case "cancelled":
      return undefined;
  }
}

type OpenBlock = { kind: "text"; text: string } | { kind: "thinking"; text: string } | { kind: "tool_use"; id: string; name: string; json: string };

/** A tool use's input: its JSON object, or `{}` when the model's JSON was cut short or is not an object. */
function inputOf(json: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(json);
    return value !== null && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/** One message's content, built part by part, and the events each part makes. Only the first choice is read (the API has no `n`). */
export class MessageAssembly {
  readonly shape: MessageShape;
  readonly #blocks: ContentBlock[] = [];
  #open: OpenBlock | undefined;
  #finish: { reason: EngineFinishReason; stopSequence?: string } | undefined;
  #started = false;

  constructor(shape: MessageShape) {
    this.shape = shape;
  }

  /** Whether `message_start` was sent. */
  get started(): boolean {
    return this.#started;
  }

  /** How the generation finished, once it did. */
  get finishReason(): EngineFinishReason | undefined {
    return this.#finish?.reason;
  }

  /** The stream's `message_start`: the message with no content yet, and its input usage (`usage`: the generation's so far). */
  messageStart(usage: GenerationUsage): MessageStreamEvent {
    this.#started = true;
    const prompt = this.shape.promptTokens ?? usage.promptTokens;
    return {
      type: "message_start",
      message: {
        ...this.#frame([], null, null),
        usage: { ...messageUsageOf({ promptTokens: prompt, cachedPromptTokens: usage.cachedPromptTokens, completionTokens: 0 }), service_tier: anthropicServiceTier(this.shape.serviceTier) },
      },
    };
  }

  /** The events of one generation part. */
  push(part: StreamPart): MessageStreamEvent[] {
    if (part.choice !== 0) return [];
    switch (part.type) {
      case "text-delta":
        return part.text === "" ? [] : this.#grow("text", part.text);
      case "reasoning-delta":
        return part.text === "" ? [] : this.#grow("thinking", part.text);
      case "tool-call-start": {
        const events = this.close();
        const open: OpenBlock = { kind: "tool_use", id: toolUseIdOf(part.id), name: part.name, json: "" };
        this.#open = open;
        events.push({ type: "content_block_start", index: this.#blocks.length, content_block: { type: "tool_use", id: open.id, name: open.name, input: {} } });
        return events;
      }
      case "tool-call-delta": {
        const open = this.#open;
        if (open?.kind !== "tool_use" || part.argumentsDelta === "") return [];
        open.json += part.argumentsDelta;
        return [{ type: "content_block_delta", index: this.#blocks.length, delta: { type: "input_json_delta", partial_json: part.argumentsDelta } }];
      }
      case "finish":
        this.#finish = part.stopSequence === undefined ? { reason: part.reason } : { reason: part.reason, stopSequence: part.stopSequence };
        return this.close();
    }
  }

  /** Closes the open block (`content_block_stop`), if any; it joins the content. */
  close(): MessageStreamEvent[] {
    const open = this.#open;
    if (open === undefined) return [];
    this.#open = undefined;
    const index = this.#blocks.length;
    this.#blocks.push(this.#blockOf(open));
    return [{ type: "content_block_stop", index }];
  }

  /** The stop reason and the stop sequence met (undefined reason: cut short, no normal end). */
  stop(outcome: GenerationOutcome | undefined): { reason: StopReason | undefined; sequence: string | null } {
    const reason = outcome?.finishReason ?? this.#finish?.reason ?? "cancelled";
    const sequence = reason === "stop" ? this.#finish?.stopSequence : undefined;
    return { reason: stopReasonOf(reason, sequence), sequence: sequence ?? null };
  }

  /** The stream's last events: `message_delta` (stop reason, final usage) and `message_stop`. */
  messageEnd(stopReason: StopReason, stopSequence: string | null, usage: GenerationUsage): MessageStreamEvent[] {
    return [{ type: "message_delta", delta: { stop_reason: stopReason, stop_sequence: stopSequence }, usage: messageUsageOf(usage) }, { type: "message_stop" }];
  }

  /** The whole message, once the generation ended normally. */
  message(stopReason: StopReason, stopSequence: string | null, usage: GenerationUsage): Message {
    return { ...this.#frame([...this.#blocks], stopReason, stopSequence), usage: { ...messageUsageOf(usage), service_tier: anthropicServiceTier(this.shape.serviceTier) } };
  }

  #frame(content: ContentBlock[], stopReason: StopReason | null, stopSequence: string | null): Omit<Message, "usage"> {
    return { id: this.shape.id, type: "message", role: "assistant", content, model: this.shape.model, stop_reason: stopReason, stop_sequence: stopSequence };
  }

  /** Text or thinking: into the open block of that kind, or a new one (the open block of another kind closed first). */
  #grow(kind: "text" | "thinking", text: string): MessageStreamEvent[] {
    const events: MessageStreamEvent[] = [];
    const current = this.#open;
    let open: { kind: "text" | "thinking"; text: string };
    if (current !== undefined && current.kind === kind) open = current;
    else {
      events.push(...this.close());
      open = { kind, text: "" };
      this.#open = open;
      const block: ContentBlock = kind === "text" ? { type: "text", text: "" } : { type: "thinking", thinking: "", signature: "" };
      events.push({ type: "content_block_start", index: this.#blocks.length, content_block: block });
    }
    open.text += text;
    const index = this.#blocks.length;
    events.push(kind === "text" ? { type: "content_block_delta", index, delta: { type: "text_delta", text } } : { type: "content_block_delta", index, delta: { type: "thinking_delta", thinking: text } });
    return events;
  }

  #blockOf(open: OpenBlock): ContentBlock {
    switch (open.kind) {
      case "text":
        return { type: "text", text: open.text };
      case "thinking":
        return { type: "thinking", thinking: open.text, signature: "" };
      case "tool_use":
        return { type: "tool_use", id: open.id, name: open.name, input: inputOf(open.json) };
    }
  }
}

/** Runs a non-streamed message's parts to their end: the assembly holds the content, with how it ended. */
export async function completeMessage(assembly: MessageAssembly, generation: GenerationOutput): Promise<GenerationOutcome> {
  for await (const batch of partBatches(generation)) for (const part of batch) assembly.push(part);
  assembly.close();
  return { finishReason: assembly.finishReason ?? "cancelled", usage: generation.usage() };
}

/**
 * The stream's events from the generation's parts: `message_start` with the first part's events,
 * then each part's. The last events are the caller's (`messageEnd`, written once the request is
 * settled). The events of one part, or of one batch of parts (`partBatches`), come as one batch. Fills `outcome` once the generation finished.
 */
export async function* streamMessage(assembly: MessageAssembly, generation: GenerationOutput, outcome: { value?: GenerationOutcome }): AsyncGenerator<MessageStreamEvent | MessageStreamEvent[]> {
  for await (const batch of partBatches(generation)) {
    const events: MessageStreamEvent[] = [];
    for (const part of batch) {
      const made = assembly.push(part);
      if (!assembly.started) made.unshift(assembly.messageStart(generation.usage()));
      for (const event of made) events.push(event);
    }
    if (events.length === 1) yield events[0]!;
    else if (events.length > 1) yield events;
  }
  outcome.value = { finishReason: assembly.finishReason ?? "cancelled", usage: generation.usage() };
}
