/**
 * Generation parts → Anthropic's message and stream: blocks open and close in order (indices 0,
 * 1, … never interleaved), tool input starts as `{}` and follows as JSON fragments, the stop
 * reason names the stop sequence only when the engine said which, and usage counts the prompt's
 * cached part once, in `cache_read_input_tokens`.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { GenerationUsage, StreamPart } from "../generation.ts";
import { MessageAssembly, messageUsageOf, stopReasonOf, streamMessage } from "./from-generation.ts";
import type { MessageStreamEvent } from "./message.ts";

const usage: GenerationUsage = { source: "counted", promptTokens: 30, cachedPromptTokens: 12, completionTokens: 7 };

/** A generation that yields `parts`, with `usage`. */
function generationOf(parts: StreamPart[]) {
  return {
    parts: (async function* () {
      yield* parts;
    })(),
    usage: () => usage,
  };
}

const finish = (reason: "stop" | "length" | "tool_calls", stopSequence?: string): StreamPart => ({
  type: "finish",
  choice: 0,
  reason,
  usage: { promptTokens: 30, cachedPromptTokens: 12, completionTokens: 7 },
  ...(stopSequence !== undefined ? { stopSequence } : {}),
});

describe("MessageAssembly and streamMessage", () => {
  it("streams thinking, text and a tool use as blocks 0, 1, 2, each closed before the next opens, message_start first", async () => {
    const assembly = new MessageAssembly({ id: "msg_1", model: "tiny", promptTokens: 30 });
    const parts: StreamPart[] = [
      { type: "reasoning-delta", choice: 0, text: "Hmm" },
      { type: "reasoning-delta", choice: 0, text: "." },
      { type: "text-delta", choice: 0, text: "" },
      { type: "text-delta", choice: 0, text: "Let me look." },
      { type: "tool-call-start", choice: 0, index: 0, id: "call_7", name: "get_weather" },
      { type: "tool-call-delta", choice: 0, index: 0, argumentsDelta: '{"city":' },
      { type: "tool-call-delta", choice: 0, index: 0, argumentsDelta: '"Paris"}' },
      { type: "text-delta", choice: 1, text: "another choice, ignored" },
      finish("tool_calls"),
    ];
    const outcome: { value?: { finishReason: string } } = {};
    const events: MessageStreamEvent[] = [];
    for await (const batch of streamMessage(assembly, generationOf(parts), outcome as never)) events.push(...(Array.isArray(batch) ? batch : [batch]));
    const stop = assembly.stop(outcome as never);
    events.push(...assembly.messageEnd(stop.reason!, stop.sequence, usage));
    assert.deepEqual(
      events.map((event) => `${event.type}${"index" in event ? ` ${event.index}` : ""}${event.type === "content_block_delta" ? ` ${event.delta.type}` : ""}`),
      [
        "message_start",
        "content_block_start 0",
        "content_block_delta 0 thinking_delta",
        "content_block_delta 0 thinking_delta",
        "content_block_stop 0",
        "content_block_start 1",
        "content_block_delta 1 text_delta",
        "content_block_stop 1",
        "content_block_start 2",
        "content_block_delta 2 input_json_delta",
        "content_block_delta 2 input_json_delta",
        "content_block_stop 2",
        "message_delta",
        "message_stop",
      ],
    );
    assert.deepEqual(events[0], {
      type: "message_start",
      message: { id: "msg_1", type: "message", role: "assistant", content: [], model: "tiny", stop_reason: null, stop_sequence: null, usage: { input_tokens: 18, cache_creation_input_tokens: 0, cache_read_input_tokens: 12, output_tokens: 0, service_tier: "standard" } },
    });
    assert.deepEqual(events[8], { type: "content_block_start", index: 2, content_block: { type: "tool_use", id: "toolu_call_7", name: "get_weather", input: {} } });
    assert.deepEqual(events.at(-2), { type: "message_delta", delta: { stop_reason: "tool_use", stop_sequence: null }, usage: { input_tokens: 18, cache_creation_input_tokens: 0, cache_read_input_tokens: 12, output_tokens: 7 } });
    const message = assembly.message(stop.reason!, stop.sequence, usage);
    assert.deepEqual(message.content, [
      { type: "thinking", thinking: "Hmm.", signature: "" },
      { type: "text", text: "Let me look." },
      { type: "tool_use", id: "toolu_call_7", name: "get_weather", input: { city: "Paris" } },
    ]);
  });

  it("gives a tool use cut short an empty input", () => {
    const assembly = new MessageAssembly({ id: "msg_2", model: "tiny" });
    assembly.push({ type: "tool-call-start", choice: 0, index: 0, id: "call_1", name: "f" });
    assembly.push({ type: "tool-call-delta", choice: 0, index: 0, argumentsDelta: '{"a": "unfinish' });
    assembly.push(finish("length"));
    const stop = assembly.stop(undefined);
    assert.equal(stop.reason, "max_tokens");
    assert.deepEqual(assembly.message(stop.reason!, stop.sequence, usage).content, [{ type: "tool_use", id: "toolu_call_1", name: "f", input: {} }]);
  });

  it("names the stop sequence only when the engine said which; never guesses", () => {
    const said = new MessageAssembly({ id: "msg_3", model: "tiny" });
    said.push(finish("stop", "\n\nHuman:"));
    assert.deepEqual(said.stop(undefined), { reason: "stop_sequence", sequence: "\n\nHuman:" });
    const silent = new MessageAssembly({ id: "msg_4", model: "tiny" });
    silent.push(finish("stop"));
    assert.deepEqual(silent.stop(undefined), { reason: "end_turn", sequence: null });
    assert.deepEqual(
      (["stop", "length", "tool_calls", "content_filter", "cancelled"] as const).map((reason) => stopReasonOf(reason, undefined)),
      ["end_turn", "max_tokens", "tool_use", "refusal", undefined],
    );
  });

  it("counts each prompt token once: input_tokens excludes the cached part", () => {
    assert.deepEqual(messageUsageOf(usage), { input_tokens: 18, cache_creation_input_tokens: 0, cache_read_input_tokens: 12, output_tokens: 7 });
  });
});
