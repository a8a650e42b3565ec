import { test } from "node:test";
import assert from "node:assert/strict";
import { ChunkReader, shareOut, UpstreamProtocolError, UpstreamStreamError } from "./chunk-reader.ts";

const reader = (choices = 1, logprobs = false) => new ChunkReader({ choices, promptTokens: 50, logprobs, newCallId: () => "call_new" });
const delta = (value: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({ choices: [{ index: 0, delta: value, ...extra }] });

test("tool-call deltas without index continue the last call; a new id starts another", () => {
  const chunks = reader();
  const parts = [
    ...chunks.read(delta({ tool_calls: [{ id: "a", function: { name: "f", arguments: "{" } }] })),
    ...chunks.read(delta({ tool_calls: [{ function: { arguments: '"x":1}' } }] })),
    ...chunks.read(delta({ tool_calls: [{ id: "b", function: { name: "g", arguments: "{}" } }] })),
  ];
  assert.deepEqual(parts, [
    { type: "tool-call-start", choice: 0, index: 0, id: "a", name: "f" },
    { type: "tool-call-delta", choice: 0, index: 0, argumentsDelta: "{" },
    { type: "tool-call-delta", choice: 0, index: 0, argumentsDelta: '"x":1}' },
    { type: "tool-call-start", choice: 0, index: 1, id: "b", name: "g" },
    { type: "tool-call-delta", choice: 0, index: 1, argumentsDelta: "{}" },
  ]);
});

test("a call whose name comes after its first arguments starts once the name is known", () => {
  const chunks = reader();
  assert.deepEqual(chunks.read(delta({ tool_calls: [{ index: 0, id: "a", function: { arguments: '{"q"' } }] })), []);
  assert.deepEqual(chunks.read(delta({ tool_calls: [{ index: 0, function: { name: "search", arguments: ":1}" } }] })), [
    { type: "tool-call-start", choice: 0, index: 0, id: "a", name: "search" },
    { type: "tool-call-delta", choice: 0, index: 0, argumentsDelta: '{"q"' },
    { type: "tool-call-delta", choice: 0, index: 0, argumentsDelta: ":1}" },
  ]);
});

test("arguments sent as an object are given as their JSON text; a call without id gets one", () => {
  const parts = reader().read(delta({ tool_calls: [{ index: 0, function: { name: "f", arguments: { city: "Oslo" } } }] }));
  assert.deepEqual(parts, [
    { type: "tool-call-start", choice: 0, index: 0, id: "call_new", name: "f" },
    { type: "tool-call-delta", choice: 0, index: 0, argumentsDelta: '{"city":"Oslo"}' },
  ]);
});

test("an error event throws UpstreamStreamError, in OpenAI's shape and vLLM's flat one", () => {
  assert.throws(() => reader().read({ error: { message: "boom", code: 500 } }), UpstreamStreamError);
  assert.throws(() => reader().read({ object: "error", message: "boom", code: 400 }), UpstreamStreamError);
});

test("a chunk for a choice that was not asked for is a protocol error", () => {
  assert.throws(() => reader(1).read({ choices: [{ index: 1, delta: { content: "x" } }] }), UpstreamProtocolError);
  assert.throws(() => reader(1).read("not an object"), UpstreamProtocolError);
});

test("a refusal reads as content; an unknown finish reason as stop; only the first finish reason counts", () => {
  const chunks = reader();
  assert.deepEqual(chunks.read(delta({ refusal: "I can't help with that." })), [{ type: "text-delta", choice: 0, text: "I can't help with that." }]);
  chunks.read(delta({}, { finish_reason: "eos" }));
  chunks.read(delta({}, { finish_reason: "length" }));
  assert.deepEqual(chunks.end().map((part) => part.type === "finish" && part.reason), ["stop"]);
  assert.deepEqual(chunks.end(), [], "finishes are given once");
});

test("log probabilities are dropped unless asked for; null bytes and -inf are filled in", () => {
  const logprobs = { content: [{ token: "é", logprob: null, bytes: null, top_logprobs: [{ token: "e", logprob: -2, bytes: null }] }] };
  assert.deepEqual(reader(1, false).read(delta({ content: "é" }, { logprobs })), [{ type: "text-delta", choice: 0, text: "é" }]);
  assert.deepEqual(reader(1, true).read(delta({ content: "é" }, { logprobs })), [
    { type: "text-delta", choice: 0, text: "é", logprobs: [{ token: "é", logprob: -9999, bytes: [195, 169], topLogprobs: [{ token: "e", logprob: -2, bytes: [101] }] }] },
  ]);
});

test("cancel ends unfinished choices as cancelled with what was counted; finished ones keep their reason", () => {
  const chunks = reader(2);
  chunks.read({ choices: [{ index: 0, delta: { content: "a" } }, { index: 1, delta: { content: "b" }, finish_reason: "stop" }] });
  chunks.read({ choices: [{ index: 0, delta: { content: "c" } }] });
  assert.equal(chunks.allFinished, false);
  const finishes = chunks.cancel();
  assert.deepEqual(finishes, [
    { type: "finish", choice: 0, reason: "cancelled", usage: { promptTokens: 50, cachedPromptTokens: 0, completionTokens: 2 } },
    { type: "finish", choice: 1, reason: "stop", usage: { promptTokens: 50, cachedPromptTokens: 0, completionTokens: 1 } },
  ]);
  assert.deepEqual(chunks.usage(), { source: "estimated", promptTokens: 50, cachedPromptTokens: 0, completionTokens: 3 });
});

/** The finishes a stream of `chunks` ends with, read for a kind whose finishing chunks name the stop string in `field`. */
function finishesOf(field: "stop_reason" | "matched_stop" | undefined, stop: string[], chunks: unknown[], choices = 1) {
  const reader = new ChunkReader({ choices, promptTokens: 50, logprobs: false, ...(field !== undefined ? { stopSequenceField: field, stop } : {}) });
  for (const chunk of chunks) reader.read(chunk);
  return reader.end().map((part) => (part.type === "finish" ? { choice: part.choice, reason: part.reason, stopSequence: part.stopSequence } : part));
}

test("vLLM's stop_reason names the stop string that ended a choice; a token id, null or another kind's field names none", () => {
  const stop = ["\n\n", "THE END"];
  const text = delta({ content: "Once" });
  assert.deepEqual(finishesOf("stop_reason", stop, [text, delta({}, { finish_reason: "stop", stop_reason: "THE END" })]), [{ choice: 0, reason: "stop", stopSequence: "THE END" }]);
  // A stop token's id, or null for the model's own end of text.
  assert.deepEqual(finishesOf("stop_reason", stop, [text, delta({}, { finish_reason: "stop", stop_reason: 128009 })]), [{ choice: 0, reason: "stop", stopSequence: undefined }]);
  assert.deepEqual(finishesOf("stop_reason", stop, [text, delta({}, { finish_reason: "stop", stop_reason: null })]), [{ choice: 0, reason: "stop", stopSequence: undefined }]);
  // Not one of the request's stop strings: not repeated.
  assert.deepEqual(finishesOf("stop_reason", stop, [text, delta({}, { finish_reason: "stop", stop_reason: "</s>" })]), [{ choice: 0, reason: "stop", stopSequence: undefined }]);
  // Only a `stop` names one.
  assert.deepEqual(finishesOf("stop_reason", stop, [text, delta({}, { finish_reason: "length", stop_reason: "THE END" })]), [{ choice: 0, reason: "length", stopSequence: undefined }]);
  // A kind that does not say (llama-server, Ollama, OpenAI): whatever a chunk carries, no finish names one.
  assert.deepEqual(finishesOf(undefined, stop, [text, delta({}, { finish_reason: "stop", stop_reason: "THE END", matched_stop: "THE END" })]), [{ choice: 0, reason: "stop", stopSequence: undefined }]);
  assert.deepEqual(finishesOf("matched_stop", stop, [text, delta({}, { finish_reason: "stop", stop_reason: "THE END" })]), [{ choice: 0, reason: "stop", stopSequence: undefined }]);
});

test("SGLang's matched_stop names the stop string that ended each choice; its end-of-text token id names none", () => {
  const finishes = finishesOf(
    "matched_stop",
    ["."],
    [
      { choices: [{ index: 0, delta: { content: "a" } }, { index: 1, delta: { content: "b" } }] },
      { choices: [{ index: 1, delta: { content: "" }, finish_reason: "stop", matched_stop: "." }] },
      { choices: [{ index: 0, delta: { content: "" }, finish_reason: "stop", matched_stop: 151645 }] },
    ],
    2,
  );
  assert.deepEqual(finishes, [
    { choice: 0, reason: "stop", stopSequence: undefined },
    { choice: 1, reason: "stop", stopSequence: "." },
  ]);
});

test("a choice that finished on a stop string keeps it when the rest is cancelled; the finish has no stopSequence key otherwise", () => {
  const chunks = new ChunkReader({ choices: 2, promptTokens: 50, logprobs: false, stopSequenceField: "stop_reason", stop: ["!"] });
  chunks.read({ choices: [{ index: 0, delta: { content: "a" } }, { index: 1, delta: { content: "b" }, finish_reason: "stop", stop_reason: "!" }] });
  const [first, second] = chunks.cancel();
  assert.ok(first?.type === "finish" && second?.type === "finish");
  assert.equal(first.reason, "cancelled");
  assert.ok(!("stopSequence" in first), "no key where there is nothing to say");
  assert.equal(second.reason, "stop");
  assert.equal(second.stopSequence, "!");
});

test("usage on the finishing chunk (older llama-server) is the final count", () => {
  const chunks = reader();
  chunks.read(delta({ content: "hi" }));
  chunks.read({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }], usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 } });
  assert.deepEqual(chunks.usage(), { source: "upstream", promptTokens: 9, cachedPromptTokens: 0, completionTokens: 2 });
});

