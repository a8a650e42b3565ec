/**
 * Records what a real llama-server answers, for the openai-compatible engine's tests: streamed
 * chat completions (plain, with usage, with logprobs, with `n`, with tools, with a JSON schema,
 * refusals) byte for byte, and its own endpoints (`/props`, `/tokenize`, `/apply-template` ...).
 *
 *   node_modules/.bin/node scripts/capture-llama-server-fixtures.ts [--out src/engines/openai-compatible/__fixtures__]
 *
 * Needs the binary of scripts/build-llama-server.sh and ../shared/models/stories260K-chatml.gguf.
 * Two servers answer: one with the model's own ChatML template (no tool syntax), and one given
 * Qwen2.5's tool-calling template (`--chat-template-file`, read out of the same llama.cpp bundle),
 * for the `qwen-template-*` cases.
 * Each answer's body is written as received: `llama-server-<case>.sse` when it came as an event
 * stream, `llama-server-<case>.json` otherwise (non-streamed answers, error bodies).
 * `llama-server-index.json` lists every case with its request, status and content type, and the
 * llama-server build that answered. Ids and timings differ from run to run; the text does not
 * (temperature 0, one thread).
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { findLlamaServer, sharedModelsDir, startLlamaServer } from "../test/helpers/llama-server.ts";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const { values: flags } = parseArgs({
  options: {
    out: { type: "string", default: path.join(repoRoot, "src/engines/openai-compatible/__fixtures__") },
  },
});

/** The llama-server options the fixtures were captured with (also written into the index). */
const serverOptions = {
  model: path.join(sharedModelsDir, "stories260K-chatml.gguf"),
  threads: 1,
  parallel: 2,
  /** Shared by the slots: 1024 tokens each. */
  contextSize: 2048,
  /** The model's name in answers (its path otherwise). */
  extraArgs: ["--alias", "stories260K-chatml"],
};

const messages = [
  { role: "system", content: "You are a storyteller." },
  { role: "user", content: "Tell me a story about a cat." },
];
const base = { model: "stories260K-chatml", messages, temperature: 0, max_tokens: 12 };
const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};
const personSchema = {
  type: "object",
  properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer" } },
  required: ["name", "age"],
  additionalProperties: false,
};

/**
 * `body` may be made from the answers before it (by case name), e.g. /detokenize of /tokenize's
 * tokens. `server` is which one answers (default "chatml").
 */
/** A finished tool round: the assistant's call and the tool's answer. */
const toolConversation = [
  { role: "user", content: "What is the weather in Paris?" },
  {
    role: "assistant",
    content: null,
    tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris" }) } }],
  },
  { role: "tool", tool_call_id: "call_1", content: "Sunny, 21 C" },
];

type Case = {
  name: string;
  method: "GET" | "POST";
  path: string;
  body?: unknown | ((answers: Map<string, unknown>) => unknown);
  note: string;
  server?: ServerName;
};
type ServerName = "chatml" | "qwen-template";

