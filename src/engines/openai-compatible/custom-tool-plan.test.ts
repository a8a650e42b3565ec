/**
 * The grammar reply made one call (`GrammarReplyCall`): how its finishes read. A reply that
 * stopped is the whole call and ends `tool_calls`, naming no stop sequence (a finish names one
 * only with reason `stop`); other endings pass as they came.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { StreamPart } from "../engine.ts";
import { GrammarReplyCall } from "./custom-tool-plan.ts";

const usage = { promptTokens: 5, cachedPromptTokens: 0, completionTokens: 2 };

test("a grammar reply that ended on a stop string is the call: tool_calls, with no stop sequence", () => {
  const call = new GrammarReplyCall("word");
  const parts: StreamPart[] = [
    ...call.transform({ type: "text-delta", choice: 0, text: "abc" }),
    ...call.transform({ type: "finish", choice: 0, reason: "stop", usage, stopSequence: "." }),
  ];
  assert.deepEqual(parts.map((part) => part.type), ["tool-call-start", "tool-call-delta", "finish"]);
  assert.deepEqual(parts.at(-1), { type: "finish", choice: 0, reason: "tool_calls", usage });
});

test("a grammar reply cut by its length passes its finish as it came", () => {
  const call = new GrammarReplyCall("word");
  call.transform({ type: "text-delta", choice: 0, text: "abc" });
  assert.deepEqual(call.transform({ type: "finish", choice: 0, reason: "length", usage }), [{ type: "finish", choice: 0, reason: "length", usage }]);
});
