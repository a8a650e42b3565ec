/**
 * The spec schemas and the stream grammar check, on hand-written streams: valid ones (built with
 * the server's own resource builders and event sequencer, which this also holds to the spec) pass
 * with no problem; each broken rule is found and named.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { createEventSequencer, type UnsequencedEvent } from "../../src/protocol/responses/events.ts";
import { parseWithSchema } from "../../src/protocol/parse.ts";
import { responsesRequestSchema } from "../../src/protocol/responses/request.ts";
import {
  buildResponseResource,
  customToolCallItem,
  echoedRequestFields,
  emptyOutputMessage,
  functionCallItem,
  outputMessage,
  reasoningItem,
  usageOf,
  type ResourceState,
  type ResponseResource,
} from "../../src/protocol/responses/resource.ts";
import { checkEventGrammar, eventSchemas, responseResourceSchema } from "./responses-schemas.ts";

const CREATED_AT = 1_760_000_000;
const USAGE = usageOf({ promptTokens: 12, cachedPromptTokens: 4, completionTokens: 5, reasoningTokens: 2 });

function resourceOf(body: Record<string, unknown>, state: Omit<ResourceState, "id" | "createdAt">): ResponseResource {
  const echoed = echoedRequestFields(parseWithSchema(responsesRequestSchema, { model: "tiny", input: "Hi", ...body }));
  return buildResponseResource(echoed, { id: "resp_1", createdAt: CREATED_AT, ...state });
}

type Stream = { events: Array<Record<string, unknown>>; final: ResponseResource };

/** created, in_progress, one message streamed in two deltas, completed. */
function textStream(): Stream {
  const next = createEventSequencer();
  const final = resourceOf({}, { status: "completed", completedAt: CREATED_AT + 1, output: [outputMessage("msg_1", "Hello world", "completed")], usage: USAGE });
  const running = resourceOf({}, { status: "in_progress" });
  const inside = { item_id: "msg_1", output_index: 0, content_index: 0 };
  const unsequenced: UnsequencedEvent[] = [
    { type: "response.created", response: running },
    { type: "response.in_progress", response: running },
    { type: "response.output_item.added", output_index: 0, item: emptyOutputMessage("msg_1") },
    { type: "response.content_part.added", ...inside, part: { type: "output_text", text: "", annotations: [], logprobs: [] } },
    { type: "response.output_text.delta", ...inside, delta: "Hello", logprobs: [] },
    { type: "response.output_text.delta", ...inside, delta: " world", logprobs: [] },
    { type: "response.output_text.done", ...inside, text: "Hello world", logprobs: [] },
    { type: "response.content_part.done", ...inside, part: { type: "output_text", text: "Hello world", annotations: [], logprobs: [] } },
    { type: "response.output_item.done", output_index: 0, item: outputMessage("msg_1", "Hello world", "completed") },
    { type: "response.completed", response: final },
  ];
  return { events: unsequenced.map((event) => ({ ...next(event) })), final };
}

