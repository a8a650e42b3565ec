/**
 * A custom tool's grammar enforced by a real llama-server upstream (stories260K-chatml, one
 * thread): the upstream engine sends a forced regex tool as llama-server's `grammar` (GBNF), and
 * the reply comes back as one call whose input matches the regex, seed after seed, where only
 * the grammar can make that true. Skipped outside CI when llama-server is not built.
 */
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { GenerationRequest, StreamPart, ToolDefinition } from "../src/engines/engine.ts";
import { upstreamSchema } from "../src/engines/openai-compatible/config-schema.ts";
import { OpenAiCompatibleEngine } from "../src/engines/openai-compatible/openai-compatible-engine.ts";
import { createUpstreamPool } from "../src/engines/openai-compatible/pool.ts";
import { sharedModelsDir, skipWithoutLlamaServer, startLlamaServer, type RunningLlamaServer } from "./helpers/llama-server.ts";

/** Bounded, so every reply ends by the grammar well within its token limit. */
const PATTERN = "[a-z]{2,10}( [a-z]{2,10}){0,3}";
const word: ToolDefinition = { name: "words", description: "Says a few words.", custom: { format: { type: "grammar", syntax: "regex", definition: PATTERN } } };

describe("a custom tool's grammar on a real llama-server upstream", { skip: skipWithoutLlamaServer() }, () => {
  let llama: RunningLlamaServer;
  let engine: OpenAiCompatibleEngine;
  before(async () => {
    llama = await startLlamaServer({ model: path.join(sharedModelsDir, "stories260K-chatml.gguf") });
    const url = `${llama.url}/v1`;
    engine = new OpenAiCompatibleEngine({
      modelId: "story",
      upstream: upstreamSchema.parse({ urls: [url], kind: "llama-server", first_token_timeout: 30, idle_timeout: 30 }),
      contextLength: 2048,
      pool: createUpstreamPool({ urls: [url], maxInFlight: 1 }),
    });
    await engine.open();
  });
  after(async () => {
    await engine?.close();
    await llama?.close();
  });

  it("forces calls whose inputs all match the regex", async () => {
    const regex = new RegExp(`^(?:${PATTERN})$`);
    for (let seed = 1; seed <= 10; seed++) {
      const request: GenerationRequest = {
        messages: [{ role: "user", content: "Once upon a time" }],
        sampling: { temperature: 1, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: [], seed },
        maxTokens: 200,
        choices: 1,
        tools: [word],
        toolChoice: { name: "words" },
      };
      const generation = (await engine.prepare(request)).start(new AbortController().signal);
      const calls: { name: string; input: string }[] = [];
      let reason = "";
      let content = "";
      for await (const part of generation.parts as AsyncIterable<StreamPart>) {
        if (part.type === "text-delta") content += part.text;
        if (part.type === "tool-call-start") calls.push({ name: part.name, input: "" });
        if (part.type === "tool-call-delta") calls[part.index]!.input += part.argumentsDelta;
        if (part.type === "finish") reason = part.reason;
      }
      assert.equal(content, "");
      assert.equal(reason, "tool_calls", `seed ${seed}: ${JSON.stringify(calls)}`);
      assert.equal(calls.length, 1);
      assert.equal(calls[0]!.name, "words");
      assert.match(calls[0]!.input, regex, `seed ${seed}`);
    }
  });
});
