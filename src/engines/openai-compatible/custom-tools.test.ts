/**
 * Custom tools on the upstream engine, against the fault-injecting upstream (a real HTTP server
 * that records the bodies it gets): a text-format tool goes as a function of `input` and its call
 * comes back as text; a forced grammar tool goes as the kind's own grammar option, with no tools,
 * and the reply becomes the call; a grammar the kind cannot enforce is refused naming the format.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { FaultUpstream } from "../../../test/helpers/fault-upstream.ts";
import type { GenerationRequest, StreamPart, ToolDefinition } from "../engine.ts";
import { UnsupportedParameterError } from "../../protocol/errors.ts";
import { larkToGbnf } from "../grammar/lark-grammar.ts";
import { regexToGbnf } from "../grammar/regex-grammar.ts";
import { APPLY_PATCH } from "../grammar/test-grammars.ts";
import { upstreamSchema, type UpstreamKind } from "./config-schema.ts";
import { OpenAiCompatibleEngine } from "./openai-compatible-engine.ts";
import { createUpstreamPool } from "./pool.ts";

const applyPatch: ToolDefinition = { name: "apply_patch", description: "Edits files.", custom: { format: { type: "grammar", syntax: "lark", definition: APPLY_PATCH } } };
const word: ToolDefinition = { name: "word", custom: { format: { type: "grammar", syntax: "regex", definition: "[a-z]+" } } };
const note: ToolDefinition = { name: "note", description: "Writes a note.", custom: { format: { type: "text" } } };
const getWeather: ToolDefinition = { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } };

const PATCH = '*** Begin Patch\n*** Add File: a.txt\n+say "hi"\n*** End Patch\n';

function requestFor(tools: ToolDefinition[], toolChoice?: GenerationRequest["toolChoice"], messages?: GenerationRequest["messages"]): GenerationRequest {
  return {
    messages: messages ?? [{ role: "user", content: "Edit it." }],
    sampling: { temperature: 1, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: [] },
    maxTokens: 50,
    choices: 1,
    tools,
    ...(toolChoice !== undefined ? { toolChoice } : {}),
  };
}

type Reply = { content: string; calls: { name: string; input: string }[]; reason: string };

async function generate(engine: OpenAiCompatibleEngine, request: GenerationRequest): Promise<Reply> {
  const generation = (await engine.prepare(request)).start(new AbortController().signal);
  const reply: Reply = { content: "", calls: [], reason: "" };
  for await (const part of generation.parts as AsyncIterable<StreamPart>) {
    if (part.type === "text-delta") reply.content += part.text;
    if (part.type === "tool-call-start") reply.calls.push({ name: part.name, input: "" });
    if (part.type === "tool-call-delta") reply.calls[part.index]!.input += part.argumentsDelta;
    if (part.type === "finish") reply.reason = part.reason;
  }
  return reply;
}

describe("custom tools on the upstream engine", () => {
  let upstream: FaultUpstream;
  const engines: OpenAiCompatibleEngine[] = [];
  before(async () => {
    upstream = await FaultUpstream.start();
  });
  after(async () => {
    await Promise.all(engines.map((engine) => engine.close()));
    await upstream.close();
  });

  async function engineOf(kind: UpstreamKind): Promise<OpenAiCompatibleEngine> {
    const engine = new OpenAiCompatibleEngine({
      modelId: "fault-model",
      upstream: upstreamSchema.parse({ urls: [upstream.baseUrl], kind }),
      contextLength: 4096,
      pool: createUpstreamPool({ urls: [upstream.baseUrl], maxInFlight: 4 }),
    });
    engines.push(engine);
    await engine.open();
    return engine;
  }

  /** The body of the last request the upstream received. */
  const lastBody = () => upstream.requests.at(-1)!.body;

  it("sends a text-format tool as a function of one string 'input' and decodes its call's arguments back into text", async () => {
    const engine = await engineOf("vllm");
    const argumentsText = JSON.stringify({ input: PATCH });
    // Cut anywhere, escapes too: the input comes out whole.
    const pieces = [argumentsText.slice(0, 7), argumentsText.slice(7, 31), argumentsText.slice(31, 33), argumentsText.slice(33)];
    upstream.script({ kind: "complete", text: [], toolCalls: [{ name: "note", arguments: pieces }, { name: "get_weather", arguments: ['{"city": "Paris"}'] }] });
    const reply = await generate(engine, requestFor([getWeather, note], "required"));
    assert.deepEqual(reply, {
      content: "",
      calls: [
        { name: "note", input: PATCH },
        { name: "get_weather", input: '{"city": "Paris"}' },
      ],
      reason: "tool_calls",
    });
    const body = lastBody();
    assert.deepEqual((body.tools as unknown[])[1], {
      type: "function",
      function: {
        name: "note",
        description: "Writes a note.",
        parameters: { type: "object", properties: { input: { type: "string", description: "The tool's input, as free text." } }, required: ["input"], additionalProperties: false },
      },
    });
    assert.equal(body.tool_choice, "required");
  });

  it("sends an earlier custom call's raw input as its function's {\"input\": ...} arguments", async () => {
    const engine = await engineOf("vllm");
    const messages: GenerationRequest["messages"] = [
      { role: "user", content: "Edit it." },
      { role: "assistant", content: "", toolCalls: [{ id: "call_1", name: "note", arguments: PATCH }, { id: "call_2", name: "get_weather", arguments: '{"city":"Oslo"}' }] },
      { role: "tool", content: "ok", toolCallId: "call_1" },
    ];
    await generate(engine, requestFor([getWeather, note], "auto", messages));
    const calls = (lastBody().messages as { tool_calls?: { function: { arguments: string } }[] }[])[1]!.tool_calls!;
    assert.deepEqual(JSON.parse(calls[0]!.function.arguments), { input: PATCH });
    assert.equal(calls[1]!.function.arguments, '{"city":"Oslo"}');
  });

  const grammarKinds: { kind: UpstreamKind; field: (gbnf: string) => Record<string, unknown> }[] = [
    { kind: "llama-server", field: (gbnf) => ({ grammar: gbnf }) },
    { kind: "vllm", field: (gbnf) => ({ structured_outputs: { grammar: gbnf } }) },
    { kind: "sglang", field: (gbnf) => ({ ebnf: gbnf }) },
  ];
  for (const { kind, field } of grammarKinds) {
    it(`${kind}: a forced grammar tool goes as the kind's grammar with no tools, and the reply is its call`, async () => {
      const engine = await engineOf(kind);
      upstream.script({ kind: "complete", text: ["*** Begin Patch\n", "*** Delete File: a.txt\n", "*** End Patch\n"] });
      const reply = await generate(engine, { ...requestFor([getWeather, applyPatch], { name: "apply_patch" }), responseFormat: { type: "json_object" } });
      assert.deepEqual(reply, { content: "", calls: [{ name: "apply_patch", input: "*** Begin Patch\n*** Delete File: a.txt\n*** End Patch\n" }], reason: "tool_calls" });
      const body = lastBody();
      for (const absent of ["tools", "tool_choice", "parallel_tool_calls", "response_format"]) assert.ok(!(absent in body), `no '${absent}' in ${JSON.stringify(Object.keys(body))}`);
      const gbnf = larkToGbnf(APPLY_PATCH, "tools[1].format");
      for (const [key, value] of Object.entries(field(gbnf))) assert.deepEqual(body[key], value);

      // `required` with the grammar tool the only one forces it too; a regex goes as GBNF as well.
      upstream.script({ kind: "complete", text: ["hello"] });
      const forced = await generate(engine, requestFor([word], "required"));
      assert.deepEqual(forced.calls, [{ name: "word", input: "hello" }]);
      for (const [key, value] of Object.entries(field(regexToGbnf("[a-z]+", "tools[0].format")))) assert.deepEqual(lastBody()[key], value);
    });
  }

  it("refuses a grammar tool the choice does not force: 'auto', or 'required' among several tools", async () => {
    const engine = await engineOf("vllm");
    const before = upstream.requests.length;
    for (const choice of ["auto", "required"] as const) {
      await assert.rejects(engine.prepare(requestFor([getWeather, applyPatch], choice)), (error: unknown) => {
        assert.ok(error instanceof UnsupportedParameterError, String(error));
        assert.equal(error.param, "tools[1].format");
        assert.match(error.message, /'apply_patch' cannot be enforced by this model's upstream servers \(vllm\) unless the tool choice forces that tool/);
        return true;
      });
    }
    // Nothing can call it: sent as a function, no grammar needed.
    upstream.script({ kind: "complete", text: ["Sunny."] });
    assert.equal((await generate(engine, requestFor([getWeather, applyPatch], "none"))).content, "Sunny.");
    upstream.script({ kind: "complete", text: [], toolCalls: [{ name: "get_weather", arguments: ["{}"] }] });
    assert.equal((await generate(engine, requestFor([getWeather, applyPatch], { name: "get_weather" }))).calls[0]!.name, "get_weather");
    assert.equal(upstream.requests.length, before + 2, "refused requests never reach the upstream");
  });

  for (const kind of ["ollama", "openai"] as const) {
    it(`${kind}: refuses any grammar tool, even forced (it takes no grammar); a text-format one goes`, async () => {
      const engine = await engineOf(kind);
      await assert.rejects(engine.prepare(requestFor([applyPatch], "required")), (error: unknown) => {
        assert.ok(error instanceof UnsupportedParameterError, String(error));
        assert.equal(error.status, 400);
        assert.equal(error.code, "unsupported_parameter");
        assert.equal(error.param, "tools[0].format");
        assert.match(error.message, new RegExp(`'apply_patch' cannot be enforced by this model's upstream servers \\(${kind}\\): they take no grammar`));
        return true;
      });
      upstream.script({ kind: "complete", text: [], toolCalls: [{ name: "note", arguments: ['{"input": "a\\nb"}'] }] });
      assert.deepEqual((await generate(engine, requestFor([note]))).calls, [{ name: "note", input: "a\nb" }]);
    });
  }

  it("says in its capabilities whether a kind enforces custom tools' grammars", async () => {
    assert.ok((await engineOf("llama-server")).capabilities().supportedParameters.includes("custom_tool_grammar"));
    const ollama = (await engineOf("ollama")).capabilities().supportedParameters;
    assert.ok(ollama.includes("custom_tools") && !ollama.includes("custom_tool_grammar"));
  });
});