/** A background response: reasoning, a function call and a custom tool call, cut by max_output_tokens. */
function toolStream(): Stream {
  const next = createEventSequencer();
  const body = {
    background: true,
    tools: [
      { type: "function", name: "get_weather", parameters: { type: "object" } },
      { type: "custom", name: "apply_patch", format: { type: "grammar", syntax: "lark", definition: "start: /.+/" } },
    ],
    reasoning: { effort: "low" },
    metadata: { ticket: "42" },
    max_output_tokens: 64,
  };
  const output = [
    reasoningItem("rs_1", "Two calls.", "completed"),
    functionCallItem("fc_1", "call_1", "get_weather", '{"city":"Paris"}', "completed"),
    customToolCallItem("ctc_1", "call_2", "apply_patch", "*** Begin", "incomplete"),
  ];
  const final = resourceOf(body, { status: "incomplete", output, usage: USAGE, incompleteReason: "max_output_tokens" });
  const reasoningPart = { item_id: "rs_1", output_index: 0, content_index: 0 };
  const unsequenced: UnsequencedEvent[] = [
    { type: "response.created", response: resourceOf(body, { status: "queued" }) },
    { type: "response.queued", response: resourceOf(body, { status: "queued" }) },
    { type: "response.in_progress", response: resourceOf(body, { status: "in_progress" }) },
    { type: "response.output_item.added", output_index: 0, item: reasoningItem("rs_1", undefined, "in_progress") },
    { type: "response.content_part.added", ...reasoningPart, part: { type: "reasoning_text", text: "" } },
    { type: "response.reasoning_text.delta", ...reasoningPart, delta: "Two " },
    { type: "response.reasoning_text.delta", ...reasoningPart, delta: "calls." },
    { type: "response.reasoning_text.done", ...reasoningPart, text: "Two calls." },
    { type: "response.content_part.done", ...reasoningPart, part: { type: "reasoning_text", text: "Two calls." } },
    { type: "response.output_item.done", output_index: 0, item: output[0]! },
    { type: "response.output_item.added", output_index: 1, item: functionCallItem("fc_1", "call_1", "get_weather", "", "in_progress") },
    { type: "response.function_call_arguments.delta", item_id: "fc_1", output_index: 1, delta: '{"city":' },
    { type: "response.function_call_arguments.delta", item_id: "fc_1", output_index: 1, delta: '"Paris"}' },
    { type: "response.function_call_arguments.done", item_id: "fc_1", output_index: 1, arguments: '{"city":"Paris"}' },
    { type: "response.output_item.done", output_index: 1, item: output[1]! },
    { type: "response.output_item.added", output_index: 2, item: customToolCallItem("ctc_1", "call_2", "apply_patch", "", "in_progress") },
    { type: "response.custom_tool_call_input.delta", item_id: "ctc_1", output_index: 2, delta: "*** Begin" },
    { type: "response.custom_tool_call_input.done", item_id: "ctc_1", output_index: 2, input: "*** Begin" },
    { type: "response.output_item.done", output_index: 2, item: output[2]! },
    { type: "response.incomplete", response: final },
  ];
  return { events: unsequenced.map((event) => ({ ...next(event) })), final };
}

/** A stream that fails after its first delta: the open message stays open, an error then response.failed. */
function failedStream(): Stream {
  const { events } = textStream();
  const final = resourceOf({}, { status: "failed", error: { code: "server_error", message: "The engine failed." }, usage: USAGE });
  const kept = events.slice(0, 5);
  kept.push({ type: "error", sequence_number: 5, error: { type: "server_error", code: "server_error", message: "The engine failed.", param: null } });
  kept.push({ type: "response.failed", sequence_number: 6, response: final });
  return { events: kept, final };
}

/** A deep copy to break. */
function copy(stream: Stream): Array<Record<string, unknown>> {
  return structuredClone(stream.events);
}

/** Renumbers events 0, 1, 2… after one was removed or added. */
function renumbered(events: Array<Record<string, unknown>>): Array<Record<string, unknown>> {
  return events.map((event, index) => ({ ...event, sequence_number: index }));
}

function assertProblem(events: readonly unknown[], pattern: RegExp, options?: Parameters<typeof checkEventGrammar>[1]): void {
  const problems = checkEventGrammar(events, options);
  assert.ok(problems.some((problem) => pattern.test(problem)), `expected a problem matching ${pattern}, got ${JSON.stringify(problems)}`);
}

