/**
 * End-to-end: the official `openai` client against a real server running the real
 * stories260K model. Each behaviour is checked streaming and non-streaming.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { ChatMLChatWrapper, getLlama, Llama2ChatWrapper, type ChatHistoryItem } from "node-llama-cpp";
import type OpenAI from "openai";
import { startTestServer, storiesChatmlModel, storiesModel, type TestServer } from "./helpers/server.ts";

type Params = OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming;

let test: TestServer;

before(async () => {
  test = await startTestServer({ flags: { models: [storiesModel, `chatml=${storiesChatmlModel}`] } });
});
after(async () => {
  await test?.close();
});

type Result = {
  id: string;
  model: string;
  created: number;
  content: string;
  finishReason: string | null;
  usage: OpenAI.CompletionUsage | undefined;
  chunks: OpenAI.Chat.Completions.ChatCompletionChunk[];
};

/** Runs a request streaming or not, and returns the same shape either way. */
async function run(params: Params, stream: boolean): Promise<Result> {
  if (!stream) {
    const completion = await test.client.chat.completions.create(params);
    assert.equal(completion.object, "chat.completion");
    assert.equal(completion.choices.length, 1);
    const choice = completion.choices[0]!;
    assert.equal(choice.index, 0);
    assert.equal(choice.message.role, "assistant");
    assert.equal(choice.message.refusal, null);
    assert.equal(choice.logprobs, null);
    return {
      id: completion.id,
      model: completion.model,
      created: completion.created,
      content: choice.message.content ?? "",
      finishReason: choice.finish_reason,
      usage: completion.usage,
      chunks: [],
    };
  }
  const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
  const streamed = await test.client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  for await (const chunk of streamed) chunks.push(chunk);
  const choiceChunks = chunks.filter((chunk) => chunk.choices.length > 0);
  const usageChunk = chunks.at(-1)!;
  assert.deepEqual(usageChunk.choices, [], "the last chunk carries only usage");
  for (const chunk of chunks) {
    assert.equal(chunk.object, "chat.completion.chunk");
    assert.equal(chunk.id, chunks[0]!.id);
    assert.equal(chunk.created, chunks[0]!.created);
    assert.equal(chunk.model, chunks[0]!.model);
  }
  assert.equal(choiceChunks[0]!.choices[0]!.delta.role, "assistant", "the first delta carries the role");
  const finishChunks = choiceChunks.filter((chunk) => chunk.choices[0]!.finish_reason !== null);
  assert.equal(finishChunks.length, 1, "exactly one chunk has a finish_reason");
  assert.equal(finishChunks[0], choiceChunks.at(-1), "the finish_reason chunk is the last choice chunk");
  return {
    id: chunks[0]!.id,
    model: chunks[0]!.model,
    created: chunks[0]!.created,
    content: choiceChunks.map((chunk) => chunk.choices[0]!.delta.content ?? "").join(""),
    finishReason: finishChunks[0]!.choices[0]!.finish_reason,
    usage: usageChunk.usage ?? undefined,
    chunks,
  };
}

const story: Params = {
  model: "stories260K",
  messages: [{ role: "user", content: "Tell me a story about a cat." }],
  temperature: 0,
  max_tokens: 48,
};

/** Prompt tokens as node-llama-cpp renders the conversation with the given wrapper. */
async function expectedPromptTokens(modelPath: string, wrapper: Llama2ChatWrapper | ChatMLChatWrapper, history: ChatHistoryItem[]): Promise<number> {
  const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, maxThreads: 1 });
  const model = await llama.loadModel({ modelPath });
  try {
    const state = wrapper.generateContextState({ chatHistory: [...history, { type: "model", response: [] }] });
    return state.contextText.tokenize(model.tokenizer).length;
  } finally {
    await model.dispose();
  }
}

