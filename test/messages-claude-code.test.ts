/**
 * End-to-end: Claude Code itself (`@anthropic-ai/claude-code`, the CLI from npm) run headless
 * (`claude -p`) against a real Turnpike server, as a customer would: `ANTHROPIC_BASE_URL` set to
 * the server and the Turnpike key as `ANTHROPIC_API_KEY` (or `ANTHROPIC_AUTH_TOKEN`, sent as
 * Bearer). An HTTP recorder between the two keeps every exchange, and each is checked: answered
 * 200, in Anthropic's shape (a message, a stream in the Messages event grammar with its `event:`
 * lines, count_tokens, the models list), nothing refused or misparsed; Claude Code's own report
 * (`--output-format json`) must show the scripted answer and the usage Turnpike sent. Its
 * `/context` command, run headless, measures its prompt with count_tokens.
 *
 * The model is the scripted fake engine with a large context: Claude Code's prompt (its system
 * prompt and a dozen tool schemas, about 50 KB; see test/fixtures/claude-code/) leaves a tiny
 * model such as stories260K (2,048 tokens) no room, which Turnpike rightly refuses; what is tested
 * here is the wire, not the model.
 *
 * The CLI comes from node_modules (a dev dependency); `CLAUDE_CODE_BIN` names another one. Its
 * native build (2.1.113 and later) is a binary the package's postinstall links from its platform
 * package (`@anthropic-ai/claude-code-linux-x64`); where the postinstall did not run, the package's
 * `cli-wrapper.cjs` finds the same binary.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { FakeEngine } from "../src/engines/fake/fake-engine.ts";
import type { GenerationRequest } from "../src/protocol/generation.ts";
import { HttpRecorder, type RecordedExchange } from "./helpers/http-recorder.ts";
import { parseSse } from "./helpers/sse-events.ts";
import { nodeBinary, repoRoot, startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";

/** The CLI to run: [command, ...arguments before Claude Code's own], or a reason to skip. */
function findClaudeCode(): { command: string[] } | { missing: string } {
  const named = process.env.CLAUDE_CODE_BIN;
  if (named !== undefined && named !== "") return { command: [named] };
  const bin = path.join(repoRoot, "node_modules/.bin/claude");
  const wrapper = path.join(repoRoot, "node_modules/@anthropic-ai/claude-code/cli-wrapper.cjs");
  if (!fs.existsSync(bin)) {
    const message = "Claude Code is not installed (node_modules/.bin/claude: add @anthropic-ai/claude-code to devDependencies, or set CLAUDE_CODE_BIN)";
    if (process.env.CI === "true") throw new Error(message);
    return { missing: message };
  }
  // Without its postinstall, bin/claude.exe is a 500-byte shell stub that says so and exits 1.
  if (fs.statSync(bin).size < 4096 && fs.existsSync(wrapper)) return { command: [nodeBinary, wrapper] };
  return { command: [bin] };
}

// CI fails loudly on a missing CLI; elsewhere the suite is skipped with the reason.
const claudeCode = findClaudeCode();
const skip = "missing" in claudeCode ? claudeCode.missing : false;

const MODEL = "turnpike-fake";
const ANSWER = "Your notes say that foxes are small omnivores.";
const NOTES = "Foxes are small omnivores.\n";

type ClaudeRun = {
  exitCode: number | null;
  stdout: string;
  stderr: string;
  /** `--output-format json`'s report, when stdout was one. */
  report: Record<string, any> | undefined;
};

const STOP_REASONS = new Set(["end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"]);
const BLOCK_DELTAS: Record<string, string[]> = {
  text: ["text_delta"],
  tool_use: ["input_json_delta"],
  thinking: ["thinking_delta", "signature_delta"],
  redacted_thinking: [],
};

/** What is wrong with a usage object (the four counts Anthropic reports, whole numbers). */
function usageProblems(usage: unknown, where: string, fields: string[]): string[] {
  if (typeof usage !== "object" || usage === null) return [`${where}: no usage`];
  return fields.flatMap((field) => {
    const value = (usage as Record<string, unknown>)[field];
    return Number.isInteger(value) && (value as number) >= 0 ? [] : [`${where}: usage.${field} is ${JSON.stringify(value)}`];
  });
}

