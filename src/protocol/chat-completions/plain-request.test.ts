import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { plainChatRequest } from "./plain-request.ts";
import { chatCompletionRequestSchema, REQUEST_LIMITS } from "./request.ts";

const zod = (body: unknown) => chatCompletionRequestSchema.safeParse(body, { reportInput: true });

/** Values that fit each field's rule, and values next to and far from its edges. */
const longString = (length: number) => "x".repeat(length);
const fieldValues = {
  model: fc.constantFrom("bench", "m", longString(REQUEST_LIMITS.name), longString(REQUEST_LIMITS.name + 1), "", 7, null),
  frequency_penalty: fc.constantFrom(-2, 2, 0, 1.5, -2.01, 2.5, "1", null, true),
  presence_penalty: fc.constantFrom(-2, 2, 0, -0.5, 3, null, []),
  max_tokens: fc.constantFrom(1, 16, REQUEST_LIMITS.completionTokens, REQUEST_LIMITS.completionTokens + 1, 0, 1.5, -3, "16", null),
  max_completion_tokens: fc.constantFrom(1, 64, 200_000, 0, 2.5, null, false),
  n: fc.constantFrom(1, 2, 8, 9, 0, 1.5, null, "2"),
  seed: fc.constantFrom(0, -5, 42, Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER + 2, 1.25, null, "7"),
  stop: fc.constantFrom("\n", "", ["a", "b"], [], ["1", "2", "3", "4"], ["1", "2", "3", "4", "5"], longString(REQUEST_LIMITS.stopLength), longString(REQUEST_LIMITS.stopLength + 1), [longString(REQUEST_LIMITS.stopLength + 1)], [3], null, 5),
  stream: fc.constantFrom(true, false, null, "true", 1),
  stream_options: fc.constantFrom({ include_usage: true }, { include_usage: false }, { include_usage: null }, {}, { include_usage: "yes" }, { other: 1 }, null, [], "x"),
  temperature: fc.constantFrom(0, 1, 2, 0.7, 2.0001, -0.1, null, "1"),
  top_p: fc.constantFrom(0, 1, 0.9, 1.1, null, {}),
  user: fc.constantFrom("someone", "", null, 3),
};
const message = fc.record(
  {
    role: fc.constantFrom("system", "developer", "user", "assistant", "tool", "bogus", 3),
    content: fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom(null, 5, [{ type: "text", text: "hi" }], [])),
    name: fc.constantFrom("alice", longString(REQUEST_LIMITS.name), longString(REQUEST_LIMITS.name + 1), null, 9),
    tool_call_id: fc.constant("call_1"),
    extra: fc.constant(1),
  },
  { requiredKeys: [] },
);
const messages = fc.oneof(fc.array(message, { maxLength: 4 }), fc.constantFrom(null, "hi", {}));
const body = fc.record(
  { ...fieldValues, messages, tools: fc.constant([{ type: "function", function: { name: "f" } }]), unknown_field: fc.constant(1) },
  { requiredKeys: [] },
);

/** Only valid values: what the plain path must take. */
const validMessage = fc.record(
  {
    role: fc.constantFrom("system", "developer", "user", "assistant"),
    content: fc.string({ maxLength: 40 }),
    name: fc.constantFrom("alice", null),
  },
  { requiredKeys: ["role", "content"] },
);
const validBody = fc
  .record(
    {
      model: fc.constantFrom("bench", "llama"),
      messages: fc.array(validMessage, { minLength: 1, maxLength: 5 }),
      max_tokens: fc.integer({ min: 1, max: 4096 }),
      max_completion_tokens: fc.option(fc.integer({ min: 1, max: 4096 })),
      temperature: fc.option(fc.double({ min: 0, max: 2, noNaN: true })),
      top_p: fc.option(fc.double({ min: 0, max: 1, noNaN: true })),
      frequency_penalty: fc.option(fc.double({ min: -2, max: 2, noNaN: true })),
      presence_penalty: fc.option(fc.double({ min: -2, max: 2, noNaN: true })),
      seed: fc.option(fc.integer()),
      n: fc.option(fc.integer({ min: 1, max: 8 })),
      stop: fc.option(fc.oneof(fc.string({ maxLength: 5 }), fc.array(fc.string({ maxLength: 5 }), { maxLength: 4 }))),
      user: fc.option(fc.string({ maxLength: 10 })),
      stream: fc.boolean(),
    },
    { requiredKeys: ["model", "messages"] },
  )
  .map((value) => (value.stream === true ? { ...value, stream_options: { include_usage: true } } : value));

