/**
 * Chat completion replies built from scripted generation parts: a generation that groups its
 * parts (`batches`, an upstream's read) streams each group's chunks as one batch, one that does
 * not streams a chunk a part, and both read the same as a whole completion.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { GenerationOutcome, GenerationOutput, StreamPart } from "../generation.ts";
import type { ChatCompletionChunk } from "./response.ts";
import { completeChatCompletion, streamChatCompletion, type ChatReplyShape } from "./from-generation.ts";

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

const shape: ChatReplyShape = { id: "chatcmpl-1", created: 1, model: "m", choices: 1, includeUsage: true, toolCallsOnly: false, logprobs: false, serviceTier: "default" };

async function streamed(generation: GenerationOutput): Promise<{ steps: (ChatCompletionChunk | readonly ChatCompletionChunk[])[]; outcome: GenerationOutcome | undefined }> {
  const outcome: { value?: GenerationOutcome } = {};
  const steps: (ChatCompletionChunk | readonly ChatCompletionChunk[])[] = [];
  for await (const step of streamChatCompletion(shape, generation, outcome)) steps.push(step);
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
    const fromGroups = await completeChatCompletion(shape, scripted(true));
    const fromParts = await completeChatCompletion(shape, scripted(false));
    assert.deepEqual(fromGroups, fromParts);
    assert.equal(fromGroups.completion.choices[0]!.message.content, "Hello!");
    assert.equal(fromGroups.completion.choices[0]!.finish_reason, "stop");
  });
});
