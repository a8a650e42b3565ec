/**
 * The gateway benchmark's upstream: a zero-latency OpenAI-compatible server (node:http, 127.0.0.1)
 * that answers every chat completion at once with the same completion, as JSON or as an SSE
 * stream. Run as its own process so that it never shares an event loop with what is measured:
 *
 *   node bench/gateway/upstream.ts [--port 0]
 *
 * Prints one line, `{"port": N}`, once it listens. Also answers `GET /v1/models` and `GET /health`
 * (gateways probe them) with 200.
 */
import http from "node:http";
import { parseArgs } from "node:util";

/** The text every completion holds, split into the stream's content chunks. */
export const UPSTREAM_CONTENT_PARTS = ["The quick ", "brown fox ", "jumps over ", "the lazy dog."];
export const UPSTREAM_CONTENT = UPSTREAM_CONTENT_PARTS.join("");
export const UPSTREAM_USAGE = { prompt_tokens: 12, completion_tokens: 9, total_tokens: 21 };
/** Largest request body read (the benchmark's bodies are tiny). */
const BODY_LIMIT = 1 << 20;

type ChatRequest = { model?: unknown; stream?: unknown; stream_options?: { include_usage?: unknown } };

function completionJson(model: string, created: number): string {
  return JSON.stringify({
    id: "chatcmpl-bench",
    object: "chat.completion",
    created,
    model,
    choices: [{ index: 0, message: { role: "assistant", content: UPSTREAM_CONTENT }, logprobs: null, finish_reason: "stop" }],
    usage: UPSTREAM_USAGE,
  });
}

function streamBody(model: string, created: number, includeUsage: boolean): string {
  const chunk = (choices: unknown[], usage?: unknown) =>
    `data: ${JSON.stringify({ id: "chatcmpl-bench", object: "chat.completion.chunk", created, model, choices, ...(usage === undefined ? {} : { usage }) })}\n\n`;
  let body = chunk([{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }]);
  for (const part of UPSTREAM_CONTENT_PARTS) body += chunk([{ index: 0, delta: { content: part }, logprobs: null, finish_reason: null }]);
  body += chunk([{ index: 0, delta: {}, logprobs: null, finish_reason: "stop" }]);
  if (includeUsage) body += chunk([], UPSTREAM_USAGE);
  return `${body}data: [DONE]\n\n`;
}

function sendJson(response: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  response.end(text);
}

function chatCompletion(request: http.IncomingMessage, response: http.ServerResponse): void {
  const chunks: Buffer[] = [];
  let size = 0;
  request.on("data", (chunk: Buffer) => {
    size += chunk.length;
    if (size > BODY_LIMIT) return void request.destroy();
    chunks.push(chunk);
  });
  request.on("end", () => {
    let parsed: ChatRequest;
    try {
      parsed = JSON.parse(Buffer.concat(chunks).toString("utf8")) as ChatRequest;
    } catch {
      return sendJson(response, 400, { error: { message: "invalid JSON", type: "invalid_request_error", param: null, code: "invalid_json" } });
    }
    const model = typeof parsed.model === "string" ? parsed.model : "bench";
    const created = Math.floor(Date.now() / 1000);
    if (parsed.stream !== true) {
      const text = completionJson(model, created);
      response.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
      return void response.end(text);
    }
    // The whole stream in one write: zero latency, as a fast upstream's would be.
    response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    response.end(streamBody(model, created, parsed.stream_options?.include_usage === true));
  });
}

/** The upstream's request handler (exported for tests that want it in-process). */
export function handleUpstreamRequest(request: http.IncomingMessage, response: http.ServerResponse): void {
  const url = (request.url ?? "/").split("?")[0];
  if (request.method === "POST" && url === "/v1/chat/completions") return chatCompletion(request, response);
  request.resume();
  if (request.method === "GET" && url === "/health") return sendJson(response, 200, { status: "ok" });
  if (request.method === "GET" && url === "/v1/models") {
    return sendJson(response, 200, { object: "list", data: [{ id: "bench", object: "model", created: 0, owned_by: "bench", max_model_len: 4096 }] });
  }
  sendJson(response, 404, { error: { message: `no route ${request.method} ${url}`, type: "invalid_request_error", param: null, code: "not_found" } });
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { port: { type: "string", default: "0" } } });
  const server = http.createServer({ keepAliveTimeout: 60_000 }, handleUpstreamRequest);
  server.listen(Number(values.port), "127.0.0.1", () => {
    const address = server.address();
    process.stdout.write(`${JSON.stringify({ port: typeof address === "object" && address !== null ? address.port : 0 })}\n`);
  });
  process.on("SIGTERM", () => process.exit(0));
}
