/**
 * Every recorded upstream stream in `__fixtures__/` runs through the SSE decoder and the chunk
 * reader. Each file's first line may be a comment `: turnpike-fixture {json}` saying how many
 * choices were asked, the prompt bound and whether log probabilities were asked (defaults: 1,
 * 100, true). Every fixture must end each choice with exactly one finish (or fail with a typed
 * error); the ones listed below also have their parts and usage pinned.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { GenerationUsage, StreamPart } from "../engine.ts";
import { decodeServerSentEvents, SseProtocolError } from "./sse-decoder.ts";
import { ChunkReader, readServerSentEvent, UpstreamProtocolError, UpstreamStreamError, type ChunkReaderOptions } from "./chunk-reader.ts";
import { DIALECTS } from "./dialects.ts";
import type { UpstreamKind } from "./config-schema.ts";
import { classifyStreamError } from "./upstream-errors.ts";

const FIXTURES = join(import.meta.dirname, "__fixtures__");

type Meta = { choices: number; promptTokens: number; logprobs: boolean; newCallIds?: string[] };

type ChoiceSummary = {
  text: string;
  reasoning: string;
  toolCalls: { id: string; name: string; arguments: string }[];
  finish: string[];
  logprobs?: [string, number, number[], number][];
};

type Summary = {
  choices: ChoiceSummary[];
  usage: GenerationUsage;
  /** `done`: [DONE] or every choice finished; `cut`: the bytes ended before; else the error's code. */
  ending: string;
};

function metaOf(text: string): Meta {
  const match = /^: turnpike-fixture (\{.*\})\r?\n/.exec(text);
  const given = match === null ? {} : (JSON.parse(match[1]!) as Partial<Meta>);
  return { choices: given.choices ?? 1, promptTokens: given.promptTokens ?? 100, logprobs: given.logprobs ?? true, ...(given.newCallIds ? { newCallIds: given.newCallIds } : {}) };
}

async function* bytesOf(text: string): AsyncGenerator<Uint8Array> {
  const bytes = new TextEncoder().encode(text);
  // Uneven pieces, as a network delivers them.
  for (let start = 0, size = 7; start < bytes.length; start += size, size = (size * 5) % 61 + 3) yield bytes.slice(start, start + size);
}

/** What the engine would make of a recorded stream; `options`: more of the reader's (a kind's stop sequence field). */
async function run(text: string, options: Partial<ChunkReaderOptions> = {}): Promise<{ summary: Summary; parts: StreamPart[] }> {
  const meta = metaOf(text);
  const ids = [...(meta.newCallIds ?? [])];
  const reader = new ChunkReader({ choices: meta.choices, promptTokens: meta.promptTokens, logprobs: meta.logprobs, newCallId: () => ids.shift() ?? "call_made_up", ...options });
  const parts: StreamPart[] = [];
  let ending = "cut";
  try {
    for await (const event of decodeServerSentEvents(bytesOf(text))) {
      const read = readServerSentEvent(reader, event);
      if (read.done) {
        ending = "done";
        break;
      }
      parts.push(...read.parts);
    }
    if (ending === "done" || reader.allFinished) {
      ending = "done";
      parts.push(...reader.end());
    }
  } catch (error) {
    if (error instanceof UpstreamStreamError) ending = classifyStreamError(error.payload).error.code;
    else if (error instanceof UpstreamProtocolError || error instanceof SseProtocolError) ending = "protocol";
    else throw error;
  }
  const choices: ChoiceSummary[] = Array.from({ length: meta.choices }, () => ({ text: "", reasoning: "", toolCalls: [], finish: [] }));
  for (const part of parts) {
    const choice = choices[part.choice]!;
    switch (part.type) {
      case "text-delta":
        choice.text += part.text;
        if (part.logprobs !== undefined) (choice.logprobs ??= []).push(...part.logprobs.map((token): [string, number, number[], number] => [token.token, token.logprob, token.bytes, token.topLogprobs.length]));
        break;
      case "reasoning-delta":
        choice.reasoning += part.text;
        break;
      case "tool-call-start":
        assert.equal(choice.toolCalls.length, part.index, "calls are numbered in order from 0");
        choice.toolCalls.push({ id: part.id, name: part.name, arguments: "" });
        break;
      case "tool-call-delta":
        choice.toolCalls[part.index]!.arguments += part.argumentsDelta;
        break;
      case "finish":
        choice.finish.push(part.reason);
        break;
    }
  }
  return { summary: { choices, usage: reader.usage(), ending }, parts };
}

const fixtureFiles = readdirSync(FIXTURES).filter((name) => name.endsWith(".sse")).sort();

test("there are recorded streams for vLLM, SGLang, Ollama and OpenAI", () => {
  for (const kind of ["vllm-", "sglang-", "ollama-", "openai-"]) assert.ok(fixtureFiles.some((name) => name.startsWith(kind)), kind);
});