const cases: Case[] = [
  { name: "text", method: "POST", path: "/v1/chat/completions", body: { ...base, stream: true }, note: "plain stream, ends on max_tokens" },
  { name: "text-nonstream", method: "POST", path: "/v1/chat/completions", body: base, note: "the same request not streamed" },
  { name: "stop-sequence", method: "POST", path: "/v1/chat/completions", body: { ...base, max_tokens: 40, stop: ["cat"], stream: true }, note: "a stream cut by a stop string" },
  {
    name: "include-usage",
    method: "POST",
    path: "/v1/chat/completions",
    body: { ...base, stream: true, stream_options: { include_usage: true } },
    note: "stream_options.include_usage",
  },
  {
    name: "logprobs",
    method: "POST",
    path: "/v1/chat/completions",
    body: { ...base, max_tokens: 4, stream: true, logprobs: true, top_logprobs: 3 },
    note: "logprobs with top_logprobs 3, streamed",
  },
  {
    name: "logprobs-nonstream",
    method: "POST",
    path: "/v1/chat/completions",
    body: { ...base, max_tokens: 4, logprobs: true, top_logprobs: 3 },
    note: "logprobs with top_logprobs 3, not streamed",
  },
  { name: "n2", method: "POST", path: "/v1/chat/completions", body: { ...base, max_tokens: 6, n: 2, stream: true, stream_options: { include_usage: true } }, note: "n = 2, streamed" },
  { name: "n2-nonstream", method: "POST", path: "/v1/chat/completions", body: { ...base, max_tokens: 6, n: 2 }, note: "n = 2, not streamed" },
  {
    name: "tools",
    method: "POST",
    path: "/v1/chat/completions",
    body: { ...base, max_tokens: 24, stream: true, tools: [weatherTool] },
    note: "tools with the model's ChatML template (tool_choice auto)",
  },
  {
    name: "tools-required",
    method: "POST",
    path: "/v1/chat/completions",
    body: { ...base, max_tokens: 48, stream: true, tools: [weatherTool], tool_choice: "required" },
    note: "tool_choice required",
  },
  {
    name: "json-schema",
    method: "POST",
    path: "/v1/chat/completions",
    body: { ...base, max_tokens: 48, stream: true, response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema: personSchema } } },
    note: "response_format json_schema",
  },
  {
    name: "json-schema-nonstream",
    method: "POST",
    path: "/v1/chat/completions",
    body: { ...base, max_tokens: 48, response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema: personSchema } } },
    note: "response_format json_schema, not streamed",
  },
  {
    name: "json-object",
    method: "POST",
    path: "/v1/chat/completions",
    body: { ...base, max_tokens: 24, stream: true, response_format: { type: "json_object" } },
    note: "response_format json_object",
  },
  {
    name: "json-object-nonstream",
    method: "POST",
    path: "/v1/chat/completions",
    body: { ...base, max_tokens: 24, response_format: { type: "json_object" } },
    note: "response_format json_object, not streamed",
  },
  {
    name: "tools-nonstream",
    method: "POST",
    path: "/v1/chat/completions",
    body: { ...base, max_tokens: 24, tools: [weatherTool], tool_choice: "required" },
    note: "tool_choice required, not streamed",
  },
  {
    name: "tools-named",
    method: "POST",
    path: "/v1/chat/completions",
    body: { ...base, max_tokens: 24, stream: true, tools: [weatherTool], tool_choice: { type: "function", function: { name: "get_weather" } } },
    note: "tool_choice naming a function",
  },
  {
    name: "max-completion-tokens",
    method: "POST",
    path: "/v1/chat/completions",
    body: { model: "stories260K-chatml", messages, temperature: 0, max_completion_tokens: 5, stream: true },
    note: "max_completion_tokens instead of max_tokens",
  },
  { name: "n3", method: "POST", path: "/v1/chat/completions", body: { ...base, max_tokens: 4, n: 3, temperature: 1, seed: 7 }, note: "n = 3 on 2 slots, temperature 1, not streamed" },
  {
    name: "context-exceeded",
    method: "POST",
    path: "/v1/chat/completions",
    body: { ...base, stream: true, messages: [{ role: "user", content: "cat ".repeat(800) }] },
    note: "a prompt longer than the slot's context, streamed",
  },
  {
    name: "context-exceeded-nonstream",
    method: "POST",
    path: "/v1/chat/completions",
    body: { ...base, messages: [{ role: "user", content: "cat ".repeat(800) }] },
    note: "a prompt longer than the slot's context, not streamed",
  },
  { name: "bad-request", method: "POST", path: "/v1/chat/completions", body: { model: "x", stream: true }, note: "no messages" },
  { name: "health", method: "GET", path: "/health", note: "GET /health" },
  { name: "models", method: "GET", path: "/v1/models", note: "GET /v1/models" },
  { name: "props", method: "GET", path: "/props", note: "GET /props" },
  { name: "tokenize", method: "POST", path: "/tokenize", body: { content: "Once upon a time", add_special: false, with_pieces: true }, note: "/tokenize with_pieces" },
  { name: "tokenize-special", method: "POST", path: "/tokenize", body: { content: "Once upon a time", add_special: true }, note: "/tokenize add_special" },
  { name: "detokenize", method: "POST", path: "/detokenize", body: (answers: Map<string, unknown>) => ({ tokens: (answers.get("tokenize-special") as { tokens: number[] }).tokens }), note: "/detokenize" },
  { name: "tokenize-unicode", method: "POST", path: "/tokenize", body: { content: "né 猫", add_special: false, with_pieces: true }, note: "/tokenize with_pieces, text outside the vocabulary" },
  { name: "apply-template", method: "POST", path: "/apply-template", body: { messages }, note: "/apply-template" },
  { name: "apply-template-tools", method: "POST", path: "/apply-template", body: { messages, tools: [weatherTool] }, note: "/apply-template with tools (the template has no tool syntax)" },
  { name: "slots", method: "GET", path: "/slots", note: "GET /slots (on by default)" },
  { name: "metrics", method: "GET", path: "/metrics", note: "GET /metrics (off unless --metrics)" },
  {
    name: "qwen-template-props",
    server: "qwen-template",
    method: "GET",
    path: "/props",
    note: "/props with a tool-capable template: chat_template_caps",
  },
  {
    name: "qwen-template-tools",
    server: "qwen-template",
    method: "POST",
    path: "/v1/chat/completions",
    body: { ...base, max_tokens: 24, stream: true, tools: [weatherTool] },
    note: "tools with a tool-capable template, tool_choice auto",
  },
  {
    name: "qwen-template-tools-required",
    server: "qwen-template",
    method: "POST",
    path: "/v1/chat/completions",
    body: { ...base, max_tokens: 24, tools: [weatherTool], tool_choice: "required" },
    note: "tool_choice required with a tool-capable template, not streamed",
  },
  {
    name: "qwen-template-apply-tools",
    server: "qwen-template",
    method: "POST",
    path: "/apply-template",
    body: { messages: toolConversation, tools: [weatherTool] },
    note: "/apply-template of a conversation with a tool call and its result, tools described",
  },
  {
    name: "qwen-template-tool-result",
    server: "qwen-template",
    method: "POST",
    path: "/v1/chat/completions",
    body: { ...base, messages: toolConversation, tools: [weatherTool], max_tokens: 8, stream: true, stream_options: { include_usage: true } },
    note: "a conversation with a tool call and its result accepted, streamed",
  },
];