test("a running count lower than what was seen does not lower the estimate", () => {
  const chunks = reader();
  chunks.read({ ...delta({ content: "a" }), usage: { prompt_tokens: 7, completion_tokens: 1 } });
  chunks.read(delta({ content: "b" }));
  chunks.read(delta({ content: "c" }));
  assert.deepEqual(chunks.usage(), { source: "estimated", promptTokens: 7, cachedPromptTokens: 0, completionTokens: 3 });
});

test("sawContent turns true with the first part, not with role-only chunks", () => {
  const chunks = reader();
  chunks.read(delta({ role: "assistant", content: "" }));
  assert.equal(chunks.sawContent, false);
  chunks.read(delta({ content: "x" }));
  assert.equal(chunks.sawContent, true);
});

test("llama-server's timings on content chunks are a running count: a cut stream gets its real prompt and cached tokens", () => {
  const chunks = reader();
  const timings = (evaluated: number, cached: number, predicted: number) => ({ cache_n: cached, prompt_n: evaluated, prompt_ms: 6.2, predicted_n: predicted, predicted_ms: 1.2 });
  chunks.read(delta({ role: "assistant", content: null }));
  chunks.read({ ...delta({ content: "a" }), timings: timings(9, 30, 1) });
  chunks.read({ ...delta({ content: "b" }), timings: timings(9, 30, 2) });
  chunks.read(delta({ content: "c" }));
  assert.deepEqual(chunks.usage(), { source: "estimated", promptTokens: 39, cachedPromptTokens: 30, completionTokens: 3 });
  assert.deepEqual(chunks.cancel(), [{ type: "finish", choice: 0, reason: "cancelled", usage: { promptTokens: 39, cachedPromptTokens: 30, completionTokens: 3 } }]);
});