for (const name of fixtureFiles) {
  test(`${name}: each choice finishes exactly once, or the stream fails with a typed error`, async () => {
    const { summary } = await run(readFileSync(join(FIXTURES, name), "utf8"));
    if (summary.ending === "done") for (const choice of summary.choices) assert.equal(choice.finish.length, 1);
    else for (const choice of summary.choices) assert.equal(choice.finish.length, 0, "a failed stream gives no finish: the engine throws");
    for (const choice of summary.choices) for (const call of choice.toolCalls) assert.doesNotThrow(() => JSON.parse(call.arguments), `${call.name}'s arguments are whole JSON`);
  });
}

const text = (value: string, finish = "stop"): ChoiceSummary => ({ text: value, reasoning: "", toolCalls: [], finish: [finish] });
const upstream = (promptTokens: number, completionTokens: number, more: Partial<GenerationUsage> = {}): GenerationUsage => ({ promptTokens, cachedPromptTokens: 0, completionTokens, ...more, source: "upstream" });

const EXPECTED: Record<string, Summary> = {
  "vllm-text.sse": { ending: "done", choices: [text("Hello! How can I help?")], usage: upstream(18, 8) },
  "vllm-tool-calls.sse": {
    ending: "done",
    choices: [
      {
        text: "",
        reasoning: "",
        toolCalls: [
          { id: "chatcmpl-tool-4b1e0c2d9a8f4e7b", name: "get_weather", arguments: '{"city": "Paris", "unit": "celsius"}' },
          { id: "chatcmpl-tool-77aa01c3e5d94b12", name: "get_time", arguments: '{"timezone": "Europe/Paris"}' },
        ],
        finish: ["tool_calls"],
      },
    ],
    usage: upstream(212, 41),
  },
  "vllm-whole-tool-calls.sse": {
    ending: "done",
    choices: [
      {
        text: "",
        reasoning: "",
        toolCalls: [
          { id: "chatcmpl-tool-0e5f", name: "get_weather", arguments: '{"city": "Oslo"}' },
          { id: "call_made_up_1", name: "get_weather", arguments: '{"city": "Bergen"}' },
        ],
        finish: ["tool_calls"],
      },
    ],
    usage: upstream(150, 24),
  },
  "vllm-reasoning.sse": { ending: "done", choices: [{ text: "\n\nHi there!", reasoning: "The user greets me.", toolCalls: [], finish: ["length"] }], usage: upstream(25, 7) },
  "vllm-logprobs.sse": {
    ending: "done",
    choices: [
      {
        ...text("Oui é"),
        logprobs: [
          ["Oui", -0.0123, [79, 117, 105], 2],
          [" é", -0.5, [32, 195, 169], 2],
        ],
      },
    ],
    usage: upstream(12, 3),
  },
  "vllm-n2.sse": { ending: "done", choices: [text("Red apple"), text("Blue sky today", "length")], usage: upstream(10, 5) },
  "vllm-error.sse": { ending: "upstream_error", choices: [{ text: "Once upon", reasoning: "", toolCalls: [], finish: [] }], usage: { source: "estimated", promptTokens: 30, cachedPromptTokens: 0, completionTokens: 2 } },
  "sglang-text.sse": { ending: "done", choices: [text("The capital is Paris.")], usage: upstream(14, 6) },
  "sglang-reasoning-tools.sse": {
    ending: "done",
    choices: [
      {
        text: "",
        reasoning: "I should call the weather tool.",
        toolCalls: [{ id: "call_5d0a3bb1c2e34f0d9c1a", name: "get_weather", arguments: '{"city": "Paris"}' }],
        finish: ["tool_calls"],
      },
    ],
    usage: upstream(320, 32, { cachedPromptTokens: 256, reasoningTokens: 12 }),
  },
  "sglang-error-before-content.sse": {
    ending: "context_length_exceeded",
    choices: [{ text: "", reasoning: "", toolCalls: [], finish: [] }],
    usage: { source: "estimated", promptTokens: 9500, cachedPromptTokens: 0, completionTokens: 0 },
  },
  "ollama-text.sse": { ending: "done", choices: [text("Why did the chicken...")], usage: upstream(31, 6) },
  "ollama-reasoning-tools.sse": {
    ending: "done",
    choices: [
      {
        text: "",
        reasoning: "Weather for two cities.",
        toolCalls: [
          { id: "call_k3j1q8zt", name: "get_weather", arguments: '{"city":"Paris"}' },
          { id: "call_p9x2m4wd", name: "get_weather", arguments: '{"city":"Rome"}' },
        ],
        finish: ["tool_calls"],
      },
    ],
    usage: upstream(180, 44),
  },
  "ollama-cut.sse": { ending: "cut", choices: [{ text: "It was a", reasoning: "", toolCalls: [], finish: [] }], usage: { source: "estimated", promptTokens: 55, cachedPromptTokens: 0, completionTokens: 3 } },
  "openai-text.sse": { ending: "done", choices: [text("Sure, here it is.")], usage: upstream(1536, 6, { cachedPromptTokens: 1024 }) },
  "openai-tool-calls.sse": {
    ending: "done",
    choices: [
      {
        text: "",
        reasoning: "",
        toolCalls: [
          { id: "call_Xq1bT8mZr2", name: "get_weather", arguments: '{"city": "Paris"}' },
          { id: "call_Lp4vW9nK0s", name: "get_weather", arguments: '{"city": "Tokyo"}' },
        ],
        finish: ["tool_calls"],
      },
    ],
    usage: upstream(88, 36),
  },
  "openai-logprobs.sse": {
    ending: "done",
    choices: [
      {
        ...text("Yes."),
        logprobs: [
          ["Yes", -0.0001, [89, 101, 115], 2],
          [".", -0.3, [46], 2],
        ],
      },
    ],
    usage: upstream(9, 2),
  },
  "openai-error.sse": { ending: "upstream_error", choices: [{ text: "The answer", reasoning: "", toolCalls: [], finish: [] }], usage: { source: "estimated", promptTokens: 20, cachedPromptTokens: 0, completionTokens: 2 } },
  "openai-content-filter.sse": { ending: "done", choices: [text("I can", "content_filter")], usage: upstream(40, 2) },
  "openai-reasoning-usage.sse": { ending: "done", choices: [text("42")], usage: upstream(25, 210, { reasoningTokens: 192 }) },
};

