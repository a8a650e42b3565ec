/**
 * A fault-injecting OpenAI-compatible upstream for tests: a real HTTP server on 127.0.0.1 that
 * answers `/v1/chat/completions` (and `/v1/completions`, in `text_completion` chunks, every prompt
 * of an array getting `n` choices) the way a script says. It exists only for the failures a real
 * server (vLLM, llama-server...) will not produce on demand: hanging before headers, a stream cut
 * after k chunks, 5xx or 429 with `retry-after`, a slow first token, garbage chunks, 401. Normal
 * answers (streamed with a usage chunk, or one JSON body) are fixed and small.
 *
 * A request for `n` > 1 choices gets `n` copies of the answer, their chunks interleaved piece by
 * piece (choice 0's first piece, choice 1's first piece, …), as vLLM sends parallel choices.
 * Asked to (`honourStop`, `stopField`), it ends an answer at the first of the request's `stop`
 * strings met and names it on the finishing chunk, as vLLM (`stop_reason`) and SGLang
 * (`matched_stop`) do.
 *
 * It records the chat requests it received (their bodies) and tells whether the client closed a request's
 * connection before the answer was complete (to check that cancellation reaches the upstream).
 * `/health` answers 200 or 503 as the test switches it; `/v1/models` lists the one model.
 */
import http from "node:http";
import type net from "node:net";

/** What the server does with one chat request. */
export type FaultStep =
  /**
   * A normal answer: `text` pieces as chunks (streamed) or joined (not streamed); `firstTokenDelayMs` after the headers.
   * `toolCalls` (streamed only): after the text, each call as OpenAI's deltas (its id and name, then its
   * `arguments` pieces), finishing `tool_calls`.
   */
  | { kind: "complete"; text?: string[]; firstTokenDelayMs?: number; chunkDelayMs?: number; toolCalls?: FaultToolCall[] }
  /** Reads the request and never answers (no headers). */
  | { kind: "hang" }
  /** Streams `afterChunks` content chunks (all choices counted), then destroys the socket (no finish, no `[DONE]`). */
  | { kind: "cut"; afterChunks: number }
  /** Answers `status` with an OpenAI error body (and `retry-after` when given: seconds or a date). */
  | { kind: "status"; status: number; retryAfter?: string; message?: string }
  /** Streams `afterChunks` good chunks, then a chunk that is not JSON, then ends. */
  | { kind: "garbage"; afterChunks?: number };

/** A tool call a scripted answer makes: its function's name and its arguments' pieces. */
export type FaultToolCall = { name: string; arguments: string[] };

/** A chat request the server received. */
export type ReceivedRequest = {
  body: Record<string, unknown>;
  authorization: string | undefined;
  /** True once the client closed the connection before the answer was complete. */
  closedByClient: boolean;
  /** Resolves when the client closes the connection before the answer was complete. */
  clientClosed: Promise<void>;
};

/** A handler for a route the test adds (`"POST /tokenize"`): it writes the whole answer. */
export type RouteHandler = (body: unknown, response: http.ServerResponse, request: http.IncomingMessage) => void;

export type FaultUpstreamOptions = {
  /** The model it serves (default `fault-model`). */
  model?: string;
  /** The normal answer's pieces (default `["Hello", " there", "!"]`). */
  text?: string[];
  /** `max_model_len` in `/v1/models`, when given. */
  maxModelLen?: number;
  /** More routes, by `"METHOD /path"`; they win over the built-in ones. */
  routes?: Record<string, RouteHandler>;
  /** The port to listen on (default: a free one); for a server that comes up where one was expected. */
  port?: number;
  /**
   * Answers at most the request's `max_tokens` (or `max_completion_tokens`) pieces per choice,
   * finishing `length` when that cut the answer, as a real server does (default: the whole text).
   */
  honourMaxTokens?: boolean;
  /**
   * Ends the answer before the first of the request's `stop` strings its text meets (which is
   * not sent, nor anything after it), finishing `stop`, as a real server does (default: `stop`
   * is ignored). Implied by `stopField`.
   */
  honourStop?: boolean;
  /**
   * The field of each finishing choice that says why it stopped, as one kind does: vLLM's
   * `stop_reason` (the stop string met, else null) or SGLang's `matched_stop` (the stop string
   * met, else the id of the end-of-text token that ended it, a number). Default: none (OpenAI, Ollama, llama-server).
   */
  stopField?: "stop_reason" | "matched_stop";
};

