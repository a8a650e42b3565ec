/**
 * Custom (freeform) tools through `POST /v1/responses` on the embedded engine (stories260K, a model
 * that knows nothing of tools or patches): a forced call of a grammar tool is a `custom_tool_call`
 * item whose input the grammar accepts, every time, because only the grammar can make a tiny story
 * model write a patch; streamed, its input arrives as `response.custom_tool_call_input.delta`
 * events that join to the item's input. Codex's own apply_patch grammar (unbounded lines) is
 * enforced too: a call the token limit cuts is a valid start of a patch and the response says it
 * is `incomplete`. A model whose engine cannot take custom tools refuses them naming the tool.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { FakeEngine } from "../src/engines/fake/fake-engine.ts";
import { GrammarRecognizer } from "../src/engines/grammar/grammar-recognizer.ts";
import { parseLarkGrammar } from "../src/engines/grammar/lark-grammar.ts";
import { APPLY_PATCH, BOUNDED_APPLY_PATCH } from "../src/engines/grammar/test-grammars.ts";
import { checkEventGrammar, responseResourceSchema } from "./helpers/responses-schemas.ts";
import { startTestServer, storiesModel, type TestServer } from "./helpers/server.ts";

const applyPatch = (definition: string) => ({
  type: "custom" as const,
  name: "apply_patch",
  description: "Edit files with a patch.",
  format: { type: "grammar" as const, syntax: "lark" as const, definition },
});

type CustomCall = { type: "custom_tool_call"; id: string; call_id: string; name: string; input: string; status: string };

describe("custom tools through the Responses API on the embedded engine", () => {
  let server: TestServer;

  before(async () => {
    // The embedded stories260K, and a fake engine (which takes no custom tools) beside it.
    server = await startTestServer({ flags: { models: [storiesModel, "no-tools=/nonexistent/no-tools.gguf"] }, engines: { "no-tools": new FakeEngine() } });
  });

  after(async () => {
    await server?.close();
  });

  const model = () => server.server.catalog.list().find((entry) => entry.id !== "no-tools")!.id;

  it("answers 50 of 50 forced apply_patch calls (bounded grammar) with an input the grammar accepts", async () => {
    const bounded = new GrammarRecognizer(parseLarkGrammar(BOUNDED_APPLY_PATCH));
    const full = new GrammarRecognizer(parseLarkGrammar(APPLY_PATCH));
    let parsed = 0;
    for (let run = 0; run < 50; run++) {
      const response = await server.client.responses.create({
        model: model(),
        input: "Add a file hello.txt that says hi.",
        tools: [applyPatch(BOUNDED_APPLY_PATCH)],
        tool_choice: { type: "custom", name: "apply_patch" },
        temperature: 0.5 + (run % 5) * 0.2,
        max_output_tokens: 400,
      });
      const calls = response.output.filter((item) => item.type === "custom_tool_call") as unknown as CustomCall[];
      assert.equal(calls.length, 1, JSON.stringify(response.output));
      const call = calls[0]!;
      assert.equal(call.name, "apply_patch");
      assert.equal(response.status, "completed", `run ${run}: ${JSON.stringify(call.input)}`);
      assert.ok(bounded.accepts(call.input), `run ${run}: the bounded grammar refuses ${JSON.stringify(call.input)}`);
      assert.ok(full.accepts(call.input), `run ${run}: Codex's grammar refuses ${JSON.stringify(call.input)}`);
      parsed++;
    }
    assert.equal(parsed, 50);
  });

  it("keeps Codex's unbounded apply_patch grammar: a call cut by the limit is a valid start of a patch, and the response says incomplete", async () => {
    const full = new GrammarRecognizer(parseLarkGrammar(APPLY_PATCH));
    for (let run = 0; run < 5; run++) {
      const response = await server.client.responses.create({
        model: model(),
        input: "Fix the bug.",
        tools: [applyPatch(APPLY_PATCH)],
        tool_choice: { type: "custom", name: "apply_patch" },
        temperature: 0.8,
        max_output_tokens: 48,
      });
      const call = response.output.find((item) => item.type === "custom_tool_call") as unknown as CustomCall;
      assert.ok(call !== undefined, JSON.stringify(response.output));
      if (response.status === "completed") assert.ok(full.accepts(call.input), JSON.stringify(call.input));
      else {
        assert.equal(response.status, "incomplete");
        assert.equal(response.incomplete_details?.reason, "max_output_tokens");
        assert.equal(call.status, "incomplete");
        assert.ok(full.acceptsPrefix(call.input), `not a start of a patch: ${JSON.stringify(call.input)}`);
      }
    }
  });

  it("streams a custom call's input as custom_tool_call_input deltas that join to the stored item's input", async () => {
    const response = await fetch(`${server.baseURL}/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${server.key}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: model(),
        input: "Add a file.",
        tools: [applyPatch(BOUNDED_APPLY_PATCH)],
        tool_choice: { type: "custom", name: "apply_patch" },
        max_output_tokens: 400,
        stream: true,
      }),
    });
    assert.equal(response.status, 200);
    const events = (await response.text())
      .split("\n")
      .filter((line) => line.startsWith("data: ") && line !== "data: [DONE]")
      .map((line) => JSON.parse(line.slice(6)) as Record<string, unknown>);
    const deltas = events.filter((event) => event.type === "response.custom_tool_call_input.delta").map((event) => event.delta as string);
    const done = events.find((event) => event.type === "response.custom_tool_call_input.done") as { input: string } | undefined;
    assert.ok(deltas.length > 1 && done !== undefined, events.map((event) => event.type).join(" "));
    assert.equal(deltas.join(""), done.input);
    const terminal = events.at(-1) as { response: { id: string; output: CustomCall[] } };
    const stored = await server.client.responses.retrieve(terminal.response.id);
    assert.equal(responseResourceSchema.safeParse(JSON.parse(JSON.stringify(stored))).success, true);
    assert.deepEqual(checkEventGrammar(events, { finalResource: terminal.response }), []);
    assert.equal((stored.output[0] as unknown as CustomCall).input, done.input);
    assert.ok(new GrammarRecognizer(parseLarkGrammar(BOUNDED_APPLY_PATCH)).accepts(done.input));
  });

  it("refuses custom tools on a model whose engine cannot take them, naming the tool", async () => {
    const refused = await fetch(`${server.baseURL}/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${server.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "no-tools", input: "Patch it.", tools: [applyPatch(BOUNDED_APPLY_PATCH)], max_output_tokens: 16 }),
    });
    assert.equal(refused.status, 400);
    const body = (await refused.json()) as { error: { code: string; param: string } };
    assert.equal(body.error.code, "unsupported_parameter");
    assert.equal(body.error.param, "tools[0]");
  });
});