/** A valid body with one field (or one message's field) set to any value of the pools above: next to the edge of what the path takes. */
const oneFieldOff = fc.oneof(
  fc
    .tuple(validBody, fc.oneof(...Object.entries(fieldValues).map(([name, values]) => (values as fc.Arbitrary<unknown>).map((value) => [name, value] as const))))
    .map(([valid, [name, value]]) => ({ ...valid, [name]: value })),
  fc.tuple(validBody, fc.constantFrom("tools", "unknown_field", "logprobs")).map(([valid, name]) => ({ ...valid, [name]: true })),
  fc.tuple(validBody, message).map(([valid, odd]) => ({ ...valid, messages: [...valid.messages, odd] })),
);

test("what the plain path accepts, the schema accepts with the same output; what the schema refuses, the plain path leaves to it", () => {
  let taken = 0;
  fc.assert(
    fc.property(fc.oneof(body, oneFieldOff), (candidate) => {
      const plain = plainChatRequest(candidate);
      const parsed = zod(candidate);
      if (plain === undefined) return;
      taken++;
      assert.ok(parsed.success, `the plain path took a body the schema refuses: ${JSON.stringify(candidate)} (${parsed.error?.issues[0]?.message})`);
      assert.deepStrictEqual(plain, parsed.data);
      // In the schema's order too (the order zod writes its output in).
      assert.deepStrictEqual(Object.keys(plain), Object.keys(parsed.data));
    }),
    { numRuns: 10000, seed: 26 },
  );
  assert.ok(taken > 50, `only ${taken} generated bodies were plain: the property says little`);
});

test("every valid plain body takes the plain path, with the schema's output", () => {
  fc.assert(
    fc.property(validBody, (candidate) => {
      const plain = plainChatRequest(candidate);
      const parsed = zod(candidate);
      assert.ok(parsed.success);
      assert.ok(plain !== undefined, `not taken: ${JSON.stringify(candidate)}`);
      assert.deepStrictEqual(plain, parsed.data);
    }),
    { numRuns: 2000, seed: 27 },
  );
});

test("the bench's and the SDK's everyday bodies are plain; tools, images, unknown fields and broken rules are the schema's", () => {
  const everyday = { model: "bench", messages: [{ role: "user", content: "Say something." }], max_tokens: 16, stream: true, stream_options: { include_usage: true } };
  assert.deepEqual(plainChatRequest(everyday), zod(everyday).data);
  for (const other of [
    { ...everyday, tools: [{ type: "function", function: { name: "f" } }] },
    { ...everyday, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "https://example.com/a.png" } }] }] },
    { ...everyday, response_format: { type: "json_object" } },
    { ...everyday, logprobs: true },
    { ...everyday, stream: false },
    { ...everyday, n: 8, max_tokens: REQUEST_LIMITS.completionTokens },
    { ...everyday, messages: [] },
    { ...everyday, messages: [{ role: "tool", content: "x", tool_call_id: "a" }] },
    { messages: everyday.messages },
    JSON.parse('{"model":"bench","messages":[{"role":"user","content":"x"}],"__proto__":{"stream":true}}'),
    null,
    [everyday],
  ]) {
    assert.equal(plainChatRequest(other), undefined, JSON.stringify(other));
  }
});