if (findLlamaServer() === undefined) {
  console.error("llama-server is not built: run scripts/build-llama-server.sh");
  process.exit(1);
}

/** Qwen2.5's chat template (Hermes-style `<tool_call>`), read from the llama.cpp bundle node-llama-cpp ships. */
function qwenTemplateFile(): string {
  const bundle = path.join(repoRoot, "node_modules/node-llama-cpp/llama/gitRelease.bundle");
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-llama-cpp-"));
  try {
    execFileSync("git", ["clone", "--quiet", "--bare", bundle, path.join(directory, "repo")]);
    const template = execFileSync("git", ["--git-dir", path.join(directory, "repo"), "show", "HEAD:models/templates/Qwen-Qwen2.5-7B-Instruct.jinja"]);
    const file = path.join(os.tmpdir(), "turnpike-qwen2.5-template.jinja");
    fs.writeFileSync(file, template);
    return file;
  } finally {
    fs.rmSync(directory, { recursive: true, force: true });
  }
}

const outDir = path.resolve(flags.out);
fs.mkdirSync(outDir, { recursive: true });
const templateFile = qwenTemplateFile();
const serverArgs: Record<ServerName, typeof serverOptions> = {
  chatml: serverOptions,
  "qwen-template": { ...serverOptions, extraArgs: [...serverOptions.extraArgs, "--chat-template-file", templateFile] },
};
const servers = {
  chatml: await startLlamaServer(serverArgs.chatml),
  "qwen-template": await startLlamaServer(serverArgs["qwen-template"]),
};
const index: Array<Record<string, unknown>> = [];
const answers = new Map<string, unknown>();
try {
  for (const entry of cases) {
    const body = typeof entry.body === "function" ? entry.body(answers) : entry.body;
    const response = await fetch(`${servers[entry.server ?? "chatml"].url}${entry.path}`, {
      method: entry.method,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    try {
      answers.set(entry.name, JSON.parse(text));
    } catch {
      answers.set(entry.name, text);
    }
    const contentType = response.headers.get("content-type") ?? "";
    const file = `llama-server-${entry.name}.${contentType.startsWith("text/event-stream") ? "sse" : "json"}`;
    fs.writeFileSync(path.join(outDir, file), text);
    index.push({
      case: entry.name,
      file,
      note: entry.note,
      server: entry.server ?? "chatml",
      request: { method: entry.method, path: entry.path, body },
      status: response.status,
      contentType,
    });
    console.log(`${String(response.status).padEnd(4)} ${file}`);
  }
  const version = await fetch(`${servers.chatml.url}/props`).then(async (response) => ((await response.json()) as { build_info?: string }).build_info);
  const described = Object.fromEntries(
    Object.entries(serverArgs).map(([name, options]) => [
      name,
      {
        ...options,
        model: `../shared/models/${path.basename(options.model)}`,
        extraArgs: options.extraArgs.map((arg) => (arg === templateFile ? "<models/templates/Qwen-Qwen2.5-7B-Instruct.jinja from the bundle>" : arg)),
      },
    ]),
  );
  fs.writeFileSync(path.join(outDir, "llama-server-index.json"), `${JSON.stringify({ buildInfo: version, servers: described, cases: index }, null, 2)}\n`);
} finally {
  await Promise.all(Object.values(servers).map((server) => server.close()));
  fs.rmSync(templateFile, { force: true });
}