describe("the spec schemas", () => {
  it("accept the server's resources: completed, incomplete, failed and in progress", () => {
    for (const resource of [textStream().final, toolStream().final, failedStream().final, resourceOf({}, { status: "queued" })]) {
      const result = responseResourceSchema.safeParse(resource);
      assert.ok(result.success, JSON.stringify(result.error?.issues));
    }
  });

  it("accept every echoed request field in its richest form", () => {
    const resource = resourceOf(
      {
        instructions: "Rules.",
        previous_response_id: "resp_0",
        text: { format: { type: "json_schema", name: "a", schema: { type: "object" } }, verbosity: "high" },
        tool_choice: { type: "allowed_tools", tools: [{ type: "function", name: "f" }] },
        tools: [{ type: "function", name: "f" }],
        temperature: 0.2,
        top_p: 0.9,
        top_logprobs: 3,
        truncation: "auto",
        store: false,
        safety_identifier: "user-1",
        prompt_cache_key: "conv-1",
        reasoning: { effort: "minimal", summary: "concise" },
      },
      { status: "completed", completedAt: CREATED_AT, usage: USAGE },
    );
    const result = responseResourceSchema.safeParse(resource);
    assert.ok(result.success, JSON.stringify(result.error?.issues));
  });

  it("refuse a resource missing a required field, or with one of the wrong type", () => {
    const { usage: _usage, ...withoutUsage } = textStream().final;
    assert.equal(responseResourceSchema.safeParse(withoutUsage).success, false);
    assert.equal(responseResourceSchema.safeParse({ ...textStream().final, completed_at: undefined }).success, false);
    assert.equal(responseResourceSchema.safeParse({ ...textStream().final, top_p: null }).success, false);
    assert.equal(responseResourceSchema.safeParse({ ...textStream().final, service_tier: null }).success, false);
  });

  it("refuse a resource whose status and details disagree", () => {
    assert.equal(responseResourceSchema.safeParse({ ...textStream().final, status: "incomplete" }).success, false);
    assert.equal(responseResourceSchema.safeParse({ ...textStream().final, status: "failed" }).success, false);
    assert.equal(responseResourceSchema.safeParse({ ...textStream().final, usage: { ...USAGE, total_tokens: 1 } }).success, false);
  });

  it("refuse an event missing a required field", () => {
    assert.equal(eventSchemas["response.output_text.delta"].safeParse({ type: "response.output_text.delta", sequence_number: 1, item_id: "m", output_index: 0, delta: "x" }).success, false);
    assert.equal(eventSchemas.error.safeParse({ type: "error", sequence_number: 1, error: { type: "server_error", message: "x" } }).success, false);
  });
});

describe("checkEventGrammar on valid streams", () => {
  it("finds no problem in a streamed text answer, equal to its final resource", () => {
    const stream = textStream();
    assert.deepEqual(checkEventGrammar(stream.events, { finalResource: stream.final }), []);
  });

  it("finds no problem in a background stream of reasoning, a function call and a custom tool call, cut short", () => {
    const stream = toolStream();
    assert.deepEqual(checkEventGrammar(stream.events, { finalResource: stream.final }), []);
  });

  it("finds no problem in a stream that fails with an error event then response.failed", () => {
    const stream = failedStream();
    assert.deepEqual(checkEventGrammar(stream.events, { finalResource: stream.final }), []);
  });

  it("accepts a trailing [DONE], requires it when asked, and accepts slug-prefixed extension events", () => {
    const stream = textStream();
    assert.deepEqual(checkEventGrammar([...stream.events, "[DONE]"], { requireDone: true }), []);
    assertProblem(stream.events, /\[DONE\]/, { requireDone: true });
    const extended = renumbered([...stream.events.slice(0, 2), { type: "turnpike:trace", sequence_number: 0 }, ...stream.events.slice(2)]);
    assert.deepEqual(checkEventGrammar(extended), []);
  });
});