test("llama-server's final usage wins over its timings; timings on the finishing chunk are not a running count", () => {
  const chunks = reader();
  chunks.read({ ...delta({ content: "a" }), timings: { prompt_n: 9, cache_n: 0, predicted_n: 1 } });
  chunks.read({ choices: [{ index: 0, delta: {}, finish_reason: "length" }], timings: { prompt_n: 9, cache_n: 0, predicted_n: 5 } });
  chunks.read({ choices: [], usage: { prompt_tokens: 9, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 0 } }, timings: { prompt_n: 9, cache_n: 0, predicted_n: 2 } });
  assert.deepEqual(chunks.usage(), { source: "upstream", promptTokens: 9, cachedPromptTokens: 0, completionTokens: 2 });
});

test("shareOut shares a request's completion tokens over its choices so that they add up to the total", () => {
  // Rounded one by one, 5 over three equal choices gave 2 + 2 + 2 = 6.
  assert.deepEqual(shareOut(5, [1, 1, 1]), [2, 2, 1]);
  assert.deepEqual(shareOut(6, [3, 3]), [3, 3]);
  assert.deepEqual(shareOut(10, [1, 3]), [3, 7]);
  assert.deepEqual(shareOut(7, [4]), [7]);
  assert.deepEqual(shareOut(4, [0, 0]), [4, 0], "nothing counted: the first choice takes all");
});
