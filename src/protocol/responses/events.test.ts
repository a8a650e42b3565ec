/** The stream's one sequencer: numbers from 0, one more per event, `type` first. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { createEventSequencer } from "./events.ts";

describe("createEventSequencer", () => {
  it("numbers events 0, 1, 2… and puts type and sequence_number first", () => {
    const next = createEventSequencer();
    const first = next({ type: "response.output_text.delta", item_id: "msg_1", output_index: 0, content_index: 0, delta: "a", logprobs: [] });
    const second = next({ type: "response.function_call_arguments.done", item_id: "fc_1", output_index: 1, arguments: "{}" });
    assert.equal(first.sequence_number, 0);
    assert.equal(second.sequence_number, 1);
    assert.deepEqual(Object.keys(first).slice(0, 2), ["type", "sequence_number"]);
  });

  it("keeps a count per stream", () => {
    const one = createEventSequencer();
    const two = createEventSequencer();
    one({ type: "error", error: { type: "server_error", code: null, message: "x", param: null } });
    assert.equal(two({ type: "error", error: { type: "server_error", code: null, message: "x", param: null } }).sequence_number, 0);
  });
});