describe("checkEventGrammar finds each broken rule", () => {
  it("sequence numbers that skip, repeat or start at 1", () => {
    const skipped = copy(textStream());
    skipped[4]!.sequence_number = 5;
    assertProblem(skipped, /event 4: sequence_number 5, expected 4/);
    assertProblem(textStream().events.map((event) => ({ ...event, sequence_number: Number(event.sequence_number) + 1 })), /event 0: sequence_number 1, expected 0/);
  });

  it("a first event other than response.created, and output before response.in_progress", () => {
    assertProblem(renumbered(copy(textStream()).slice(1)), /first event is 'response.in_progress'/);
    const noProgress = renumbered(copy(textStream()).filter((event) => event.type !== "response.in_progress"));
    assertProblem(noProgress, /before response.in_progress/);
  });

  it("an event that does not match its schema, and an unknown event type", () => {
    const events = copy(textStream());
    delete events[4]!.item_id;
    assertProblem(events, /event 4: 'response.output_text.delta' does not match the spec: item_id/);
    const unknown = copy(textStream());
    unknown[4]!.type = "response.output_text.chunk";
    assertProblem(unknown, /unknown event type 'response.output_text.chunk'/);
    const noUsage = copy(textStream());
    delete (noUsage[9]!.response as Record<string, unknown>).usage;
    assertProblem(noUsage, /event 9: 'response.completed' does not match the spec: response.usage/);
  });

  it("a delta outside an open content part", () => {
    const events = copy(textStream());
    [events[3], events[4]] = [events[4]!, events[3]!];
    assertProblem(renumbered(events), /outside an open part/);
  });

  it("a content part closed before its text is done, and a done text that differs from the deltas", () => {
    const early = copy(textStream());
    [early[6], early[7]] = [early[7]!, early[6]!];
    assertProblem(renumbered(early), /content_part.done' before the part's text was done/);
    const differs = copy(textStream());
    differs[6]!.text = "Hello there";
    assertProblem(differs, /output_text.done' whose text differs from its deltas/);
  });

  it("an item that is added and never done, or done twice", () => {
    const open = renumbered(copy(textStream()).filter((event) => event.type !== "response.output_item.done"));
    assertProblem(open, /'response.completed' with items still open: msg_1/);
    const twice = copy(textStream());
    twice.splice(9, 0, { ...twice[8]! });
    assertProblem(renumbered(twice), /output_item.done twice/);
  });

  it("an item added at the wrong output_index, or announced as already completed", () => {
    const events = copy(textStream());
    events[2]!.output_index = 1;
    assertProblem(events, /output_item.added at output_index 1, expected 0/);
    const completed = copy(textStream());
    (completed[2]!.item as Record<string, unknown>).status = "completed";
    assertProblem(completed, /output_item.added with status 'completed'/);
  });

  it("events about an item after its output_item.done", () => {
    const events = copy(textStream());
    events.splice(9, 0, { ...events[5]! });
    assertProblem(renumbered(events), /after its output_item.done|outside an open part/);
  });

  it("function call arguments whose done differs from the deltas", () => {
    const events = copy(toolStream());
    events[13]!.arguments = '{"city":"Rome"}';
    assertProblem(events, /function_call_arguments.done' whose text differs/);
  });

  it("a call event for an item of another type", () => {
    const events = copy(toolStream());
    events[16]!.type = "response.function_call_arguments.delta";
    assertProblem(events, /'response.function_call_arguments.delta' for a 'custom_tool_call' item/);
  });

  it("no terminal event, two of them, or one whose status disagrees", () => {
    assertProblem(copy(textStream()).slice(0, -1), /no terminal event/);
    const twice = copy(textStream());
    twice.push({ ...twice[9]!, sequence_number: 10 });
    assertProblem(twice, /after the terminal event/);
    const mismatched = copy(textStream());
    mismatched[9]!.type = "response.incomplete";
    assertProblem(mismatched, /'response.incomplete' whose response has status 'completed'|does not match the spec/);
  });

  it("an error event not followed by response.failed", () => {
    const events = copy(failedStream());
    events[6]!.type = "response.completed";
    assertProblem(events, /after an error event/);
  });

  it("a terminal output that differs from the done items, and a final resource that differs", () => {
    const events = copy(textStream());
    (events[9]!.response as { output: unknown[] }).output = [];
    assertProblem(events, /output differs from the items/);
    const stream = textStream();
    assertProblem(stream.events, /differs from the final resource/, { finalResource: { ...stream.final, metadata: { changed: "yes" } } });
  });

  it("response snapshots of different responses", () => {
    const events = copy(textStream());
    // A new object: the created and in_progress events share their snapshot.
    events[1] = { ...events[1]!, response: { ...(events[1]!.response as object), id: "resp_2" } };
    assertProblem(events, /response id resp_2 differs from resp_1/);
  });
});