/** What is wrong with a finished content block of a non-streamed message. */
function blockProblems(block: Record<string, any>, where: string): string[] {
  switch (block.type) {
    case "text":
      return typeof block.text === "string" ? [] : [`${where}: a text block without text`];
    case "tool_use":
      return typeof block.id === "string" && typeof block.name === "string" && typeof block.input === "object" && block.input !== null && !Array.isArray(block.input)
        ? []
        : [`${where}: a tool_use block needs id, name and an object input: ${JSON.stringify(block)}`];
    case "thinking":
      return typeof block.thinking === "string" ? [] : [`${where}: a thinking block without thinking`];
    case "redacted_thinking":
      return typeof block.data === "string" ? [] : [`${where}: a redacted_thinking block without data`];
    default:
      return [`${where}: unknown block type ${JSON.stringify(block.type)}`];
  }
}

/** What is wrong with a message as Anthropic answers it (`message_start` carries it empty: `started`). */
function messageProblems(message: Record<string, any>, where: string, started = false): string[] {
  const problems: string[] = [];
  if (typeof message.id !== "string" || !message.id.startsWith("msg_")) problems.push(`${where}: id ${JSON.stringify(message.id)} is not msg_…`);
  if (message.type !== "message") problems.push(`${where}: type ${JSON.stringify(message.type)}`);
  if (message.role !== "assistant") problems.push(`${where}: role ${JSON.stringify(message.role)}`);
  if (message.model !== MODEL) problems.push(`${where}: model ${JSON.stringify(message.model)}`);
  if (!Array.isArray(message.content)) problems.push(`${where}: content is not a list`);
  else if (started && message.content.length > 0) problems.push(`${where}: message_start's content is not empty`);
  else message.content.forEach((block: Record<string, any>, index: number) => problems.push(...blockProblems(block, `${where} content[${index}]`)));
  if (started ? message.stop_reason !== null : !STOP_REASONS.has(message.stop_reason)) problems.push(`${where}: stop_reason ${JSON.stringify(message.stop_reason)}`);
  if (!started && message.stop_reason === "stop_sequence" && typeof message.stop_sequence !== "string") problems.push(`${where}: stop_sequence not named`);
  problems.push(...usageProblems(message.usage, where, ["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"]));
  return problems;
}

/**
 * What is wrong with a stream in the Messages event grammar: every event named by its `type`,
 * `message_start` first, blocks opened, filled and closed in turn with indices 0, 1, … (never two
 * open), a tool's input `{}` at the start and its `input_json_delta` fragments forming a JSON
 * object, `message_delta` after the last block, `message_stop` last, `ping` anywhere, no `error`.
 * Returns the problems and the message it assembles (for the usage and the tool calls).
 */
