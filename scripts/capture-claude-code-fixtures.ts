/**
 * Records what Claude Code (`@anthropic-ai/claude-code`) sends to an Anthropic-compatible server,
 * for the Messages route's tests: a capture server on 127.0.0.1 (random port) logs every request
 * (method, path, headers with secrets masked, body) and answers minimal valid Anthropic responses
 * (a text message as JSON, or the same as an SSE stream in Anthropic's event grammar, each event
 * with its `event:` line; `count_tokens`; the models list), while `claude -p` runs headless
 * against it.
 *
 *   node_modules/.bin/node scripts/capture-claude-code-fixtures.ts --claude /tmp/cc/node_modules/.bin/claude \
 *     [--out test/fixtures/claude-code] [--model claude-sonnet-4-5] [--prompt "say hi"] [--case say-hi] \
 *     [--tool-first] [--env NAME=value ...] [--args="--extra cli-args"]
 *
 * Writes `<case>-NN-<method>-<path>.json` per request ({ method, path, query, headers, body }) and
 * `<case>-index.json` (the CLI's version, its arguments and extra environment, exit code,
 * stdout/stderr, and each request's file). `--env` adds or removes variables
 * (`--env ANTHROPIC_AUTH_TOKEN=… --env ANTHROPIC_API_KEY=` for Bearer auth, say). Network traffic
 * the CLI does not need is switched off by environment (telemetry, autoupdate, error reporting,
 * nonessential traffic), and HOME is a fresh temporary folder, so no user settings or login leak in.
 */
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const { values: flags } = parseArgs({
  options: {
    claude: { type: "string" },
    out: { type: "string", default: path.join(repoRoot, "test/fixtures/claude-code") },
    model: { type: "string", default: "claude-sonnet-4-5" },
    prompt: { type: "string", default: "say hi" },
    case: { type: "string", default: "say-hi" },
    /** Extra CLI arguments, as one string split on spaces. */
    args: { type: "string", default: "" },
    /**
     * Answer the first streamed message with a `tool_use` block (Claude Code's `Read` of a file in
     * its working folder, input streamed as `input_json_delta`), so the next request carries the
     * `tool_use` turn and its `tool_result`.
     */
    "tool-first": { type: "boolean", default: false },
    /** `NAME=value` for the CLI's environment, on top of the defaults below (`NAME=` removes one). */
    env: { type: "string", multiple: true, default: [] },
  },
});
if (flags.claude === undefined) throw new Error("--claude <path to the claude binary> is required");
const claudeBinary = flags.claude;

/** Header names whose values are credentials: recorded as `<redacted>` (their presence is what matters). */
const secretHeaders = new Set(["x-api-key", "authorization", "cookie", "proxy-authorization"]);

type Recorded = { method: string; path: string; query: string; headers: Record<string, string>; body: unknown };
const recorded: Recorded[] = [];

function maskedHeaders(headers: http.IncomingHttpHeaders): Record<string, string> {
  const masked: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    const text = Array.isArray(value) ? value.join(", ") : (value ?? "");
    if (!secretHeaders.has(name)) {
      masked[name] = text;
      continue;
    }
    // Keep the scheme and a prefix, so x-api-key vs Bearer and the key's shape stay visible.
    masked[name] = name === "authorization" ? `${text.split(" ")[0]} <redacted>` : `${text.slice(0, 5)}<redacted>`;
  }
  return masked;
}

let messageCount = 0;
const answerText = "Hi!";

function messageBody(model: string) {
  messageCount += 1;
  return {
    id: `msg_capture${String(messageCount).padStart(4, "0")}`,
    type: "message",
    role: "assistant",
    model,
    content: [{ type: "text", text: answerText }],
    stop_reason: "end_turn",
    stop_sequence: null,
    usage: { input_tokens: 12, output_tokens: 3, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
  };
}

function sseEvent(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

function messageStream(model: string): string {
  const message = messageBody(model);
  return [
    sseEvent("message_start", {
      type: "message_start",
      message: { ...message, content: [], stop_reason: null, usage: { ...message.usage, output_tokens: 1 } },
    }),
    sseEvent("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
    sseEvent("ping", { type: "ping" }),
    sseEvent("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: answerText } }),
    sseEvent("content_block_stop", { type: "content_block_stop", index: 0 }),
    sseEvent("message_delta", {
      type: "message_delta",
      delta: { stop_reason: "end_turn", stop_sequence: null },
      usage: { output_tokens: 3 },
    }),
    sseEvent("message_stop", { type: "message_stop" }),
  ].join("");
}

/** The first streamed answer in `--tool-first` runs: a `Read` of `notes.txt` in the CLI's working folder. */
function toolUseStream(model: string, filePath: string): string {
  const message = messageBody(model);
  const input = JSON.stringify({ file_path: filePath });
  const middle = Math.floor(input.length / 2);
  return [
    sseEvent("message_start", {
      type: "message_start",
      message: { ...message, content: [], stop_reason: null, usage: { ...message.usage, output_tokens: 1 } },
    }),
    sseEvent("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
    sseEvent("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Reading it." } }),
    sseEvent("content_block_stop", { type: "content_block_stop", index: 0 }),
    sseEvent("content_block_start", {
      type: "content_block_start",
      index: 1,
      content_block: { type: "tool_use", id: "toolu_capture0001", name: "Read", input: {} },
    }),
    sseEvent("content_block_delta", { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: "" } }),
    sseEvent("content_block_delta", { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: input.slice(0, middle) } }),
    sseEvent("content_block_delta", { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: input.slice(middle) } }),
    sseEvent("content_block_stop", { type: "content_block_stop", index: 1 }),
    sseEvent("message_delta", { type: "message_delta", delta: { stop_reason: "tool_use", stop_sequence: null }, usage: { output_tokens: 20 } }),
    sseEvent("message_stop", { type: "message_stop" }),
  ].join("");
}

