/**
 * Custom tools on the embedded engine (stories260K, one thread): forced calls whose decoded
 * input always follows the tool's grammar (Codex's apply_patch in Lark, a regex) where only the
 * grammar can make that true; the input streamed as decoded text; a text-format tool; a
 * conversation holding an earlier custom call; a format the engine cannot enforce refused.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Llama2ChatWrapper } from "node-llama-cpp";
import type { GenerationRequest, StreamPart, ToolDefinition } from "../engine.ts";
import { toChatHistory } from "./chat-prompt.ts";
import { UnsupportedGrammarError } from "../grammar/grammar-expression.ts";
import { GrammarRecognizer } from "../grammar/grammar-recognizer.ts";
import { parseLarkGrammar } from "../grammar/lark-grammar.ts";
import type { LlamaCppEngine } from "./llamacpp-engine.ts";
import { parseRegexGrammar } from "../grammar/regex-grammar.ts";
import { loadTestEngine, sharedModel } from "./test-engine.ts";
import { APPLY_PATCH, BOUNDED_APPLY_PATCH } from "../grammar/test-grammars.ts";

const applyPatch: ToolDefinition = {
  name: "apply_patch",
  description: "Use the `apply_patch` tool to edit files.",
  custom: { format: { type: "grammar", syntax: "lark", definition: APPLY_PATCH } },
};
const getWeather: ToolDefinition = { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } };

function requestFor(tools: ToolDefinition[], toolChoice: GenerationRequest["toolChoice"], seed: number, temperature = 1): GenerationRequest {
  return {
    messages: [{ role: "user", content: "Once upon a time" }],
    sampling: { temperature, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: [], seed },
    maxTokens: 400,
    choices: 1,
    tools,
    ...(toolChoice !== undefined ? { toolChoice } : {}),
  };
}

type Reply = { content: string; calls: { name: string; input: string; deltas: number }[]; reason: string };

async function generate(engine: LlamaCppEngine, request: GenerationRequest): Promise<Reply> {
  const generation = (await engine.prepare(request)).start(new AbortController().signal);
  const reply: Reply = { content: "", calls: [], reason: "" };
  for await (const part of generation.parts as AsyncIterable<StreamPart>) {
    if (part.type === "text-delta") reply.content += part.text;
    if (part.type === "tool-call-start") reply.calls.push({ name: part.name, input: "", deltas: 0 });
    if (part.type === "tool-call-delta") {
      const call = reply.calls[part.index]!;
      call.input += part.argumentsDelta;
      call.deltas++;
      assert.ok(part.argumentsDelta.isWellFormed(), "each delta is whole characters");
    }
    if (part.type === "finish") reply.reason = part.reason;
  }
  return reply;
}

describe("custom tools on the llama.cpp engine", () => {
  let engine: LlamaCppEngine;
  before(async () => {
    engine = await loadTestEngine(sharedModel("stories260K.gguf"), { modelId: "stories260K" });
  });
  after(async () => {
    await engine?.close();
  });

  it("forces 50 calls of Codex's apply_patch: each input, decoded as it streams, is a patch or the start of one", async () => {
    const recognizer = new GrammarRecognizer(parseLarkGrammar(APPLY_PATCH));
    for (let run = 0; run < 50; run++) {
      const temperature = 0.5 + (run % 5) * 0.2;
      // Short: stories260K ends the grammar's `.+` lines only at the token limit (see BOUNDED_APPLY_PATCH).
      const reply = await generate(engine, { ...requestFor([getWeather, applyPatch], { name: "apply_patch" }, run + 1, temperature), maxTokens: 100 });
      const shown = `run ${run} (${reply.reason}): ${JSON.stringify(reply.calls[0]?.input.slice(0, 200))}`;
      assert.equal(reply.content, "", shown);
      assert.equal(reply.calls.length, 1, shown);
      assert.equal(reply.calls[0]!.name, "apply_patch");
      const input = reply.calls[0]!.input;
      if (reply.reason === "tool_calls") assert.ok(recognizer.accepts(input), shown);
      else {
        assert.equal(reply.reason, "length", shown);
        assert.ok(recognizer.acceptsPrefix(input), shown);
      }
      assert.ok(input.startsWith("*** Begin Patch\n*** "), `the input is decoded text, not JSON: ${shown}`);
      assert.ok(reply.calls[0]!.deltas > 1, `the input is streamed as it is written: ${shown}`);
    }
  });

  it("forces 50 calls of a bounded apply_patch grammar: all 50 end on their own, and all 50 inputs parse", async () => {
    const tool: ToolDefinition = { ...applyPatch, custom: { format: { type: "grammar", syntax: "lark", definition: BOUNDED_APPLY_PATCH } } };
    const recognizer = new GrammarRecognizer(parseLarkGrammar(BOUNDED_APPLY_PATCH));
    const full = new GrammarRecognizer(parseLarkGrammar(APPLY_PATCH));
    for (let run = 0; run < 50; run++) {
      const temperature = 0.5 + (run % 5) * 0.2;
      // The grammar bounds the input to about 130 characters, each at most 6 of JSON (\u00xx): 800 tokens are always enough.
      const reply = await generate(engine, { ...requestFor([getWeather, tool], { name: "apply_patch" }, run + 1, temperature), maxTokens: 800 });
      const shown = `run ${run} (${reply.reason}): ${JSON.stringify(reply.calls[0]?.input)}`;
      assert.equal(reply.reason, "tool_calls", shown);
      assert.equal(reply.calls.length, 1, shown);
      const input = reply.calls[0]!.input;
      assert.ok(recognizer.accepts(input), shown);
      assert.ok(full.accepts(input), `a bounded patch is a patch: ${shown}`);
    }
  });

  it("forces a call of a regex tool ('required', the only tool) whose input matches the regex", async () => {
    const pattern = String.raw`[a-z]{3,8}( "[0-9]{1,4}")?\\?`;
    const tool: ToolDefinition = { name: "word", custom: { format: { type: "grammar", syntax: "regex", definition: pattern } } };
    const recognizer = new GrammarRecognizer(parseRegexGrammar(pattern));
    const regex = new RegExp(`^(?:${pattern})$`);
    for (let seed = 1; seed <= 10; seed++) {
      const reply = await generate(engine, { ...requestFor([tool], "required", seed), parallelToolCalls: false });
      assert.equal(reply.reason, "tool_calls");
      assert.equal(reply.calls.length, 1);
      assert.ok(recognizer.accepts(reply.calls[0]!.input) && regex.test(reply.calls[0]!.input), JSON.stringify(reply.calls[0]));
    }
  });

  it("forces a call of a text-format tool: any text, decoded", async () => {
    const tool: ToolDefinition = { name: "note", description: "Writes a note.", custom: { format: { type: "text" } } };
    for (let seed = 1; seed <= 5; seed++) {
      const reply = await generate(engine, { ...requestFor([getWeather, tool], { name: "note" }, seed), maxTokens: 60 });
      assert.equal(reply.calls.length, 1);
      assert.equal(reply.calls[0]!.name, "note");
      assert.ok(!reply.calls[0]!.input.startsWith('{"input"'), JSON.stringify(reply.calls[0]));
    }
  });

  it("renders an earlier custom call as its function's {\"input\": ...} arguments, and answers after it", async () => {
    const patch = '*** Begin Patch\n*** Add File: a.txt\n+say "hi"\n*** End Patch\n';
    const messages: GenerationRequest["messages"] = [
      { role: "user", content: "Add a file." },
      { role: "assistant", content: "", toolCalls: [{ id: "call_1", name: "apply_patch", arguments: patch }] },
      { role: "tool", content: "Done!", toolCallId: "call_1" },
      { role: "user", content: "Once more." },
    ];
    const history = toChatHistory(messages, new Set(["apply_patch"]));
    const model = history[1]!;
    assert.equal(model.type, "model");
    assert.deepEqual(model.type === "model" ? model.response[0] : undefined, { type: "functionCall", name: "apply_patch", params: { input: patch }, result: "Done!" });
    const rendered = new Llama2ChatWrapper().generateContextState({ chatHistory: history }).contextText.toString();
    assert.ok(rendered.includes(JSON.stringify(patch)), rendered);

    const recognizer = new GrammarRecognizer(parseLarkGrammar(APPLY_PATCH));
    const reply = await generate(engine, { ...requestFor([applyPatch], "required", 3), messages });
    assert.equal(reply.calls.length, 1);
    assert.ok(recognizer.acceptsPrefix(reply.calls[0]!.input));
  });

  it("refuses a grammar it cannot enforce with a 400 naming the tool's format", async () => {
    const tool: ToolDefinition = { name: "bad", custom: { format: { type: "grammar", syntax: "lark", definition: 'start: "a"\n%ignore " "' } } };
    await assert.rejects(engine.prepare(requestFor([getWeather, tool], "auto", 1)), (error: unknown) => {
      assert.ok(error instanceof UnsupportedGrammarError, String(error));
      assert.equal(error.param, "tools[1].format");
      return true;
    });
  });
});