function streamProblems(body: string, where: string): { problems: string[]; message: Record<string, any> | undefined } {
  const problems: string[] = [];
  const events = parseSse(body);
  let message: Record<string, any> | undefined;
  let open: Record<string, any> | undefined;
  let openIndex = -1;
  let partialJson = "";
  let nextIndex = 0;
  let delta: Record<string, any> | undefined;
  let stopped = false;
  for (const [position, event] of events.entries()) {
    const at = `${where} event ${position} (${event.name ?? "unnamed"})`;
    let data: Record<string, any>;
    try {
      data = JSON.parse(event.data) as Record<string, any>;
    } catch {
      problems.push(`${at}: data is not JSON: ${event.data.slice(0, 200)}`);
      continue;
    }
    if (event.name === undefined) problems.push(`${at}: no event: line (the SDK drops it)`);
    if (event.name !== data.type) problems.push(`${at}: named ${event.name} but its type is ${data.type}`);
    if (stopped) problems.push(`${at}: after message_stop`);
    if (data.type !== "ping" && data.type !== "message_start" && message === undefined) problems.push(`${at}: before message_start`);
    switch (data.type) {
      case "ping":
        break;
      case "message_start":
        if (message !== undefined) problems.push(`${at}: a second message_start`);
        message = { ...data.message, content: [] };
        problems.push(...messageProblems(data.message ?? {}, at, true));
        break;
      case "content_block_start": {
        if (open !== undefined) problems.push(`${at}: block ${data.index} opened while ${openIndex} is open`);
        if (data.index !== nextIndex) problems.push(`${at}: index ${data.index}, expected ${nextIndex}`);
        const block: Record<string, any> = { ...data.content_block };
        open = block;
        openIndex = data.index;
        partialJson = "";
        if (!(block.type in BLOCK_DELTAS)) problems.push(`${at}: unknown block type ${JSON.stringify(block.type)}`);
        if (block.type === "tool_use" && (typeof block.id !== "string" || typeof block.name !== "string" || JSON.stringify(block.input) !== "{}"))
          problems.push(`${at}: a tool_use block starts with id, name and input {}: ${JSON.stringify(block)}`);
        break;
      }
      case "content_block_delta": {
        if (open === undefined || data.index !== openIndex) {
          problems.push(`${at}: a delta for block ${data.index}, which is not open`);
          break;
        }
        const kind = data.delta?.type;
        if (!(BLOCK_DELTAS[open.type] ?? []).includes(kind)) problems.push(`${at}: a ${kind} in a ${open.type} block`);
        if (kind === "text_delta") open.text += data.delta.text;
        if (kind === "thinking_delta") open.thinking += data.delta.thinking;
        if (kind === "input_json_delta") partialJson += data.delta.partial_json;
        break;
      }
      case "content_block_stop":
        if (open === undefined || data.index !== openIndex) {
          problems.push(`${at}: stops block ${data.index}, which is not open`);
          break;
        }
        if (open.type === "tool_use") {
          try {
            open.input = partialJson === "" ? {} : JSON.parse(partialJson);
          } catch {
            problems.push(`${at}: the tool's input fragments are not JSON: ${partialJson.slice(0, 200)}`);
          }
        }
        message?.content.push(open);
        open = undefined;
        nextIndex += 1;
        break;
      case "message_delta":
        if (open !== undefined) problems.push(`${at}: while block ${openIndex} is open`);
        if (delta !== undefined) problems.push(`${at}: a second message_delta`);
        delta = data;
        if (!STOP_REASONS.has(data.delta?.stop_reason)) problems.push(`${at}: stop_reason ${JSON.stringify(data.delta?.stop_reason)}`);
        problems.push(...usageProblems(data.usage, at, ["output_tokens"]));
        if (message !== undefined) {
          message.stop_reason = data.delta?.stop_reason;
          message.stop_sequence = data.delta?.stop_sequence;
          message.usage = { ...message.usage, ...data.usage };
        }
        break;
      case "message_stop":
        if (delta === undefined) problems.push(`${at}: no message_delta before it`);
        stopped = true;
        break;
      case "error":
        problems.push(`${at}: the stream failed: ${event.data}`);
        break;
      default:
        problems.push(`${at}: unknown event type ${JSON.stringify(data.type)}`);
    }
  }
  if (!stopped) problems.push(`${where}: the stream does not end with message_stop`);
  return { problems, message };
}

/** What is wrong with one exchange Claude Code had with Turnpike, and the message it got (when one). */
function exchangeProblems(exchange: RecordedExchange): { problems: string[]; message: Record<string, any> | undefined } {
  const { method, path: fullPath } = exchange;
  const pathname = fullPath.split("?")[0];
  const where = `${method} ${fullPath}`;
  // Older CLIs (the cli.js builds) check the base URL is reachable with HEAD / and ignore the answer.
  if (method === "HEAD" && pathname === "/") return { problems: exchange.status >= 500 ? [`${where}: ${exchange.status}`] : [], message: undefined };
  if (exchange.status !== 200) return { problems: [`${where}: answered ${exchange.status}: ${exchange.responseBody.slice(0, 500)}`], message: undefined };
  const contentType = String(exchange.responseHeaders["content-type"] ?? "");
  if (method === "POST" && pathname === "/v1/messages") {
    const streamed = (JSON.parse(exchange.requestBody) as { stream?: boolean }).stream === true;
    if (!streamed) {
      if (!contentType.startsWith("application/json")) return { problems: [`${where}: content-type ${contentType}`], message: undefined };
      const message = JSON.parse(exchange.responseBody) as Record<string, any>;
      return { problems: messageProblems(message, where), message };
    }
    if (!contentType.startsWith("text/event-stream")) return { problems: [`${where}: a stream answered as ${contentType}`], message: undefined };
    return streamProblems(exchange.responseBody, where);
  }
  if (method === "POST" && pathname === "/v1/messages/count_tokens") {
    const counted = JSON.parse(exchange.responseBody) as Record<string, unknown>;
    return { problems: usageProblems(counted, where, ["input_tokens"]), message: undefined };
  }
  if (method === "GET" && pathname === "/v1/models") {
    const list = JSON.parse(exchange.responseBody) as Record<string, any>;
    const problems: string[] = [];
    if (!Array.isArray(list.data) || list.data.length === 0) problems.push(`${where}: no data`);
    for (const model of list.data ?? [])
      if (model.type !== "model" || typeof model.id !== "string" || typeof model.display_name !== "string" || typeof model.created_at !== "string")
        problems.push(`${where}: not an Anthropic model entry: ${JSON.stringify(model)}`);
    if (typeof list.has_more !== "boolean") problems.push(`${where}: has_more missing`);
    if (!list.data?.some((model: { id: string }) => model.id === MODEL)) problems.push(`${where}: ${MODEL} is not listed`);
    return { problems, message: undefined };
  }
  return { problems: [`${where}: Claude Code asked for something this test does not know (add its check)`], message: undefined };
}

