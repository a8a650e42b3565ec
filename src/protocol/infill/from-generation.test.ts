/**
 * llama-server's `/infill` reply built from scripted generation parts: `n_indent` cuts the
 * middle as llama-server's `process_token` does (the check starts on the second delta after the
 * first line break, and keeps the line break and the short line's indentation), stop types and
 * words, `response_fields` as flat paths, and a stream's partial events then its final one.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { GenerationOutcome, GenerationOutput, StreamPart, TokenUsage } from "../generation.ts";
import { completeInfill, pickResponseFields, streamInfill, type InfillReplyShape } from "./from-generation.ts";

const USAGE: TokenUsage = { promptTokens: 10, cachedPromptTokens: 4, completionTokens: 0 };

/** A generation that yields these text deltas (one token each), then a finish with `reason`; records whether it was read to the end. */
function scripted(deltas: string[], finish: Extract<StreamPart, { type: "finish" }>["reason"], stopSequence?: string): GenerationOutput & { readToEnd: () => boolean } {
  let completionTokens = 0;
  let ended = false;
  async function* parts(): AsyncGenerator<StreamPart> {
    for (const text of deltas) {
      completionTokens += 1;
      yield { type: "text-delta", choice: 0, text };
    }
    yield { type: "finish", choice: 0, reason: finish, usage: { ...USAGE, completionTokens }, ...(stopSequence !== undefined ? { stopSequence } : {}) };
    ended = true;
  }
  return { parts: parts(), usage: () => ({ ...USAGE, completionTokens, source: "counted" }), readToEnd: () => ended };
}

const shape = (fields: Partial<InfillReplyShape> = {}): InfillReplyShape => ({ model: "m", nIndent: 0, maxPredictMs: 0, startedAt: performance.now(), ...fields });

describe("infill replies", () => {
  it("answers llama-server's result: content, counts, stop type, timings", async () => {
    const { reply, outcome } = await completeInfill(shape(), scripted(["a", "b\n", "c"], "length"));
    assert.equal(reply.content, "ab\nc");
    assert.equal(reply.stop, true);
    assert.equal(reply.tokens_predicted, 3);
    assert.equal(reply.tokens_evaluated, 10);
    assert.equal(reply.stop_type, "limit");
    assert.equal(reply.has_new_line, true);
    assert.equal(reply.tokens_cached, 13);
    assert.deepEqual([(reply.timings as Record<string, number>).cache_n, (reply.timings as Record<string, number>).prompt_n, (reply.timings as Record<string, number>).predicted_n], [4, 6, 3]);
    assert.equal(outcome.finishReason, "length");
    const eos = await completeInfill(shape(), scripted(["a"], "stop"));
    assert.deepEqual([eos.reply.stop_type, eos.reply.stopping_word], ["eos", ""]);
    const word = await completeInfill(shape(), scripted(["a"], "stop", "END"));
    assert.deepEqual([word.reply.stop_type, word.reply.stopping_word], ["word", "END"]);
    assert.equal(word.outcome.stopSequence, "END");
  });

  it("cuts at a line indented less than n_indent, keeping the line break and that line's indentation, and stops reading", async () => {
    // "if x:\n" then an indented line (kept), then a line at indentation 1 < 4: cut before its "r".
    const generation = scripted(["if", " x:\n", "    y", " = 1\n", " ", "r", "eturn", " y"], "length");
    const { reply, outcome } = await completeInfill(shape({ nIndent: 4 }), generation);
    assert.equal(reply.content, "if x:\n    y = 1\n ");
    assert.equal(reply.stop_type, "limit");
    assert.equal(reply.tokens_predicted, 6, "the tokens generated up to the cut are counted (and billed)");
    assert.equal(generation.readToEnd(), false, "the generation is cut, not read to its end");
    assert.equal(outcome.finishReason, "length");
    const loose = await completeInfill(shape({ nIndent: 1 }), scripted(["if", " x:\n", "    y", " = 1\n", " ", "r", "eturn"], "length"));
    assert.equal(loose.reply.content, "if x:\n    y = 1\n return", "every line indented at least 1: nothing cut");
  });

  it("keeps only response_fields' paths, as flat keys (llama.vim's timings/prompt_n)", async () => {
    const { reply } = await completeInfill(shape({ responseFields: ["content", "timings/prompt_n", "timings/nothing", "truncated"] }), scripted(["a"], "stop"));
    assert.deepEqual(Object.keys(reply).sort(), ["content", "timings/prompt_n", "truncated"]);
    assert.equal(reply["timings/prompt_n"], 6);
    assert.deepEqual(pickResponseFields({ a: { b: [1] } }, ["a/b/0", "a/b"]), { "a/b": [1] }, "arrays are not walked, as llama-server");
  });

  it("streams partial events (stop false) and then the final result with empty content", async () => {
    const outcome: { value?: GenerationOutcome } = {};
    const events: Array<Record<string, unknown>> = [];
    for await (const event of streamInfill(shape(), scripted(["a", "b"], "stop"), outcome)) events.push(event as Record<string, unknown>);
    assert.deepEqual(events.slice(0, 2).map((event) => [event.content, event.stop, event.tokens_predicted]), [["a", false, 1], ["b", false, 2]]);
    const last = events.at(-1)!;
    assert.deepEqual([last.content, last.stop, last.stop_type, last.tokens_predicted], ["", true, "eos", 2]);
    assert.equal(outcome.value!.finishReason, "stop");
  });
});