for (const stream of [false, true]) {
  const mode = stream ? "streaming" : "non-streaming";

  describe(`chat completions (${mode})`, () => {
    it("answers in the OpenAI format with an id, the model and exact usage", async () => {
      const result = await run(story, stream);
      assert.match(result.id, /^chatcmpl-/);
      assert.equal(result.model, "stories260K");
      assert.ok(Math.abs(result.created - Date.now() / 1000) < 60);
      assert.ok(result.content.length > 0);
      assert.ok(result.finishReason === "stop" || result.finishReason === "length");
      assert.ok(result.usage);
      const expected = await expectedPromptTokens(storiesModel, new Llama2ChatWrapper(), [{ type: "user", text: "Tell me a story about a cat." }]);
      assert.equal(result.usage.prompt_tokens, expected, "prompt tokens are counted with the model's tokenizer");
      assert.equal(result.usage.total_tokens, result.usage.prompt_tokens + result.usage.completion_tokens);
      assert.ok(result.usage.completion_tokens > 0 && result.usage.completion_tokens <= 48);
    });

    it("stops at max_tokens with finish_reason length and counts exactly that many tokens", async () => {
      const result = await run({ ...story, max_tokens: 7 }, stream);
      assert.equal(result.finishReason, "length");
      assert.equal(result.usage?.completion_tokens, 7);
      const second = await run({ ...story, max_tokens: undefined, max_completion_tokens: 5 }, stream);
      assert.equal(second.finishReason, "length");
      assert.equal(second.usage?.completion_tokens, 5);
    });

    it("is greedy and deterministic at temperature 0", async () => {
      const first = await run(story, stream);
      const second = await run(story, stream);
      assert.equal(second.content, first.content);
    });

    it("reproduces a sample with the same seed", async () => {
      const sampled = { ...story, temperature: 1, seed: 1234 };
      const first = await run(sampled, stream);
      const second = await run(sampled, stream);
      assert.equal(second.content, first.content);
      const others = await Promise.all([7, 99, 31337].map((seed) => run({ ...sampled, seed }, stream)));
      assert.ok(
        others.some((other) => other.content !== first.content),
        "different seeds give different samples",
      );
    });

    it("ends at a stop sequence and does not return it", async () => {
      const full = await run({ ...story, max_tokens: 40 }, stream);
      const words = full.content.trim().split(/\s+/);
      assert.ok(words.length > 4, `need some words, got: ${full.content}`);
      const stopWord = words[3]!;
      const result = await run({ ...story, max_tokens: 40, stop: ["zzz-never", stopWord] }, stream);
      assert.equal(result.finishReason, "stop");
      assert.ok(!result.content.includes(stopWord), `'${result.content}' must not contain '${stopWord}'`);
      assert.equal(result.content, full.content.slice(0, full.content.indexOf(stopWord)));
      const single = await run({ ...story, max_tokens: 40, stop: stopWord }, stream);
      assert.equal(single.content, result.content);
    });

    it("takes every role and text content parts", async () => {
      const result = await run(
        {
          model: "stories260K",
          temperature: 0,
          max_tokens: 10,
          messages: [
            { role: "system", content: "You tell stories." },
            { role: "developer", content: [{ type: "text", text: "Keep it short." }] },
            { role: "user", content: [{ type: "text", text: "Once" }, { type: "text", text: " upon a time" }], name: "ann" },
            { role: "assistant", content: "there was a dog.", tool_calls: [{ id: "call_1", type: "function", function: { name: "weather", arguments: "{}" } }] },
            { role: "tool", content: "sunny", tool_call_id: "call_1" },
            { role: "user", content: "Go on." },
          ],
        },
        stream,
      );
      assert.ok(result.usage && result.usage.prompt_tokens > 20);
      assert.ok(result.finishReason === "stop" || result.finishReason === "length");
    });

    it("uses the chat template stored in the GGUF", async () => {
      const result = await run({ ...story, model: "chatml", max_tokens: 4 }, stream);
      const expected = await expectedPromptTokens(storiesChatmlModel, new ChatMLChatWrapper(), [{ type: "user", text: "Tell me a story about a cat." }]);
      assert.equal(result.usage?.prompt_tokens, expected);
      assert.equal(result.model, "chatml");
    });
  });
}

describe("chat completions (both modes)", () => {
  it("streams exactly the text it returns whole at temperature 0", async () => {
    for (const max_tokens of [16, 64]) {
      const whole = await run({ ...story, max_tokens }, false);
      const streamed = await run({ ...story, max_tokens }, true);
      assert.equal(streamed.content, whole.content);
      assert.equal(streamed.finishReason, whole.finishReason);
      assert.deepEqual(
        { prompt: streamed.usage?.prompt_tokens, completion: streamed.usage?.completion_tokens },
        { prompt: whole.usage?.prompt_tokens, completion: whole.usage?.completion_tokens },
      );
    }
  });

  it("omits the usage chunk unless include_usage is set", async () => {
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const chunk of await test.client.chat.completions.create({ ...story, stream: true, max_tokens: 5 })) chunks.push(chunk);
    assert.ok(chunks.every((chunk) => chunk.choices.length === 1 && chunk.usage === undefined));
    assert.equal(chunks.at(-1)!.choices[0]!.finish_reason, "length");
  });

  it("reports reused prompt prefixes as cached tokens", async () => {
    const messages: Params["messages"] = [
      { role: "system", content: "A long shared system prompt about cats, dogs, birds and a very small mouse." },
      { role: "user", content: "First question." },
    ];
    await test.client.chat.completions.create({ ...story, messages, max_tokens: 2 });
    const second = await test.client.chat.completions.create({
      ...story,
      messages: [messages[0]!, { role: "user", content: "Second question." }],
      max_tokens: 2,
    });
    assert.ok((second.usage?.prompt_tokens_details?.cached_tokens ?? 0) > 10, JSON.stringify(second.usage));
  });
});