/** SGLang's `matched_stop` for a reply its model ended itself: the end-of-text token's id (Qwen's, as recorded). */
export const FAULT_END_OF_TEXT_ID = 151645;

const DEFAULT_TEXT = ["Hello", " there", "!"];
const PROMPT_TOKENS = 7;

export class FaultUpstream {
  readonly #server: http.Server;
  readonly #sockets = new Set<net.Socket>();
  readonly #options: FaultUpstreamOptions;
  readonly #script: FaultStep[] = [];
  /**
   * What requests do once the script is used up; a function is asked at each request (one shared
   * by two members decides for the pair: "the first request to either fails").
   */
  mode: FaultStep | (() => FaultStep) = { kind: "complete" };
  /** `/health` answers 200 while true, 503 (as llama-server does while loading) otherwise. */
  healthy = true;
  /** Chat requests received, in order. */
  readonly requests: ReceivedRequest[] = [];
  /** The `authorization` header of each `/health` and `/v1/models` request. */
  readonly probeAuthorizations: (string | undefined)[] = [];
  #port = 0;

  private constructor(options: FaultUpstreamOptions) {
    this.#options = options;
    this.#server = http.createServer((request, response) => void this.#handle(request, response));
    this.#server.on("connection", (socket) => {
      this.#sockets.add(socket);
      socket.on("close", () => this.#sockets.delete(socket));
    });
  }

  /** Starts a server on 127.0.0.1 and a free port. */
  static async start(options: FaultUpstreamOptions = {}): Promise<FaultUpstream> {
    const upstream = new FaultUpstream(options);
    await new Promise<void>((resolve) => upstream.#server.listen(options.port ?? 0, "127.0.0.1", resolve));
    upstream.#port = (upstream.#server.address() as net.AddressInfo).port;
    return upstream;
  }

  /** `http://127.0.0.1:<port>`: where `/health` lives. */
  get origin(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  /** `http://127.0.0.1:<port>/v1`. */
  get baseUrl(): string {
    return `${this.origin}/v1`;
  }

  /** The steps for the next chat requests, in order; then `mode` again. */
  script(...steps: FaultStep[]): void {
    this.#script.push(...steps);
  }

  /** Resolves once `count` chat requests have arrived; rejects after `timeoutMs`. */
  async waitForRequests(count: number, timeoutMs = 2000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.requests.length < count) {
      if (Date.now() > deadline) throw new Error(`Expected ${count} requests upstream, got ${this.requests.length}`);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }

  /** Cuts every connection and stops listening. */
  async close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  async #handle(request: http.IncomingMessage, response: http.ServerResponse): Promise<void> {
    const raw = await readBody(request);
    let body: unknown;
    try {
      body = raw === "" ? undefined : JSON.parse(raw);
    } catch {
      body = raw;
    }
    const path = new URL(request.url ?? "/", "http://x").pathname;
    const route = this.#options.routes?.[`${request.method} ${path}`];
    if (route !== undefined) return route(body, response, request);
    if (request.method === "GET" && path === "/health") return this.#health(request, response);
    if (request.method === "GET" && path === "/v1/models") return this.#models(request, response);
    if (request.method === "POST" && path === "/v1/chat/completions") return this.#chat(request, response, (body ?? {}) as Record<string, unknown>);
    if (request.method === "POST" && path === "/v1/completions") return this.#chat(request, response, (body ?? {}) as Record<string, unknown>, "completions");
    sendJson(response, 404, { error: { message: `No route ${request.method} ${path}`, type: "invalid_request_error", code: "not_found" } });
  }

  #health(request: http.IncomingMessage, response: http.ServerResponse): void {
    this.probeAuthorizations.push(request.headers.authorization);
    if (this.healthy) sendJson(response, 200, { status: "ok" });
    else sendJson(response, 503, { error: { code: 503, message: "Loading model", type: "unavailable_error" } });
  }

  #models(request: http.IncomingMessage, response: http.ServerResponse): void {
    this.probeAuthorizations.push(request.headers.authorization);
    if (!this.healthy) return sendJson(response, 503, { error: { message: "unavailable", type: "service_unavailable", code: "unavailable" } });
    const model: Record<string, unknown> = { id: this.#model, object: "model", created: 0, owned_by: "fault" };
    if (this.#options.maxModelLen !== undefined) model.max_model_len = this.#options.maxModelLen;
    sendJson(response, 200, { object: "list", data: [model] });
  }

  get #model(): string {
    return this.#options.model ?? "fault-model";
  }

  /** `wire`: a chat completion, or a text completion (`/v1/completions`: `text_completion` objects, prompts × `n` choices). */
  async #chat(request: http.IncomingMessage, response: http.ServerResponse, body: Record<string, unknown>, wire: "chat" | "completions" = "chat"): Promise<void> {
    const step = this.#script.shift() ?? (typeof this.mode === "function" ? this.mode() : this.mode);
    let finished = false;
    let markClosed: () => void = () => {};
    const received: ReceivedRequest = {
      body,
      authorization: request.headers.authorization,
      closedByClient: false,
      clientClosed: new Promise<void>((resolve) => (markClosed = resolve)),
    };
    this.requests.push(received);
    response.on("close", () => {
      if (finished || response.writableFinished) return;
      received.closedByClient = true;
      markClosed();
    });
    /** The server ends the exchange itself: not the client's doing. */
    const endByServer = (destroy: boolean) => {
      finished = true;
      if (destroy) response.socket?.destroy();
      else response.end();
    };

    if (step.kind === "hang") return;
    if (step.kind === "status") {
      const headers: Record<string, string> = step.retryAfter === undefined ? {} : { "retry-after": step.retryAfter };
      finished = true;
      return sendJson(response, step.status, { error: { message: step.message ?? `Injected status ${step.status}`, type: "server_error", code: String(step.status) } }, headers);
    }

    const id = `chatcmpl-fault-${this.requests.length}`;
    const whole = (step.kind === "complete" ? step.text : undefined) ?? this.#options.text ?? DEFAULT_TEXT;
    const limit = this.#options.honourMaxTokens === true ? (body.max_completion_tokens ?? body.max_tokens) : undefined;
    const stops = this.#options.honourStop === true || this.#options.stopField !== undefined ? stopsOf(body.stop) : [];
    const { pieces: text, generated, finishReason, stopMet } = answerOf(whole, typeof limit === "number" ? limit : undefined, stops);
    /** The finishing choice's `stopField`, when the server says one. */
    const stopFields = (reason: string): Record<string, unknown> => {
      const field = this.#options.stopField;
      if (field === undefined) return {};
      if (reason !== "stop") return { [field]: null };
      return { [field]: stopMet ?? (field === "matched_stop" ? FAULT_END_OF_TEXT_ID : null) };
    };
    const prompts = wire === "completions" && Array.isArray(body.prompt) && typeof body.prompt[0] !== "number" ? body.prompt.length : 1;
    const choices = prompts * (typeof body.n === "number" && Number.isInteger(body.n) && body.n > 1 ? body.n : 1);
    const indexes = Array.from({ length: choices }, (_, index) => index);
    const completionTokens = generated * choices;
    const usage = { prompt_tokens: PROMPT_TOKENS * prompts, completion_tokens: completionTokens, total_tokens: PROMPT_TOKENS * prompts + completionTokens };
    const object = wire === "chat" ? "chat.completion.chunk" : "text_completion";
    if (body.stream !== true) {
      if (step.kind === "complete" && step.firstTokenDelayMs) await sleep(step.firstTokenDelayMs);
      if (response.destroyed) return;
      finished = true;
      return sendJson(response, 200, {
        id,
        object: wire === "chat" ? "chat.completion" : "text_completion",
        created: 0,
        model: this.#model,
        choices: indexes.map((index) => ({
          index,
          ...(wire === "chat" ? { message: { role: "assistant", content: text.join("") } } : { text: text.join("") }),
          logprobs: null,
          finish_reason: finishReason,
          ...stopFields(finishReason),
        })),
        usage,
      });
    }

    response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    // A text completion's chunk carries the delta's content as `text`.
    const chunk = (delta: Record<string, unknown>, finishReason: string | null = null, index = 0) => ({
      id,
      object,
      created: 0,
      model: this.#model,
      choices: [
        {
          index,
          ...(wire === "chat" ? { delta } : { text: typeof delta.content === "string" ? delta.content : "" }),
          logprobs: null,
          finish_reason: finishReason,
          ...(finishReason !== null ? stopFields(finishReason) : {}),
        },
      ],
    });
    const write = (data: string) => new Promise<void>((resolve) => (response.destroyed ? resolve() : response.write(`data: ${data}\n\n`, () => resolve())));
    if (wire === "chat") for (const index of indexes) await write(JSON.stringify(chunk({ role: "assistant", content: "" }, null, index)));
    if (step.kind === "complete" && step.firstTokenDelayMs) await sleep(step.firstTokenDelayMs);

    // Every choice's pieces, interleaved: piece 0 of each choice, then piece 1 of each...
    const pieces = text.flatMap((piece) => indexes.map((index) => ({ piece, index })));
    const sent = step.kind === "cut" ? step.afterChunks : step.kind === "garbage" ? (step.afterChunks ?? 0) : pieces.length;
    for (const [position, { piece, index }] of pieces.slice(0, sent).entries()) {
      if (response.destroyed) return;
      if (position > 0 && step.kind === "complete" && step.chunkDelayMs) await sleep(step.chunkDelayMs);
      await write(JSON.stringify(chunk({ content: piece }, null, index)));
    }
    const toolCalls = step.kind === "complete" ? (step.toolCalls ?? []) : [];
    for (const index of indexes) {
      for (const [callIndex, call] of toolCalls.entries()) {
        const start = { index: callIndex, id: `call_fault_${callIndex}`, type: "function", function: { name: call.name, arguments: "" } };
        await write(JSON.stringify(chunk({ tool_calls: [start] }, null, index)));
        for (const piece of call.arguments) await write(JSON.stringify(chunk({ tool_calls: [{ index: callIndex, function: { arguments: piece } }] }, null, index)));
      }
    }
    if (response.destroyed) return;
    if (step.kind === "cut") return endByServer(true);
    if (step.kind === "garbage") {
      await write("{not json at all");
      return endByServer(false);
    }
    for (const index of indexes) await write(JSON.stringify(chunk({}, toolCalls.length > 0 && finishReason === "stop" ? "tool_calls" : finishReason, index)));
    const options = body.stream_options as { include_usage?: boolean } | undefined;
    if (options?.include_usage === true) await write(JSON.stringify({ id, object, created: 0, model: this.#model, choices: [], usage }));
    await write("[DONE]");
    endByServer(false);
  }
}

/** The request's stop strings (`stop` is a string or an array of them). */
function stopsOf(stop: unknown): string[] {
  const given = typeof stop === "string" ? [stop] : Array.isArray(stop) ? stop : [];
  return given.filter((item): item is string => typeof item === "string" && item !== "");
}

/**
 * What a server answers with `whole`'s pieces (one token each): at most `limit` of them, and
 * only the text before the first of `stops` met (held back over pieces, as servers hold back a
 * partial stop string). `generated`: the pieces the model made (a stop string's among them).
 */
export function answerOf(whole: readonly string[], limit: number | undefined, stops: readonly string[]): { pieces: string[]; generated: number; finishReason: "stop" | "length"; stopMet?: string } {
  let joined = "";
  for (let count = 0; count < whole.length; count++) {
    if (limit !== undefined && count >= limit) return { pieces: whole.slice(0, count), generated: count, finishReason: "length" };
    joined += whole[count];
    let met: { index: number; stop: string } | undefined;
    for (const stop of stops) {
      const index = joined.indexOf(stop);
      if (index !== -1 && (met === undefined || index < met.index)) met = { index, stop };
    }
    if (met === undefined) continue;
    const pieces: string[] = [];
    let left = met.index;
    for (const piece of whole.slice(0, count + 1)) {
      if (left <= 0) break;
      pieces.push(piece.slice(0, left));
      left -= piece.length;
    }
    return { pieces, generated: count + 1, finishReason: "stop", stopMet: met.stop };
  }
  return { pieces: [...whole], generated: whole.length, finishReason: "stop" };
}

function readBody(request: http.IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    request.on("error", () => resolve(""));
  });
}

/** Writes a JSON answer. */
export function sendJson(response: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  response.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text), ...headers });
  response.end(text);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