function reply(response: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, { "content-type": "application/json", "request-id": `req_capture${recorded.length}` });
  response.end(text);
}

const workDir = fs.mkdtempSync(path.join(os.tmpdir(), "claude-code-cwd-"));
fs.writeFileSync(path.join(workDir, "notes.txt"), "Foxes are small omnivores.\n");
let toolUsed = false;

const server = http.createServer((request, response) => {
  const chunks: Buffer[] = [];
  request.on("data", (chunk: Buffer) => chunks.push(chunk));
  request.on("end", () => {
    const url = new URL(request.url ?? "/", "http://capture");
    const raw = Buffer.concat(chunks).toString("utf8");
    let body: unknown = raw === "" ? null : raw;
    try {
      if (raw !== "") body = JSON.parse(raw);
    } catch {
      // Recorded as text.
    }
    recorded.push({ method: request.method ?? "", path: url.pathname, query: url.search, headers: maskedHeaders(request.headers), body });
    const model = typeof body === "object" && body !== null && "model" in body ? String(body.model) : flags.model;

    if (request.method === "POST" && url.pathname === "/v1/messages") {
      const streamed = typeof body === "object" && body !== null && "stream" in body && body.stream === true;
      if (!streamed) return reply(response, 200, messageBody(model));
      response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", "request-id": `req_capture${recorded.length}` });
      const useTool = flags["tool-first"] && !toolUsed;
      toolUsed ||= useTool;
      response.end(useTool ? toolUseStream(model, path.join(workDir, "notes.txt")) : messageStream(model));
      return;
    }
    if (request.method === "POST" && url.pathname === "/v1/messages/count_tokens") return reply(response, 200, { input_tokens: 12 });
    if (request.method === "GET" && url.pathname === "/v1/models") {
      const entry = { type: "model", id: flags.model, display_name: flags.model, created_at: "2025-01-01T00:00:00Z" };
      return reply(response, 200, { data: [entry], has_more: false, first_id: entry.id, last_id: entry.id });
    }
    reply(response, 404, { type: "error", error: { type: "not_found_error", message: `Not found: ${request.method} ${url.pathname}` } });
  });
});

await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
const address = server.address();
if (address === null || typeof address === "string") throw new Error("no port");
const baseUrl = `http://127.0.0.1:${address.port}`;

const home = fs.mkdtempSync(path.join(os.tmpdir(), "claude-code-home-"));
const environment: Record<string, string> = {
  PATH: process.env.PATH ?? "/usr/bin:/bin",
  HOME: home,
  ANTHROPIC_BASE_URL: baseUrl,
  ANTHROPIC_API_KEY: "sk-test-capture",
  DISABLE_TELEMETRY: "1",
  DISABLE_AUTOUPDATER: "1",
  DISABLE_ERROR_REPORTING: "1",
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
};
for (const assignment of flags.env) {
  const [name, ...value] = assignment.split("=");
  if (value.join("=") === "") delete environment[name];
  else environment[name] = value.join("=");
}
const version = execFileSync(claudeBinary, ["--version"], { env: environment, encoding: "utf8" }).trim();
const cliArguments = ["-p", flags.prompt, "--model", flags.model, ...flags.args.split(" ").filter((part) => part !== "")];

const child = spawn(claudeBinary, cliArguments, { env: environment, cwd: workDir, stdio: ["ignore", "pipe", "pipe"] });
let stdout = "";
let stderr = "";
child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
const timer = setTimeout(() => child.kill("SIGTERM"), 120_000);
const exitCode = await new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
clearTimeout(timer);
server.close();

fs.mkdirSync(flags.out, { recursive: true });
const files: string[] = [];
recorded.forEach((request, index) => {
  const slug = request.path.replace(/^\//, "").replace(/[^a-z0-9]+/gi, "-");
  const file = `${flags.case}-${String(index + 1).padStart(2, "0")}-${request.method.toLowerCase()}-${slug}.json`;
  fs.writeFileSync(path.join(flags.out, file), JSON.stringify(request, null, 2) + "\n");
  files.push(file);
});
const index = { claudeCode: version, arguments: cliArguments, environment: flags.env, exitCode, stdout, stderr, requests: files };
fs.writeFileSync(path.join(flags.out, `${flags.case}-index.json`), JSON.stringify(index, null, 2) + "\n");
fs.rmSync(home, { recursive: true, force: true });
fs.rmSync(workDir, { recursive: true, force: true });
console.log(JSON.stringify({ ...index, stdout: stdout.slice(0, 500), stderr: stderr.slice(0, 2000) }, null, 2));
