/**
 * Chat completion replies built from scripted generation parts: a generation that groups its
 * parts (`batches`, an upstream's read) streams each group's chunks as one batch, one that does
 * not streams a chunk a part, and both read the same as a whole completion.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { GenerationOutcome, GenerationOutput, StreamPart } from "../generation.ts";
import { JsonText } from "../json-text.ts";
import type { ChatCompletionChunk } from "./response.ts";
import { completeChatCompletion, streamChatCompletion, type ChatReplyShape, type ChatStreamEvent } from "./from-generation.ts";

const USAGE = { promptTokens: 7, cachedPromptTokens: 0, completionTokens: 3 };

const GROUPS: StreamPart[][] = [
  [
    { type: "text-delta", choice: 0, text: "Hel" },
    { type: "text-delta", choice: 0, text: "lo" },
  ],
  [
    { type: "text-delta", choice: 0, text: "!" },
    { type: "finish", choice: 0, reason: "stop", usage: USAGE },
  ],
];

/** The scripted parts, grouped (`batches`) or one by one only. */
function scripted(grouped: boolean): GenerationOutput {
  async function* parts(): AsyncGenerator<StreamPart> {
    for (const group of GROUPS) yield* group;
  }
  async function* batches(): AsyncGenerator<readonly StreamPart[]> {
    yield* GROUPS;
  }
  return { parts: parts(), ...(grouped ? { batches: batches() } : {}), usage: () => ({ ...USAGE, source: "upstream" }) };
}

const SHAPE: ChatReplyShape = { id: "chatcmpl-1", created: 1, model: "m", choices: 1, includeUsage: true, toolCallsOnly: false, logprobs: false, serviceTier: "default" };

/** A streamed event as a client reads it. */
const read = (event: ChatStreamEvent): ChatCompletionChunk => (event instanceof JsonText ? (JSON.parse(event.json) as ChatCompletionChunk) : event);

async function streamed(generation: GenerationOutput, shape: ChatReplyShape = SHAPE): Promise<{ steps: (ChatCompletionChunk | readonly ChatCompletionChunk[])[]; outcome: GenerationOutcome | undefined }> {
  const outcome: { value?: GenerationOutcome } = {};
  const steps: (ChatCompletionChunk | readonly ChatCompletionChunk[])[] = [];
  for await (const step of streamChatCompletion(shape, generation, outcome)) steps.push(Array.isArray(step) ? step.map(read) : read(step as ChatStreamEvent));
  return { steps, outcome: outcome.value };
}

const contentOf = (chunk: ChatCompletionChunk) => chunk.choices[0]?.delta.content ?? null;

describe("chat completion chunks", () => {
  it("streams a group of parts as one batch of chunks, each with the reply's id and model", async () => {
    const { steps, outcome } = await streamed(scripted(true));
    assert.equal(steps.length, 4, "role, two batches, usage");
    assert.ok(!Array.isArray(steps[0]));
    assert.deepEqual((steps[0] as ChatCompletionChunk).choices[0]!.delta, { role: "assistant", content: "", refusal: null });
    const [first, second] = [steps[1], steps[2]] as (readonly ChatCompletionChunk[])[];
    assert.deepEqual(first!.map(contentOf), ["Hel", "lo"]);
    assert.deepEqual(second!.map(contentOf), ["!", null]);
    assert.equal(second![1]!.choices[0]!.finish_reason, "stop");
    for (const chunk of [...first!, ...second!]) {
      assert.equal(chunk.id, "chatcmpl-1");
      assert.equal(chunk.model, "m");
      assert.equal(chunk.usage, null);
    }
    assert.deepEqual((steps[3] as ChatCompletionChunk).usage, { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0 } });
    assert.deepEqual(outcome, { finishReason: "stop", usage: { ...USAGE, source: "upstream" } });
  });

  it("streams a chunk a part from a generation without groups: the same chunks", async () => {
    const grouped = (await streamed(scripted(true))).steps.flat();
    const { steps } = await streamed(scripted(false));
    assert.ok(steps.every((step) => !Array.isArray(step)));
    assert.deepEqual(steps, grouped);
  });

  it("reads a whole completion the same from groups and from parts", async () => {
    const fromGroups = await completeChatCompletion(SHAPE, scripted(true));
    const fromParts = await completeChatCompletion(SHAPE, scripted(false));
    assert.deepEqual(fromGroups, fromParts);
    assert.equal(fromGroups.completion.choices[0]!.message.content, "Hello!");
    assert.equal(fromGroups.completion.choices[0]!.finish_reason, "stop");
  });

  it("writes each chunk out as stringifying the whole chunk would, byte for byte, for every kind of part", async () => {
    const parts: StreamPart[] = [
      { type: "reasoning-delta", choice: 0, text: "Hm \"quoted\" \u2028" },
      { type: "text-delta", choice: 1, text: "Hi", logprobs: [{ token: "Hi", logprob: -0.5, bytes: [72, 105], topLogprobs: [{ token: "Hey", logprob: -1, bytes: [72, 101, 121] }] }] },
      { type: "tool-call-start", choice: 0, index: 0, id: "call_1", name: "get_weather" },
      { type: "tool-call-delta", choice: 0, index: 0, argumentsDelta: '{"city":' },
      { type: "finish", choice: 0, reason: "tool_calls", usage: USAGE },
      { type: "finish", choice: 1, reason: "length", usage: USAGE },
    ];
    for (const shape of [
      { ...SHAPE, choices: 2 },
      { ...SHAPE, choices: 2, includeUsage: false, toolCallsOnly: true, logprobs: true, model: 'odd "model" name', serviceTier: "flex" as const },
    ]) {
      const generation: GenerationOutput = {
        parts: (async function* () {
          yield* parts;
        })(),
        usage: () => ({ ...USAGE, source: "upstream" }),
      };
      const texts: string[] = [];
      for await (const step of streamChatCompletion(shape, generation, {})) {
        for (const event of Array.isArray(step) ? step : [step as ChatStreamEvent]) texts.push(event instanceof JsonText ? event.json : JSON.stringify(event));
      }
      // What a chunk is: the reply's fields, one choice, and the usage field when asked for.
      const whole = (index: number, delta: object, finish: string | null, logprobs: object | null = null) =>
        JSON.stringify({
          id: shape.id,
          object: "chat.completion.chunk",
          created: shape.created,
          model: shape.model,
          service_tier: shape.serviceTier,
          system_fingerprint: null,
          choices: [{ index, delta, logprobs, finish_reason: finish }],
          ...(shape.includeUsage ? { usage: null } : {}),
        });
      const role = { role: "assistant", content: shape.toolCallsOnly ? null : "", refusal: null };
      const expected = [
        whole(0, role, null),
        whole(1, role, null),
        whole(0, { reasoning_content: 'Hm "quoted" \u2028' }, null),
        whole(1, { content: "Hi" }, null, { content: [{ token: "Hi", logprob: -0.5, bytes: [72, 105], top_logprobs: [{ token: "Hey", logprob: -1, bytes: [72, 101, 121] }] }], refusal: null }),
        whole(0, { tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "get_weather", arguments: "" } }] }, null),
        whole(0, { tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }, null),
        whole(0, {}, "tool_calls"),
        whole(1, {}, "length"),
      ];
      assert.deepEqual(texts.slice(0, expected.length), expected);
      assert.equal(texts.length, expected.length + (shape.includeUsage ? 1 : 0));
    }
  });
});
