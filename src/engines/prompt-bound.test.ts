/**
 * promptBound: what it counts, and that a real template's tokenization (stories260K's, and
 * node-llama-cpp's generic tool section) always lies between its bounds.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { GenerationRequest } from "./engine.ts";
import { MESSAGE_OVERHEAD_BYTES, PROMPT_OVERHEAD_BYTES, promptBound, renderedBytes, TOOL_OVERHEAD_BYTES, verbatimBytes } from "./prompt-bound.ts";
import type { LlamaCppEngine } from "./llamacpp/llamacpp-engine.ts";
import { loadTestEngine, sharedModel } from "./llamacpp/test-engine.ts";

const storiesModel = sharedModel("stories260K.gguf");
const sampling = { temperature: 1, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: [] };

function request(fields: Partial<GenerationRequest>): GenerationRequest {
  return { messages: [{ role: "user", content: "Hi" }], sampling, choices: 1, ...fields };
}

const weather = { type: "object", properties: { city: { type: "string", description: "The city" }, days: { type: "integer" } }, required: ["city"] };

/** Requests with every part a template renders. */
const requests: Array<[string, GenerationRequest]> = [
  ["one short message", request({})],
  ["a conversation", request({ messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Once upon a time" }, { role: "assistant", content: "there was a cat." }, { role: "user", content: "Go on ".repeat(50) }] })],
  ["empty messages", request({ messages: Array.from({ length: 40 }, (_, index) => ({ role: index % 2 === 0 ? ("user" as const) : ("assistant" as const), content: "" })) })],
  [
    "tools, tool calls and their results",
    request({
      messages: [
        { role: "user", content: "Weather in Paris?" },
        { role: "assistant", content: "", toolCalls: [{ id: "call_1", name: "get_weather", arguments: JSON.stringify({ city: "Paris", days: 3 }) }] },
        { role: "tool", content: JSON.stringify({ temperature: 21, sky: "clear" }), toolCallId: "call_1" },
      ],
      tools: [
        { name: "get_weather", description: "Tells the weather of a city for some days. ".repeat(5), parameters: weather },
        { name: "get_time" },
      ],
    }),
  ],
  ["a response format", request({ responseFormat: { type: "json_schema", name: "person", schema: { type: "object", properties: { name: { type: "string" } } } } })],
  ["arguments padded with whitespace", request({ messages: [{ role: "user", content: "x" }, { role: "assistant", content: "", toolCalls: [{ id: "c", name: "f", arguments: `{ "a" : ${" ".repeat(200)} 1 }` }] }], tools: [{ name: "f" }] })],
  [
    // A custom call's raw input is rendered JSON-encoded (a control byte as six), its grammar in its description.
    "custom tools and a custom call of control characters",
    request({
      messages: [{ role: "user", content: "x" }, { role: "assistant", content: "", toolCalls: [{ id: "c", name: "patch", arguments: "\x01\x02\"\n".repeat(40) }] }],
      tools: [
        { name: "patch", custom: { format: { type: "grammar", syntax: "lark", definition: `start: "a"+\n${"// a long comment line\n".repeat(10)}` } } },
        { name: "note", description: "Notes.", custom: { format: { type: "text" } } },
      ],
    }),
  ],
];

describe("promptBound", () => {
  it("counts every byte a template may render, and as atLeast only what every template renders as sent", () => {
    const message = { role: "assistant" as const, content: "héllo", name: "bob", toolCalls: [{ id: "id1", name: "f", arguments: '{"a":1}' }] };
    const tool = { name: "f", description: "does f", parameters: { type: "object" } };
    const full = request({
      messages: [message, { role: "tool", content: "ok", toolCallId: "id1" }],
      tools: [tool],
      responseFormat: { type: "json_schema", name: "x", schema: { type: "string" } },
    });
    const text = 6 + 3 + (3 + 1 + 7) + 2 + 3; // content, name, call id+name+arguments, tool content, tool call id
    const tools = 1 + 6 + JSON.stringify(tool.parameters).length;
    const schema = JSON.stringify({ type: "string" }).length;
    assert.equal(renderedBytes(full), text + tools + schema);
    assert.equal(verbatimBytes(full), 6 + (1 + 7) + 2 + (1 + 6));
    const bound = promptBound(full, 4);
    assert.equal(bound.atLeast, Math.ceil(verbatimBytes(full) / 4));
    assert.equal(bound.atMost, renderedBytes(full) + PROMPT_OVERHEAD_BYTES + 2 * MESSAGE_OVERHEAD_BYTES + 2 * TOOL_OVERHEAD_BYTES);
  });

  it("counts the vendor fields' bytes in atMost (a template may render chat_template_kwargs), never in atLeast", () => {
    const kwargs = { enable_thinking: false, notes: "n".repeat(10_000) };
    const plain = promptBound(request({}), 4);
    const withKwargs = promptBound(request({ vendor: { chat_template_kwargs: kwargs, top_k: 40 } }), 4);
    assert.equal(withKwargs.atMost - plain.atMost, Buffer.byteLength(JSON.stringify(kwargs)) + 2);
    assert.equal(withKwargs.bytes - plain.bytes, Buffer.byteLength(JSON.stringify(kwargs)) + 2);
    assert.equal(withKwargs.atLeast, plain.atLeast);
  });

  it("counts each ASCII byte against the longest token holding it, so long runs of spaces in a vocabulary do not loosen the bound", () => {
    // A vocabulary whose longest token is 64 spaces, whose tokens holding letters span at most 8 bytes.
    const asciiLongest = Array.from({ length: 128 }, (_, byte) => (byte === 32 ? 64 : /[a-z]/.test(String.fromCharCode(byte)) ? 8 : 0));
    const words = request({ messages: [{ role: "user", content: "abcdefgh".repeat(1000) }] });
    assert.equal(promptBound(words, 64).atLeast, 125);
    assert.equal(promptBound(words, { longest: 64, asciiLongest }).atLeast, 1000);
    // Spaces still count 1/64 each; bytes no token holds, and other than ASCII, count 1/longest.
    const spaces = request({ messages: [{ role: "user", content: " ".repeat(640) + "é".repeat(32) + "\u0001".repeat(64) }] });
    assert.equal(promptBound(spaces, { longest: 64, asciiLongest }).atLeast, 10 + 1 + 1);
    // Asked only whether it reaches 100 tokens, it stops counting there (megabytes are not read to the end).
    const huge = request({ messages: [{ role: "user", content: "abcdefgh".repeat(1_000_000) }] });
    const partial = promptBound(huge, { longest: 64, asciiLongest }, 100).atLeast;
    assert.ok(partial >= 100 && partial < 1_000_000, String(partial));
    assert.equal(promptBound(huge, { longest: 64, asciiLongest }).atLeast, 1_000_000);
  });

  it("counts megabytes without rendering them, in milliseconds", () => {
    const huge = request({ messages: Array.from({ length: 2048 }, () => ({ role: "user" as const, content: "cat ".repeat(1000) })) });
    const started = process.cpuUsage();
    const bound = promptBound(huge, 6);
    const used = process.cpuUsage(started);
    assert.equal(bound.verbatimBytes, 2048 * 4000);
    assert.ok(used.user + used.system < 1_000_000, `took ${used.user + used.system} µs of CPU`);
  });

  describe("on a real template", () => {
    let engine: LlamaCppEngine;
    before(async () => {
      engine = await loadTestEngine(storiesModel, { modelId: "stories" });
    });
    after(async () => {
      await engine.close();
    });

    it("holds every random text's token count above atLeast", async () => {
      const alphabet = ["a", "b", "e", "t", "s", " ", "  ", "\n", ".", ",", "-", "--", "é", "日", "😀", "story", " the", "Once", "\t", "{", '"'];
      let seed = 7;
      const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
      for (let sample = 0; sample < 40; sample++) {
        const length = 1 + Math.floor(random() * 400);
        const content = Array.from({ length }, () => alphabet[Math.floor(random() * alphabet.length)]!).join("");
        const generation = request({ messages: [{ role: "user", content }] });
        const bound = engine.boundPrompt(generation);
        const prepared = await engine.prepare({ ...generation, maxTokens: 1 });
        assert.ok(bound.atLeast <= prepared.promptTokens, `atLeast ${bound.atLeast} > ${prepared.promptTokens} tokens for ${JSON.stringify(content)}`);
        assert.ok(bound.atLeast > 0, "a non-empty text has at least one token");
      }
    });

    for (const [what, generation] of requests) {
      it(`holds the exact token count between its bounds: ${what}`, async () => {
        const bound = engine.boundPrompt(generation);
        const prepared = await engine.prepare({ ...generation, maxTokens: 1 });
        assert.ok(bound.atLeast <= prepared.promptTokens, `atLeast ${bound.atLeast} > ${prepared.promptTokens} tokens`);
        assert.ok(prepared.promptTokens <= bound.atMost, `atMost ${bound.atMost} < ${prepared.promptTokens} tokens`);
      });
    }
  });
});