describe("Claude Code against Turnpike", { skip }, () => {
  let server: TestServer;
  let recorder: HttpRecorder;
  let workDirectory: string;
  /** Asks for a `Read` of notes.txt while the conversation has no tool result, then answers. */
  const engine = new FakeEngine({
    contextLength: 131_072,
    script: (request: GenerationRequest) => {
      const hasResult = request.messages.some((message) => message.role === "tool");
      const canRead = request.tools?.some((tool) => tool.name === "Read") === true;
      if (!hasResult && canRead && request.messages.some((message) => message.content.includes("What do my notes say?"))) {
        const input = JSON.stringify({ file_path: path.join(workDirectory, "notes.txt") });
        return [{ steps: [{ text: "Let me read them." }, { toolCall: { id: "call_read_notes", name: "Read", arguments: [input.slice(0, 10), input.slice(10)] } }], finish: "tool_calls" }];
      }
      return [{ steps: ANSWER.split(/(?<= )/).map((text) => ({ text })), finish: "stop" }];
    },
  });

  before(async () => {
    server = await startTestServer({ engines: { [MODEL]: engine } });
    recorder = new HttpRecorder(server.url);
    await recorder.open();
    workDirectory = temporaryDirectory("claude-code-cwd-");
    fs.writeFileSync(path.join(workDirectory, "notes.txt"), NOTES);
  });
  after(async () => {
    await recorder?.close();
    await server?.close();
    if (workDirectory !== undefined) fs.rmSync(workDirectory, { recursive: true, force: true });
  });

  /** Runs `claude -p <prompt> --model turnpike-fake --output-format json` headless, HOME a fresh folder. */
  async function runClaude(prompt: string, auth: "x-api-key" | "bearer" = "x-api-key"): Promise<ClaudeRun> {
    if ("missing" in claudeCode) throw new Error(claudeCode.missing);
    const home = temporaryDirectory("claude-code-home-");
    const environment: Record<string, string> = {
      PATH: `${path.dirname(nodeBinary)}:${process.env.PATH ?? "/usr/bin:/bin"}`,
      HOME: home,
      ANTHROPIC_BASE_URL: recorder.url,
      ...(auth === "x-api-key" ? { ANTHROPIC_API_KEY: server.key } : { ANTHROPIC_AUTH_TOKEN: server.key }),
      DISABLE_TELEMETRY: "1",
      DISABLE_AUTOUPDATER: "1",
      DISABLE_ERROR_REPORTING: "1",
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
      // A refused or broken answer shows at once: no retries, and no quiet retry without streaming.
      CLAUDE_CODE_MAX_RETRIES: "0",
      CLAUDE_CODE_DISABLE_NONSTREAMING_FALLBACK: "1",
      API_TIMEOUT_MS: "120000",
    };
    const [command, ...leading] = claudeCode.command;
    const child = spawn(command!, [...leading, "-p", prompt, "--model", MODEL, "--output-format", "json"], {
      env: environment,
      cwd: workDirectory,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), 150_000);
    const exitCode = await new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
    clearTimeout(timer);
    fs.rmSync(home, { recursive: true, force: true });
    let report: Record<string, any> | undefined;
    try {
      report = JSON.parse(stdout) as Record<string, any>;
    } catch {
      report = undefined;
    }
    return { exitCode, stdout, stderr, report };
  }

  /**
   * Runs a prompt and checks every exchange it made (all in shape, none refused), and that Claude
   * Code reports a success; returns the run and the exchanges with the messages they got.
   */
  async function runExchanges(prompt: string, auth: "x-api-key" | "bearer" = "x-api-key") {
    const first = recorder.exchanges.length;
    const run = await runClaude(prompt, auth);
    const exchanges = recorder.exchanges.slice(first);
    const checked = exchanges.map((exchange) => ({ exchange, ...exchangeProblems(exchange) }));
    const problems = checked.flatMap((entry) => entry.problems);
    assert.deepEqual(problems, [], `Claude Code's exchanges with Turnpike (stderr: ${run.stderr.slice(0, 1000)})`);
    assert.equal(run.exitCode, 0, `claude exited ${run.exitCode}: ${run.stdout.slice(0, 1000)} ${run.stderr.slice(0, 1000)}`);
    assert.ok(run.report !== undefined, `--output-format json printed JSON: ${run.stdout.slice(0, 500)}`);
    assert.equal(run.report.is_error, false, JSON.stringify(run.report).slice(0, 1000));
    return { run, checked };
  }

  /**
   * Runs a prompt that asks the model (`runExchanges`' checks, and at least one message); Claude
   * Code's report must show the scripted answer and the usage Turnpike sent.
   */
  async function runChecked(prompt: string, auth: "x-api-key" | "bearer" = "x-api-key") {
    const { run, checked } = await runExchanges(prompt, auth);
    const messages = checked.filter((entry) => entry.exchange.method === "POST" && entry.exchange.path.split("?")[0] === "/v1/messages");
    assert.ok(messages.length > 0, "Claude Code asked for a message");
    assert.equal(run.report?.result, ANSWER, "Claude Code read the answer's text whole");
    // Claude Code adds up each turn's usage: what it read must be what Turnpike sent.
    const sent = { input_tokens: 0, output_tokens: 0, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };
    for (const { message } of messages) for (const field of Object.keys(sent) as Array<keyof typeof sent>) sent[field] += message?.usage?.[field] ?? 0;
    assert.ok(sent.input_tokens > 0, "Turnpike counted the prompts");
    for (const field of Object.keys(sent) as Array<keyof typeof sent>) assert.equal(run.report.usage?.[field], sent[field], `Claude Code's ${field}`);
    return messages;
  }

  it("answers everything a plain prompt sends, with x-api-key, in Anthropic's shape", async () => {
    const messages = await runChecked("say hi");
    for (const { exchange } of messages) {
      assert.ok(exchange.requestHeaders["x-api-key"] !== undefined, "the key came as x-api-key");
      assert.equal(exchange.requestHeaders["anthropic-version"], "2023-06-01");
    }
  });

  it("takes the key as Bearer (ANTHROPIC_AUTH_TOKEN) as well", async () => {
    const messages = await runChecked("say hi", "bearer");
    for (const { exchange } of messages) assert.match(String(exchange.requestHeaders.authorization), /^Bearer /);
  });

  it("carries a tool round trip: Claude Code runs the Read the model asked for and sends its result back", async () => {
    const messages = await runChecked("What do my notes say?");
    assert.ok(messages.length >= 2, `a second request carried the tool's result (${messages.length} requests)`);
    const [asked, answered] = [messages[0]!, messages[1]!];
    assert.equal(asked.message?.stop_reason, "tool_use");
    const call = asked.message?.content.find((block: { type: string }) => block.type === "tool_use");
    assert.equal(call?.name, "Read");
    assert.deepEqual(call?.input, { file_path: path.join(workDirectory, "notes.txt") });
    // The next request sends the call back as Turnpike gave it, and the file's text as its result.
    const body = JSON.parse(answered.exchange.requestBody) as { messages: Array<{ role: string; content: string | Array<Record<string, any>> }> };
    const blocks = body.messages.flatMap((message) => (typeof message.content === "string" ? [] : message.content));
    const sentBack = blocks.find((block) => block.type === "tool_use");
    assert.equal(sentBack?.id, call?.id, "the tool_use block came back with Turnpike's id");
    const result = blocks.find((block) => block.type === "tool_result");
    assert.equal(result?.tool_use_id, call?.id);
    assert.notEqual(result?.is_error, true, JSON.stringify(result));
    assert.match(JSON.stringify(result?.content), /Foxes are small omnivores/);
    assert.equal(answered.message?.stop_reason, "end_turn");
  });

  it("counts tokens for /context: every count_tokens request Claude Code sends is answered", async () => {
    // /context measures each part of its prompt with POST /v1/messages/count_tokens (two dozen
    // requests: one message, `tools` empty or holding one tool), asking the model nothing.
    const { run, checked } = await runExchanges("/context");
    const counts = checked.filter((entry) => entry.exchange.path.split("?")[0] === "/v1/messages/count_tokens");
    assert.ok(counts.length > 0, "Claude Code counted tokens");
    assert.match(String(run.report?.result), /Context Usage/);
  });
});