for (const [name, expected] of Object.entries(EXPECTED)) {
  test(`${name}: parts and usage as recorded`, async () => {
    const { summary } = await run(readFileSync(join(FIXTURES, name), "utf8"));
    assert.deepEqual(summary, expected);
  });
}

test("every pinned fixture exists", () => {
  for (const name of Object.keys(EXPECTED)) assert.ok(fixtureFiles.includes(name), name);
});

test("vLLM's running usage is the estimate when its stream is cut before the final count", async () => {
  const whole = readFileSync(join(FIXTURES, "vllm-reasoning.sse"), "utf8");
  // Keep the header and the first five events: the reasoning and the first word of the answer.
  const cut = whole.split("\n\n").slice(0, 6).join("\n\n") + "\n\n";
  const { summary } = await run(cut);
  assert.equal(summary.ending, "cut");
  assert.deepEqual(summary.usage, { source: "estimated", promptTokens: 25, cachedPromptTokens: 0, completionTokens: 4 });
});

test("the streams recorded from a real llama-server read whole: each choice finishes once, with the content and usage it sent", async () => {
  const files = readdirSync(FIXTURES).filter((file) => file.startsWith("llama-server-") && file.endsWith(".sse"));
  assert.ok(files.length >= 10, `recorded llama-server streams (${files.length})`);
  for (const file of files) {
    const text = readFileSync(join(FIXTURES, file), "utf8");
    const choices = 1 + Math.max(0, ...[...text.matchAll(/"index":(\d+),"delta"/g)].map((match) => Number(match[1])));
    const { summary } = await run(`: turnpike-fixture ${JSON.stringify({ choices, promptTokens: 1000, logprobs: true })}\n${text}`);
    assert.equal(summary.ending, "done", file);
    for (const choice of summary.choices) assert.equal(choice.finish.length, 1, `${file}: one finish per choice`);
    if (choices === 1) {
      const sent = [...text.matchAll(/"delta":\{"content":("(?:[^"\\]|\\.)*")\}/g)].map((match) => JSON.parse(match[1]!) as string).join("");
      assert.equal(summary.choices[0]!.text, sent, `${file}: the content as sent`);
    }
    if (/"usage":\{/.test(text) && choices === 1) {
      assert.equal(summary.usage.source, "upstream", file);
      const reported = JSON.parse(/"usage":(\{[^}]*\}[^}]*\})/.exec(text)?.[1] ?? /"usage":(\{[^}]*\})/.exec(text)![1]!) as { completion_tokens: number };
      assert.equal(summary.usage.completionTokens, reported.completion_tokens, file);
    }
  }
});

test("no recorded stream names a stop string: llama-server's says nothing of the one it met, SGLang's end-of-text id is none", async () => {
  const index = JSON.parse(readFileSync(join(FIXTURES, "llama-server-index.json"), "utf8")) as { cases: { file: string; request: { body: { stop?: string[] } } }[] };
  const kinds = Object.keys(DIALECTS) as UpstreamKind[];
  let stopped = 0;
  for (const file of fixtureFiles) {
    const kind = kinds.find((candidate) => file.startsWith(`${candidate}-`))!;
    const field = DIALECTS[kind].stopSequenceField;
    const stop = index.cases.find((entry) => entry.file === file)?.request.body.stop ?? [];
    const text = readFileSync(join(FIXTURES, file), "utf8");
    const { parts } = await run(text, { ...(field !== undefined ? { stopSequenceField: field } : {}), stop });
    for (const part of parts) {
      if (part.type !== "finish") continue;
      assert.equal(part.stopSequence, undefined, `${file}: choice ${part.choice}`);
      if (stop.length > 0 && part.reason === "stop") stopped++;
    }
  }
  assert.equal(stopped, 1, "llama-server-stop-sequence.sse ended on its stop string 'cat', and said only `stop`");
});
